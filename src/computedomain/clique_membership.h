#pragma once

// CliqueMembership: what one compute-domain daemon tells the API server about
// itself, and how entries of a ComputeDomainClique "<cdUID>.<cliqueID>" (in
// the driver namespace) are read.
//
// Who writes the clique (gate ComputeDomainCliques, the default): only the
// controller. A daemon writes nothing but its own pod: the clique label
// (kComputeDomainCliqueLabel = its clique ID, empty included, as upstream),
// its readiness (annotation kDaemonStatusAnnotation = Ready/NotReady, with
// kDaemonStatusReasonAnnotation/kDaemonStatusMessageAnnotation when it knows
// why it is NotReady) and its IP (kDaemonIpAnnotation). The controller turns its daemon pods into
// the clique's entries {nodeName, ipAddress (the pod's IP), cliqueID,
// status, index, and reason/message when set}, assigns indexes
// (stable per node, gap-filling; upstream #1418), drops the entries of pods
// that are gone or terminating, and writes each clique with one update per
// change, however many daemons changed. Why: upstream's daemons race on the
// shared object's resourceVersion (#723/#816/#1107); ours first wrote their
// own entries by server-side apply, which never lost an update but made 18
// daemons of one clique contend for one object: each write took 0.25 s at
// the median and up to 2.3 s on the API server at 18 nodes (the server
// retries every conflicting write against the newest object), and a plain
// JSON patch per daemon measured no better (bench/README.md). One writer
// coalesces them; a daemon's writes go to its own pod and never conflict.
// The daemon learns its index and its peers by watching the clique.
//
// Gate off: the entries are the ComputeDomain's status.nodes[] (keyed by
// `name`, through the status subresource); each daemon applies its own
// entry by server-side apply under a field manager of its own, the
// controller applies indexes, and a leaving daemon removes its entry with
// a JSON patch that first tests that the entry at position i still is this
// node's with this pod's IP (a successor pod on the same node is never
// removed by its predecessor).
//
// Ownership: borrows the Client and the optional DaemonMetrics (its failed
// API calls are counted there by verb), which must outlive it.
// Thread-safety: thread-safe (immutable; the Client and the metrics are
// thread-safe).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "computedomain/labels.h"
#include "k8s/client.h"

namespace nvdra::computedomain {

class DaemonMetrics;

// Who this daemon is.
struct DaemonIdentity {
  std::string compute_domain_uid;
  std::string clique_id;
  std::string node_name;
  std::string pod_name;
  std::string pod_namespace;  // also the clique's namespace (the driver namespace)
  std::string pod_uid;
  std::string pod_ip;
};

// Where the entries live. Upstream's gate ComputeDomainCliques (default on)
// picks the clique object; off, they are the ComputeDomain's status.nodes[]
// (keyed by `name`, written through the status subresource; no labels or
// owner references there).
enum class MembershipStore { kClique, kComputeDomainStatus };

// One entry of a clique's daemons[] (or of a ComputeDomain's status.nodes[]), as read.
struct CliqueMember {
  std::string node_name;
  std::string ip_address;
  std::string clique_id;
  std::optional<std::int64_t> index;  // absent until the index writer set it
  std::string status;
  // Ours, optional (absent in upstream's objects and in old ones): why the
  // entry is NotReady (kReasonFabricUnhealthy) and a message for people.
  std::string reason{};
  std::string message{};
};

// The longest `message` an entry carries (the CRDs' maxLength); longer ones
// are cut by CapStatusMessage, ending in "...".
inline constexpr std::size_t kMaxStatusMessageBytes = 1024;
std::string CapStatusMessage(std::string message);

// What a daemon says about itself: kDaemonReady or kDaemonNotReady and,
// for a NotReady whose cause it knows, the reason and a message ("" when
// none; never set with kDaemonReady).
struct DaemonStatus {
  std::string status{};
  std::string reason{};
  std::string message{};
  friend bool operator==(const DaemonStatus&, const DaemonStatus&) = default;
};

// The entries of a ComputeDomainClique object, or of a ComputeDomain's
// status for kComputeDomainStatus (entries without their key are skipped).
std::vector<CliqueMember> CliqueMembers(const nlohmann::json& object,
                                        MembershipStore store = MembershipStore::kClique);

class CliqueMembership {
 public:
  // With kComputeDomainStatus, `cd_name`/`cd_namespace` name the
  // ComputeDomain (COMPUTE_DOMAIN_NAME/NAMESPACE).
  CliqueMembership(k8s::Client& client, DaemonIdentity identity, MembershipStore store = MembershipStore::kClique,
                   std::string cd_name = "", std::string cd_namespace = "", DaemonMetrics* metrics = nullptr);

  const DaemonIdentity& identity() const { return identity_; }
  MembershipStore store() const { return store_; }
  // The object holding the entries: the clique "<cdUID>.<cliqueID>" in the
  // pod's namespace, or the ComputeDomain.
  const std::string& clique_name() const { return object_name_; }
  const std::string& object_namespace() const { return object_namespace_; }
  const k8s::ResourceRef& resource() const;
  // The field manager of this daemon's writes.
  std::string field_manager() const;

  // Merge-patches the pod's label kComputeDomainCliqueLabel = clique ID
  // (empty included, as upstream). API errors as the Client's.
  common::Status LabelPod(std::stop_token stop = {});

  // Tells the API server this daemon's status: the pod's clique label and
  // status annotations (returns the pod; an empty reason or message removes
  // its annotation), or, gate off, this node's entry in the ComputeDomain's
  // status.nodes (returns the ComputeDomain; kNotFound while it is absent;
  // an empty reason or message leaves the field out, which removes it).
  // The message is capped (CapStatusMessage).
  // API errors as the Client's.
  k8s::ApiResult<nlohmann::json> Publish(const DaemonStatus& status, std::stop_token stop = {});
  // The same without a reason.
  k8s::ApiResult<nlohmann::json> Publish(std::string_view status, std::stop_token stop = {}) {
    return Publish(DaemonStatus{.status = std::string(status)}, stop);
  }

  // Leaving (the daemon stops): the pod's status annotation says NotReady
  // (the controller removes the entry once the pod terminates); gate off,
  // this node's entry is removed if it still carries this pod's IP (absent
  // object or entry: OK; a failed test is re-read a few times). API errors
  // as the Client's.
  common::Status Leave(std::stop_token stop = {});

 private:
  k8s::Client& client_;
  const DaemonIdentity identity_;
  const MembershipStore store_;
  const std::string object_name_;
  const std::string object_namespace_;
  DaemonMetrics* const metrics_;  // may be null

  // Counts a failed call (not a cancellation) under `verb`; returns `status`.
  const common::Status& Counted(std::string_view verb, const common::Status& status) const;
  k8s::ApiResult<nlohmann::json> ApplyStatusEntry(const DaemonStatus& status, std::stop_token stop);
};

}  // namespace nvdra::computedomain
