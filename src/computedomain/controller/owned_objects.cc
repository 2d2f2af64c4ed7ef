#include "computedomain/controller/owned_objects.h"

#include <memory>
#include <string>

#include <fmt/format.h>

#include "common/json_fields.h"
#include "common/log.h"
#include "computedomain/clique_membership.h"
#include "computedomain/controller/controller_options.h"

namespace nvdra::computedomain::controller {

using common::OkStatus;
using common::Status;
using nlohmann::json;

namespace {

bool IsZero(const json& value) {
  return value.is_null() || (value.is_number() && value == 0) || (value.is_boolean() && !value.get<bool>()) ||
         (value.is_string() && value.get<std::string>().empty()) || (value.is_structured() && value.empty());
}

const json& Labels(const json& object) { return common::JsonMember(object, {"metadata", "labels"}); }

}  // namespace

bool IsSubset(const json& want, const json& have) {
  if (want.is_object()) {
    if (!have.is_object()) return false;
    for (const auto& [key, value] : want.items()) {
      auto it = have.find(key);
      if (it == have.end()) {
        if (IsZero(value)) continue;  // the API server omits zero values
        return false;
      }
      if (!IsSubset(value, *it)) return false;
    }
    return true;
  }
  if (want.is_array()) {
    if (!have.is_array() || have.size() != want.size()) return false;
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (!IsSubset(want[i], have[i])) return false;
    }
    return true;
  }
  return want == have;
}

OwnedObjectAction DecideOwnedObjectAction(const json& desired, const json& have, std::string_view cd_uid,
                                          bool immutable_spec) {
  const k8s::Object existing(have);
  if (existing.label(kComputeDomainLabel) != cd_uid) return OwnedObjectAction::kForeign;
  if (existing.deletion_timestamp()) return OwnedObjectAction::kRelease;
  const bool spec_matches = IsSubset(common::JsonMember(desired, "spec"), common::JsonMember(have, "spec"));
  if (spec_matches && IsSubset(Labels(desired), Labels(have)) && existing.HasFinalizer(kFinalizer)) {
    return OwnedObjectAction::kNone;
  }
  if (immutable_spec && !spec_matches) return OwnedObjectAction::kReplace;
  return OwnedObjectAction::kUpdate;
}

Status EnsureOwnedObject(ApiWriter& writer, const k8s::ComputeDomain& cd, const k8s::ResourceRef& ref,
                         const k8s::cache::Informer& cache, const json& desired, std::stop_token stop) {
  const k8s::Object wanted(desired);
  const std::string ns = wanted.namespace_name();
  const std::string name = wanted.name();
  const std::string object_name = ref.Name() + " " + ns + "/" + name;
  k8s::cache::ObjectPtr existing = cache.store().Get(ns + "/" + name);
  if (!existing) {
    auto created = writer.Create(ref, ns, desired, stop);
    if (created.ok()) return OkStatus();  // the informer brings it
    if (k8s::IsInvalid(created.status())) {
      // The API server refuses the object itself (a claim template name that
      // is no valid object name: "Bad_Name", ""). Retrying cannot help; the
      // user must hear it, not only the controller's log.
      std::string why = created.status().message();
      if (why.size() > 300) why = why.substr(0, 300) + "...";
      writer.Emit(cd, k8s::EventType::kWarning, "InvalidObject",
                  fmt::format("cannot create {}: {}; set spec.channel.resourceClaimTemplate.name to a lowercase "
                              "RFC 1123 name (letters, digits, '-' and '.')",
                              object_name, why));
      return created.status();
    }
    if (!k8s::IsAlreadyExists(created.status())) return created.status();
    // Not in our label-selected cache: ours but not seen yet, or someone
    // else's object under the name this domain asks for.
    auto current = writer.Get(ref, ns, name, stop);
    if (!current.ok()) return current.status();
    if (k8s::Object(*current).label(kComputeDomainLabel) == cd.uid()) return OkStatus();
    existing = std::make_shared<const json>(*std::move(current));
  }
  const json& have = *existing;
  switch (DecideOwnedObjectAction(desired, have, cd.uid(),
                                  ref.resource == k8s::resources::kResourceClaimTemplates.resource)) {
    case OwnedObjectAction::kNone:
      return OkStatus();
    case OwnedObjectAction::kForeign:
      writer.Emit(cd, k8s::EventType::kWarning, "NameConflict",
                  fmt::format("{} exists and does not belong to this ComputeDomain; delete or rename it, or use "
                              "another spec.channel.resourceClaimTemplate.name",
                              object_name));
      return common::FailedPreconditionError(fmt::format("{} belongs to someone else", object_name));
    case OwnedObjectAction::kRelease:
      // Deleted under a live domain: let it go, the next reconcile recreates it.
      return writer.ReleaseOwned(ref, ns, name, stop);
    case OwnedObjectAction::kReplace:
      // A claim template's spec is immutable: replace it (isolation mode
      // changed, or someone edited it). The delete event requeues the
      // domain, which then creates the new one.
      LOG_INFO(0, "replacing a claim template whose spec is not the wanted one", {{"object", object_name}});
      RETURN_IF_ERROR(writer.DeleteOwned(ref, ns, name, stop));
      return writer.ReleaseOwned(ref, ns, name, stop);
    case OwnedObjectAction::kUpdate:
      break;
  }
  k8s::Object updated(have);
  updated.mutable_json()["spec"] = desired["spec"];
  for (const auto& [key, value] : wanted.labels()) updated.SetLabel(key, value);
  updated.AddFinalizer(kFinalizer);
  auto result = writer.Update(ref, ns, updated.json(), stop);
  if (!result.ok()) return result.status();
  LOG_INFO(1, "updated to the wanted state", {{"object", object_name}});
  return OkStatus();
}

}  // namespace nvdra::computedomain::controller
