#pragma once

// Keeps one object a ComputeDomain owns (its DaemonSet, a claim template) as
// rendered: create when missing, update when it drifted, replace a claim
// template whose (immutable) spec differs, leave someone else's object of
// that name alone. Defines: OwnedObjectAction, DecideOwnedObjectAction(),
// IsSubset(), EnsureOwnedObject().
//
// Ownership: none (functions). Thread-safety: the decisions are pure;
// EnsureOwnedObject is thread-safe as its ApiWriter and cache are.

#include <stop_token>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "computedomain/controller/api_writer.h"
#include "k8s/cache/informer.h"
#include "k8s/client.h"
#include "k8s/objects/compute_domain.h"

namespace nvdra::computedomain::controller {

// Whether every field of `want` is in `have` with the same value (arrays
// element by element, same length). Server defaults (fields we never set)
// do not count as a difference, so an unchanged object is never rewritten;
// nor do zero values absent from `have` (the API server omits them).
bool IsSubset(const nlohmann::json& want, const nlohmann::json& have);

enum class OwnedObjectAction {
  kNone,     // as wanted
  kForeign,  // not labelled for this domain: someone else's; an Event, no write
  kRelease,  // being deleted under a live domain: let it go, recreated after
  kReplace,  // a claim template whose spec differs: delete and recreate
  kUpdate,   // write the wanted spec, labels and finalizer over it
};

// What to do about `have`, the existing object of `desired`'s name, for
// domain `cd_uid`. `immutable_spec`: claim templates.
OwnedObjectAction DecideOwnedObjectAction(const nlohmann::json& desired, const nlohmann::json& have,
                                          std::string_view cd_uid, bool immutable_spec);

// Makes the object `desired` exist as wanted (see OwnedObjectAction), looked
// up in `cache` (label-selected, so an unlabelled object of that name is
// found by a Get after the create conflicts). kFailedPrecondition (and an
// Event on `cd`) for someone else's object; kUnavailable while one we let go
// is still being deleted; API errors as they come.
common::Status EnsureOwnedObject(ApiWriter& writer, const k8s::ComputeDomain& cd, const k8s::ResourceRef& ref,
                                 const k8s::cache::Informer& cache, const nlohmann::json& desired,
                                 std::stop_token stop);

}  // namespace nvdra::computedomain::controller
