#include "computedomain/controller/node_labeler.h"

#include <set>

#include <fmt/format.h>

#include "common/json_fields.h"
#include "common/log.h"
#include "computedomain/clique_membership.h"
#include "computedomain/controller/controller_options.h"
#include "computedomain/controller/daemon_pods.h"
#include "k8s/api_error.h"

namespace nvdra::computedomain::controller {

using common::OkStatus;
using common::Status;
using k8s::cache::ObjectPtr;
using nlohmann::json;

std::string AllocatedNodeName(const json& claim) {
  const json::json_pointer terms_at("/status/allocation/nodeSelector/nodeSelectorTerms");
  if (!claim.contains(terms_at) || !claim.at(terms_at).is_array()) return "";
  for (const json& term : claim.at(terms_at)) {
    for (const json& field : term.value("matchFields", json::array())) {
      const json values = field.value("values", json::array());
      if (field.value("key", "") == "metadata.name" && field.value("operator", "") == "In" && values.size() == 1 &&
          values[0].is_string()) {
        return values[0].get<std::string>();
      }
    }
  }
  return "";
}

bool ClaimHasConsumers(const json& claim) {
  const json::json_pointer reserved_at("/status/reservedFor");
  return claim.contains(reserved_at) && claim.at(reserved_at).is_array() && !claim.at(reserved_at).empty();
}

bool IsWorkloadClaimInUse(const json& claim) {
  return claim.contains("/status/allocation"_json_pointer) && ClaimHasConsumers(claim) && !IsDeleting(claim) &&
         LabelOf(claim, kTargetLabel) == "Workload";
}

NodeLabelDecision DecideNodeLabel(std::string_view claim_namespace, std::string_view domain_namespace,
                                  std::string_view cd_uid, std::string_view current) {
  // Namespace isolation, as the plugin's: anyone can put the domain's labels
  // on a claim of theirs; only a claim in the domain's own namespace may
  // place its daemon (the plugin refuses the others at Prepare).
  if (claim_namespace != domain_namespace) return NodeLabelDecision::kOtherNamespace;
  if (current == cd_uid) return NodeLabelDecision::kAlreadyLabelled;
  // The kubelet plugin refuses the claim with the reason when it prepares it.
  if (!current.empty()) return NodeLabelDecision::kServesOtherDomain;
  return NodeLabelDecision::kLabel;
}

Status NodeLabeler::LabelAllocatedNode(const std::string& claim_key, std::stop_token stop) {
  ObjectPtr claim = caches_.claims->store().Get(claim_key);
  // Without consumers the claim is on its way out (its pod is gone, after
  // the kubelet plugin's Unprepare removed the node's label): labelling now
  // would keep a daemon on a node nothing uses.
  if (!claim || IsDeleting(*claim) || !ClaimHasConsumers(*claim)) return OkStatus();
  const std::string uid = LabelOf(*claim, kComputeDomainLabel);
  const std::string node = AllocatedNodeName(*claim);
  if (uid.empty() || node.empty()) return OkStatus();
  const std::vector<ObjectPtr> domains = CachedDomainsWithUid(caches_, uid);
  if (domains.empty() || IsDeleting(*domains.front())) return OkStatus();
  const k8s::ComputeDomain cd(*domains.front());
  const std::string claim_namespace = common::JsonString(*claim, {"metadata", "namespace"});

  common::MutexLock lock(label_decision_mu_);
  std::string current;
  if (ObjectPtr labelled = caches_.labelled_nodes->store().Get(node)) {
    current = LabelOf(*labelled, kComputeDomainLabel);
  }
  // Our own recent write, not in the cache yet.
  auto it = written_.find(node);
  if (current.empty() && it != written_.end() &&
      k8s::workqueue::RealClock().Now() - it->second.second < kWriteMemory) {
    current = it->second.first;
  }
  switch (DecideNodeLabel(claim_namespace, cd.namespace_name(), uid, current)) {
    case NodeLabelDecision::kAlreadyLabelled:
      return OkStatus();
    case NodeLabelDecision::kOtherNamespace:
      LOG_INFO(1, "not labelling a node for a claim of another namespace than its ComputeDomain's",
               {{"claim", claim_key}, {"computeDomain", cd.Key()}, {"node", node}});
      return OkStatus();
    case NodeLabelDecision::kServesOtherDomain:
      LOG_INFO(1, "not labelling a node that serves another ComputeDomain",
               {{"node", node}, {"computeDomain", uid}, {"labelled", current}, {"claim", claim_key}});
      return OkStatus();
    case NodeLabelDecision::kLabel:
      break;
  }
  auto patched = writer_.Patch(k8s::resources::kNodes, "", node, k8s::PatchType::kMerge,
                               {{"metadata", {{"labels", {{std::string(kComputeDomainLabel), uid}}}}}}, "", stop);
  if (!patched.ok()) return k8s::IsNotFound(patched.status()) ? OkStatus() : patched.status();
  written_[node] = {uid, k8s::workqueue::RealClock().Now()};
  LOG_INFO(2, "node labelled for a ComputeDomain when its channel was allocated",
           {{"node", node}, {"computeDomain", uid}, {"claim", claim_key}});
  return OkStatus();
}

Status NodeLabeler::RemoveNodeLabels(const std::string& cd_uid, std::stop_token stop) {
  k8s::ListOptions list;
  list.label_selector =
      cd_uid.empty() ? std::string(kComputeDomainLabel) : fmt::format("{}={}", kComputeDomainLabel, cd_uid);
  auto nodes = writer_.ListAll(k8s::resources::kNodes, list, stop);
  if (!nodes.ok()) return nodes.status();
  std::set<std::string> live;
  if (cd_uid.empty()) {
    for (const ObjectPtr& cd : caches_.domains->store().List()) {
      live.insert(common::JsonString(*cd, {"metadata", "uid"}));
    }
  }
  for (const json& node : (*nodes)["items"]) {
    if (cd_uid.empty() && live.contains(LabelOf(node, kComputeDomainLabel))) continue;
    auto patched = writer_.Patch(k8s::resources::kNodes, "", common::JsonString(node, {"metadata", "name"}),
                                 k8s::PatchType::kMerge,
                                 {{"metadata", {{"labels", {{std::string(kComputeDomainLabel), nullptr}}}}}}, "", stop);
    if (!patched.ok() && !k8s::IsNotFound(patched.status())) return patched.status();
  }
  return OkStatus();
}

}  // namespace nvdra::computedomain::controller
