#pragma once

// Removing what ComputeDomains leave: the ordered teardown of a domain being
// deleted (its finalizer is ours), the sweep of one domain that vanished
// without it (finalizer removed by someone else, a write that raced the
// deletion), and the periodic sweep of every object labelled for a domain
// that no longer exists. Defines: OwnedObjectName, ClaimTemplatesOf(),
// PlanDaemonObjects(), StaleDomainOf(), DomainCleaner.
//
// Ownership: DomainCleaner borrows the ApiWriter, the caches, the node
// labeler and the options (all must outlive it); it owns nothing else.
// Thread-safety: the free functions are pure; DomainCleaner is thread-safe
// (its collaborators are).

#include <set>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "computedomain/controller/api_writer.h"
#include "computedomain/controller/caches.h"
#include "computedomain/controller/controller_options.h"
#include "computedomain/controller/node_labeler.h"
#include "k8s/client.h"
#include "k8s/objects/compute_domain.h"

namespace nvdra::computedomain::controller {

struct OwnedObjectName {
  const k8s::ResourceRef* ref;
  std::string ns;
  std::string name;
  friend bool operator==(const OwnedObjectName& a, const OwnedObjectName& b) {
    return a.ref->resource == b.ref->resource && a.ns == b.ns && a.name == b.name;
  }
};

// The claim templates a DaemonSet's pods are made from: an earlier
// installation's DaemonSet in an additional namespace may name its daemon
// claim template otherwise than ours.
std::vector<std::string> ClaimTemplatesOf(const nlohmann::json& daemon_set);

// The daemon objects of domain `cd_uid`, in teardown order: our DaemonSet
// and daemon claim template in `driver_namespace`, then each DaemonSet in
// `elsewhere` (the additional namespaces) followed by its claim templates.
std::vector<OwnedObjectName> PlanDaemonObjects(const std::string& cd_uid, const std::string& driver_namespace,
                                               const std::vector<k8s::cache::ObjectPtr>& elsewhere);

// The UID of the domain `object` is labelled for, when that domain is not
// in `live` (the object is stale); "" otherwise.
std::string StaleDomainOf(const nlohmann::json& object, const std::set<std::string>& live);

class DomainCleaner {
 public:
  DomainCleaner(ApiWriter& writer, const ControllerCaches& caches, NodeLabeler& labeler,
                const ControllerOptions& options)
      : writer_(writer), caches_(caches), labeler_(labeler), options_(options) {}

  // The cascade of a domain being deleted, each step's result checked on
  // the server before the next: 1. workload claim template (when ours);
  // 2. daemon objects; 3. node labels; 4. their finalizers off and their
  // absence checked; 5. cliques; 6. the domain's finalizer. kUnavailable
  // while an object is still going (retried); API errors as they come.
  // Idempotent: a successor resumes where a crash left it.
  common::Status Teardown(const k8s::ComputeDomain& cd, std::stop_token stop);
  enum class GoneDomainSweep { kDomainIsLive, kSwept };
  // Removes what domain `cd_uid` left, unless it is cached after all
  // (kDomainIsLive, nothing done). kSwept also when there was nothing; the
  // first error after trying everything.
  common::StatusOr<GoneDomainSweep> CleanupDomain(const std::string& cd_uid, std::stop_token stop);
  // Removes every cached object labelled for a domain that is not cached,
  // and stale node labels. The first error after trying everything; an
  // object still being deleted is not one.
  common::Status CleanupStale(std::stop_token stop);

 private:
  // A cache swept for objects of gone domains, and how its kind is removed.
  struct SweptCache {
    const k8s::cache::Informer* informer;
    const k8s::ResourceRef* ref;
    bool finalized;  // carries our finalizer: released after the delete
  };
  std::vector<SweptCache> SweptCaches() const;
  // Deletes (and releases) `object` of gone domain `cd_uid`; the first error
  // goes to `first_error`. `tolerate_unavailable`: an object still being
  // deleted is not an error.
  void RemoveObjectOfGoneDomain(const SweptCache& cache, const nlohmann::json& object, const std::string& cd_uid,
                                bool tolerate_unavailable, common::Status& first_error, std::stop_token stop);

  ApiWriter& writer_;
  const ControllerCaches& caches_;
  NodeLabeler& labeler_;
  const ControllerOptions& options_;
};

}  // namespace nvdra::computedomain::controller
