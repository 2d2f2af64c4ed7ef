#pragma once

// The domain label on nodes: set early, when a workload claim of a domain is
// allocated on a node, and removed with the domain. Why early: the DaemonSet
// places the daemon by that label, and the kubelet plugin only sets it when
// the kubelet first prepares the claim, ~1 s after the scheduler's
// allocation at 18 nodes; labelling at allocation starts the daemon that
// much sooner. The plugin still labels at Prepare (claims not made from the
// domain's template) and removes the label with the node's last prepared
// claim of the domain, or at its start when none is prepared there.
// Defines: AllocatedNodeName(), ClaimHasConsumers(), IsWorkloadClaimInUse(),
// NodeLabelDecision, DecideNodeLabel(), NodeLabeler.
//
// Ownership: NodeLabeler borrows the ApiWriter and the caches (both must
// outlive it) and owns the memory of its recent label writes.
// Thread-safety: the free functions are pure; NodeLabeler is thread-safe.

#include <chrono>
#include <map>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/mutex.h"
#include "common/status.h"
#include "computedomain/controller/api_writer.h"
#include "computedomain/controller/caches.h"
#include "k8s/workqueue/clock.h"

namespace nvdra::computedomain::controller {

// The node a claim's devices were allocated on: the allocation's node
// selector (metadata.name In [node]), as the scheduler writes it for devices
// of a node-local pool; "" when it names no single node.
std::string AllocatedNodeName(const nlohmann::json& claim);
// A claim some pod is reserved to use (status.reservedFor, which the
// scheduler writes with the allocation and the resource-claim controller
// empties once its pods are gone).
bool ClaimHasConsumers(const nlohmann::json& claim);
// A workload claim (target label "Workload"), allocated, reserved for a
// pod and not being deleted. Its transition to this state is what labels.
bool IsWorkloadClaimInUse(const nlohmann::json& claim);

enum class NodeLabelDecision {
  kLabel,             // label the node for the domain
  kAlreadyLabelled,   // it is, by the cache or our own recent write
  kOtherNamespace,    // the claim is not in the domain's namespace
  kServesOtherDomain, // the node is labelled for another domain
};

// `current`: the node's domain label (cached, else our own recent write).
NodeLabelDecision DecideNodeLabel(std::string_view claim_namespace, std::string_view domain_namespace,
                                  std::string_view cd_uid, std::string_view current);

class NodeLabeler {
 public:
  // How long our own node label write stands in for the node cache.
  static constexpr std::chrono::seconds kWriteMemory{10};

  NodeLabeler(ApiWriter& writer, const ControllerCaches& caches) : writer_(writer), caches_(caches) {}

  // Labels the node the cached workload claim `claim_key` ("<ns>/<name>")
  // was allocated on for its domain, unless DecideNodeLabel says otherwise.
  // A claim or domain gone (or going) is OK; API errors as they come.
  common::Status LabelAllocatedNode(const std::string& claim_key, std::stop_token stop);
  // Removes the domain label from the nodes labelled for `cd_uid`, or with
  // "" from those labelled for a domain that is not cached (stale).
  common::Status RemoveNodeLabels(const std::string& cd_uid, std::stop_token stop);

 private:
  ApiWriter& writer_;
  const ControllerCaches& caches_;

  // Guards the members below, and is held across one label decision and its
  // write: two domains' claims on one node (channel isolation) must not both
  // label it. The write is one small patch; nothing else waits on it.
  common::Mutex label_decision_mu_;
  // node -> (domain UID, when) of our early node label writes
  std::map<std::string, std::pair<std::string, k8s::workqueue::TimePoint>> written_ GUARDED_BY(label_decision_mu_);
};

}  // namespace nvdra::computedomain::controller
