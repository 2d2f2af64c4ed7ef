#include "computedomain/controller/domain_status.h"

#include <algorithm>
#include <set>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "common/json_fields.h"
#include "common/log.h"
#include "computedomain/clique_membership.h"
#include "computedomain/controller/daemon_pods.h"

namespace nvdra::computedomain::controller {

using common::Status;
using k8s::cache::ObjectPtr;
using nlohmann::json;

namespace {

bool ByName(const json& a, const json& b) { return a.value("name", "") < b.value("name", ""); }

// status.nodes from the cliques, and from the pods of daemons on nodes
// without a fabric (no clique; their pod says it), sorted by name. An entry
// that still says NotReady while its daemon's live pod (same node, clique
// and address: the same daemon) already says Ready counts as Ready: the
// clique write that copies it follows within tens of milliseconds, and the
// kubelet plugin releases the node's waiting channel claim on the pod's
// Ready already, so the domain turns Ready with its last channel rather
// than a clique write and a status batch later (issue 27).
json NodesFromCliques(const std::vector<k8s::ComputeDomainClique>& cliques, const std::vector<ObjectPtr>& pods) {
  std::set<std::tuple<std::string, std::string, std::string>> ready_pods;  // node, clique, address
  for (const ObjectPtr& pod_ptr : pods) {
    const json& pod = *pod_ptr;
    if (IsDeleting(pod) || DaemonPodStatus(pod) != kDaemonReady) continue;
    const std::string clique = LabelOf(pod, kComputeDomainCliqueLabel);
    if (!clique.empty()) ready_pods.emplace(DaemonPodNode(pod), clique, DaemonPodIp(pod));
  }
  json nodes = json::array();
  for (const k8s::ComputeDomainClique& clique : cliques) {
    for (const CliqueMember& m : CliqueMembers(clique.json())) {
      const bool pod_ready = ready_pods.contains({m.node_name, m.clique_id, m.ip_address});
      const std::string status =
          pod_ready ? std::string(kDaemonReady) : (m.status.empty() ? std::string(kDaemonNotReady) : m.status);
      json node = {{"name", m.node_name}, {"ipAddress", m.ip_address}, {"cliqueID", m.clique_id}, {"status", status}};
      if (m.index) node["index"] = *m.index;
      if (status != kDaemonReady && !m.reason.empty()) node["reason"] = m.reason;
      if (status != kDaemonReady && !m.message.empty()) node["message"] = m.message;
      nodes.push_back(std::move(node));
    }
  }
  for (const ObjectPtr& pod_ptr : pods) {
    const json& pod = *pod_ptr;
    if (!HasLabelKey(pod, kComputeDomainCliqueLabel) || !LabelOf(pod, kComputeDomainCliqueLabel).empty()) continue;
    const std::string node = DaemonPodNode(pod);
    if (node.empty() || IsDeleting(pod)) continue;
    nodes.push_back({{"name", node},
                     {"ipAddress", DaemonPodIp(pod)},
                     {"cliqueID", ""},
                     {"index", -1},
                     {"status", PodIsReady(pod) ? kDaemonReady : kDaemonNotReady}});
  }
  std::sort(nodes.begin(), nodes.end(), ByName);
  return nodes;
}

}  // namespace

DomainStatusReport ComputeDomainStatus(const k8s::ComputeDomain& cd,
                                       const std::vector<k8s::ComputeDomainClique>& cliques,
                                       const std::vector<ObjectPtr>& daemon_pods, const ControllerOptions& options) {
  DomainStatusReport report;
  if (!options.ManagesDaemons()) return report;
  if (options.cliques_enabled) {
    report.nodes = NodesFromCliques(cliques, daemon_pods);
  } else if (cd.json().contains("/status/nodes"_json_pointer)) {
    report.nodes = cd.json()["status"]["nodes"];  // written by the daemons themselves
  }
  std::vector<std::string> not_ready;  // "node" or "node (message)"
  for (const json& n : report.nodes) {
    if (n.value("status", std::string(kDaemonNotReady)) == kDaemonReady) continue;
    const std::string message = common::JsonString(n, "message");
    not_ready.push_back(message.empty() ? n.value("name", "") : fmt::format("{} ({})", n.value("name", ""), message));
  }
  const std::int64_t want = cd.num_nodes();
  if (static_cast<std::int64_t>(report.nodes.size()) < want) {
    report.status = "NotReady";
    report.why =
        fmt::format("waiting for nodes: {} of {} (spec.numNodes) IMEX daemons joined", report.nodes.size(), want);
  } else if (!not_ready.empty()) {
    report.status = "NotReady";
    if (not_ready.size() > 8) not_ready.resize(8);
    report.why = fmt::format("IMEX daemons not ready on: {}", fmt::join(not_ready, ", "));
  }
  return report;
}

bool StatusWriteMemo::AlreadyWritten(const std::string& uid, const std::string& cached_version,
                                     const json& body) const {
  auto it = written_.find(uid);
  if (it == written_.end() || it->second.body != body) return false;
  // The cache still shows the object we wrote on: our write is not in it yet.
  if (cached_version == it->second.base_version) return true;
  // Or an object between that one and ours (another writer's change, e.g. a
  // finalizer patch, arrived first). resourceVersions are etcd revisions in
  // practice; where they do not read as numbers, write again.
  std::uint64_t cached = 0, written = 0;
  const auto parse = [](const std::string& text, std::uint64_t& out) {
    if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 19) return false;
    out = std::stoull(text);
    return true;
  };
  return parse(cached_version, cached) && parse(it->second.result_version, written) && cached < written;
}

