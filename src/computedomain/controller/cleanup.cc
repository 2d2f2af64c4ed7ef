#include "computedomain/controller/cleanup.h"

#include "common/crash_point.h"
#include "common/json_fields.h"
#include "common/log.h"
#include "computedomain/clique_membership.h"
#include "computedomain/controller/daemon_pods.h"
#include "k8s/api_error.h"

namespace nvdra::computedomain::controller {

using common::Status;
using k8s::cache::ObjectPtr;
using nlohmann::json;

namespace {

void KeepFirstError(Status& first_error, const Status& status) {
  if (!status.ok() && first_error.ok()) first_error = status;
}

std::string KeyOf(const json& object) {
  return common::JsonString(object, {"metadata", "namespace"}) + "/" + common::JsonString(object, {"metadata", "name"});
}

}  // namespace

std::vector<std::string> ClaimTemplatesOf(const json& daemon_set) {
  std::vector<std::string> names;
  const json::json_pointer claims("/spec/template/spec/resourceClaims");
  if (!daemon_set.contains(claims) || !daemon_set.at(claims).is_array()) return names;
  for (const json& claim : daemon_set.at(claims)) {
    if (std::string name = claim.value("resourceClaimTemplateName", ""); !name.empty()) names.push_back(name);
  }
  return names;
}

std::vector<OwnedObjectName> PlanDaemonObjects(const std::string& cd_uid, const std::string& driver_namespace,
                                               const std::vector<ObjectPtr>& elsewhere) {
  const auto& daemon_sets = k8s::resources::kDaemonSets;
  const auto& claim_templates = k8s::resources::kResourceClaimTemplates;
  std::vector<OwnedObjectName> plan = {{&daemon_sets, driver_namespace, DaemonObjectName(cd_uid)},
                                       {&claim_templates, driver_namespace, DaemonObjectName(cd_uid)}};
  for (const ObjectPtr& other : elsewhere) {
    const std::string ns = common::JsonString(*other, {"metadata", "namespace"});
    plan.push_back({&daemon_sets, ns, common::JsonString(*other, {"metadata", "name"})});
    for (std::string& name : ClaimTemplatesOf(*other)) plan.push_back({&claim_templates, ns, std::move(name)});
  }
  return plan;
}

std::string StaleDomainOf(const json& object, const std::set<std::string>& live) {
  std::string uid = LabelOf(object, kComputeDomainLabel);
  return uid.empty() || live.contains(uid) ? "" : uid;
}

Status DomainCleaner::Teardown(const k8s::ComputeDomain& cd, std::stop_token stop) {
  const std::string uid = cd.uid();
  const std::string ns = cd.namespace_name();
  const std::string workload = cd.channel_resource_claim_template_name();
  const auto& claim_templates = k8s::resources::kResourceClaimTemplates;
  const std::vector<OwnedObjectName> daemon_objects =
      PlanDaemonObjects(uid, options_.driver_namespace, CachedDaemonSetsElsewhere(caches_, uid));
  // The workload template only when it is ours (a user's object of that
  // name was never adopted).
  bool own_workload = false;
  if (ObjectPtr cached = caches_.claim_templates->store().Get(ns + "/" + workload)) {
    own_workload = LabelOf(*cached, kComputeDomainLabel) == uid;
  } else {
    // Created a moment ago and not cached yet, or someone else's (not cached: unlabelled).
    auto current = writer_.Get(claim_templates, ns, workload, stop);
    if (!current.ok() && !k8s::IsNotFound(current.status())) return current.status();
    own_workload = current.ok() && LabelOf(*current, kComputeDomainLabel) == uid;
  }
  // 1. Workload template first: no new workload claims for this domain.
  // Crash points (common/crash_point.h) between the steps let the e2e fault
  // tests end the controller at each one and check that a successor
  // finishes the cascade.
  if (own_workload) RETURN_IF_ERROR(writer_.DeleteOwned(claim_templates, ns, workload, stop));
  common::CrashPoint("cascade-after-workload-template");
  if (options_.ManagesDaemons()) {
    // 2. Daemons and their claim template (also an earlier installation's,
    // in an additional namespace).
    for (const OwnedObjectName& o : daemon_objects) RETURN_IF_ERROR(writer_.DeleteOwned(*o.ref, o.ns, o.name, stop));
    common::CrashPoint("cascade-after-daemonset");
    // 3. Node labels set by the kubelet plugin for this domain.
    RETURN_IF_ERROR(labeler_.RemoveNodeLabels(uid, stop));
    common::CrashPoint("cascade-after-node-labels");
  }
  // 4. Finalizers off, absence checked: workload template, then the daemon's.
  if (own_workload) RETURN_IF_ERROR(writer_.ReleaseOwned(claim_templates, ns, workload, stop));
  if (options_.ManagesDaemons()) {
    for (const OwnedObjectName& o : daemon_objects) RETURN_IF_ERROR(writer_.ReleaseOwned(*o.ref, o.ns, o.name, stop));
    // 5. Cliques: their daemons are gone with the DaemonSet.
    if (caches_.cliques) {
      for (const ObjectPtr& clique : CachedByLabel(*caches_.cliques, uid)) {
        RETURN_IF_ERROR(writer_.DeleteOwned(k8s::resources::kComputeDomainCliques,
                                            common::JsonString(*clique, {"metadata", "namespace"}),
                                            common::JsonString(*clique, {"metadata", "name"}), stop));
      }
    }
    common::CrashPoint("cascade-after-cliques");
  }
  // 6. The domain itself.
  RETURN_IF_ERROR(writer_.ReleaseDomain(cd, stop));
  LOG_INFO(0, "ComputeDomain torn down", {{"computeDomain", cd.Key()}, {"uid", uid}});
  return common::OkStatus();
}

std::vector<DomainCleaner::SweptCache> DomainCleaner::SweptCaches() const {
  std::vector<SweptCache> out;
  const auto add = [&](const std::unique_ptr<k8s::cache::Informer>& informer, const k8s::ResourceRef& ref,
                       bool finalized) {
    if (informer) out.push_back({informer.get(), &ref, finalized});
  };
  add(caches_.claim_templates, k8s::resources::kResourceClaimTemplates, true);
  add(caches_.daemon_sets, k8s::resources::kDaemonSets, true);
  for (const auto& other : caches_.other_daemon_sets) add(other, k8s::resources::kDaemonSets, true);
  add(caches_.cliques, k8s::resources::kComputeDomainCliques, false);
  return out;
}

void DomainCleaner::RemoveObjectOfGoneDomain(const SweptCache& cache, const json& object, const std::string& cd_uid,
                                             bool tolerate_unavailable, Status& first_error, std::stop_token stop) {
  const std::string ns = common::JsonString(object, {"metadata", "namespace"});
  const std::string name = common::JsonString(object, {"metadata", "name"});
  LOG_INFO(0, "removing an object of a ComputeDomain that no longer exists",
           {{"object", cache.ref->Name() + " " + KeyOf(object)}, {"uid", cd_uid}});
  KeepFirstError(first_error, writer_.DeleteOwned(*cache.ref, ns, name, stop));
  if (!cache.finalized) return;
  Status released = writer_.ReleaseOwned(*cache.ref, ns, name, stop);
  if (tolerate_unavailable && released.code() == common::StatusCode::kUnavailable) return;
  KeepFirstError(first_error, released);
}

common::StatusOr<DomainCleaner::GoneDomainSweep> DomainCleaner::CleanupDomain(const std::string& cd_uid,
                                                                              std::stop_token stop) {
  if (cd_uid.empty() || !CachedDomainsWithUid(caches_, cd_uid).empty()) return GoneDomainSweep::kDomainIsLive;
  Status first_error = common::OkStatus();
  for (const SweptCache& cache : SweptCaches()) {
    for (const ObjectPtr& object : CachedByLabel(*cache.informer, cd_uid)) {
      RemoveObjectOfGoneDomain(cache, *object, cd_uid, /*tolerate_unavailable=*/false, first_error, stop);
    }
  }
  if (options_.ManagesDaemons()) KeepFirstError(first_error, labeler_.RemoveNodeLabels(cd_uid, stop));
  if (!first_error.ok()) return first_error;
  return GoneDomainSweep::kSwept;
}

Status DomainCleaner::CleanupStale(std::stop_token stop) {
  std::set<std::string> live;
  for (const ObjectPtr& cd : caches_.domains->store().List()) {
    live.insert(common::JsonString(*cd, {"metadata", "uid"}));
  }
  Status first_error = common::OkStatus();
  for (const SweptCache& cache : SweptCaches()) {
    for (const ObjectPtr& object : cache.informer->store().List()) {
      const std::string uid = StaleDomainOf(*object, live);
      if (uid.empty()) continue;
      RemoveObjectOfGoneDomain(cache, *object, uid, /*tolerate_unavailable=*/true, first_error, stop);
    }
  }
  if (options_.ManagesDaemons()) KeepFirstError(first_error, labeler_.RemoveNodeLabels("", stop));
  return first_error;
}

}  // namespace nvdra::computedomain::controller