void StatusWriteMemo::Remember(const std::string& uid, const std::string& base_version,
                               const std::string& result_version, const json& body) {
  written_[uid] = {base_version, result_version, body};
}

std::chrono::milliseconds NodesWritePacer::Wait(const std::string& uid, Clock::time_point now) const {
  auto it = last_.find(uid);
  if (it == last_.end() || now - it->second >= interval_) return std::chrono::milliseconds(0);
  return std::chrono::ceil<std::chrono::milliseconds>(it->second + interval_ - now);
}

void DomainStatusUpdater::ObserveStatus(const std::string& uid, const std::string& status) {
  if (options_.metrics == nullptr) return;
  common::GaugeFamily info = options_.metrics->AddGauge(
      "nvidia_dra_compute_domain_info",
      "Current number of ComputeDomain custom resources in the cluster as seen by compute-domain-controller, "
      "partitioned by compute domain status.",
      {"status"});
  common::MutexLock lock(status_mu_);
  auto it = observed_status_.find(uid);
  if (it != observed_status_.end()) {
    if (it->second == status) return;
    info.WithLabels({it->second}).Dec();
    observed_status_.erase(it);
  }
  if (status.empty()) return;
  info.WithLabels({status}).Inc();
  observed_status_[uid] = status;
}

void DomainStatusUpdater::Forget(const std::string& uid) {
  common::MutexLock lock(status_mu_);
  last_category_.erase(uid);
  written_.Forget(uid);
  nodes_pacer_.Forget(uid);
}

Status DomainStatusUpdater::Update(const k8s::ComputeDomain& cd, std::stop_token stop) {
  const std::string uid = cd.uid();
  std::vector<k8s::ComputeDomainClique> cliques;
  std::vector<ObjectPtr> pods;
  if (options_.WritesCliques()) {
    for (const ObjectPtr& clique : CachedByLabel(*caches_.cliques, uid)) cliques.emplace_back(*clique);
    pods = CachedByLabel(*caches_.pods, uid);
  }
  const DomainStatusReport report = ComputeDomainStatus(cd, cliques, pods, options_);
  ObserveStatus(uid, report.status);

  // Events on transitions only (and on a new kind of reason), not per poll.
  bool emit = false;
  {
    common::MutexLock lock(status_mu_);
    std::string& last = last_category_[uid];
    emit = last != report.Category();
    last = report.Category();
  }
  if (emit) {
    if (report.status == "Ready") {
      writer_.Emit(cd, k8s::EventType::kNormal, "Ready",
                   fmt::format("ComputeDomain is Ready ({} nodes)", report.nodes.size()));
    } else {
      writer_.Emit(cd, k8s::EventType::kWarning, "NotReady", report.why);
    }
  }

  json current_nodes = cd.json().contains("/status/nodes"_json_pointer) ? cd.json()["status"]["nodes"] : json::array();
  std::sort(current_nodes.begin(), current_nodes.end(), ByName);
  const std::string current_status = cd.status_as_written();
  const bool write_nodes = options_.WritesCliques() && current_nodes != report.nodes;
  LOG_INFO(4, "status computed",
           {{"computeDomain", cd.Key()}, {"resourceVersion", cd.resource_version()}, {"status", report.status},
            {"nodes", report.nodes.dump()}, {"write", current_status != report.status || write_nodes}});
  if (current_status == report.status && !write_nodes) return common::OkStatus();
  json patch_status = {{"status", report.status}};
  if (write_nodes) patch_status["nodes"] = report.nodes;
  const json patch = {{"status", patch_status}};
  const std::string base = cd.resource_version();
  {
    common::MutexLock lock(status_mu_);
    if (written_.AlreadyWritten(uid, base, patch)) return common::OkStatus();  // our write is not in the cache yet
    if (current_status == report.status) {
      // Only status.nodes changed: paced (NodesWritePacer); the reconcile
      // after the wait writes what the entries say then.
      if (const auto wait = nodes_pacer_.Wait(uid, NodesWritePacer::Clock::now()); wait.count() > 0) {
        look_again_(cd.Key(), wait);
        return common::OkStatus();
      }
    }
  }
  auto result = writer_.Patch(k8s::resources::kComputeDomains, cd.namespace_name(), cd.name(),
                              k8s::PatchType::kMerge, patch, "status", stop);
  if (!result.ok()) return result.status();
  {
    common::MutexLock lock(status_mu_);
    written_.Remember(uid, base, common::JsonString(*result, {"metadata", "resourceVersion"}), patch);
    if (write_nodes) nodes_pacer_.Wrote(uid, NodesWritePacer::Clock::now());
  }
  if (current_status != report.status) {
    LOG_INFO(0, "status changed",
             {{"computeDomain", cd.Key()}, {"status", report.status}, {"nodes", report.nodes.size()}});
  }
  return common::OkStatus();
}

}  // namespace nvdra::computedomain::controller
