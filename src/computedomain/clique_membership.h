#pragma once

// CliqueMembership: what one compute-domain daemon writes to the API server.
// It labels its own pod, and keeps its own entry (keyed by node name) in
// the ComputeDomainClique "<cdUID>.<cliqueID>" of the driver namespace (its
// pod's namespace), creating the clique when missing.
//
// Why server-side apply: each daemon applies only its own entry under a
// field manager of its own ("compute-domain-daemon@<node>"), so daemons
// never read-modify-write the shared list, never race on the object's
// resourceVersion (upstream #723/#816/#1107) and never write another entry.
// That needs the CRD's `daemons` to be `x-kubernetes-list-type: map` keyed
// by `nodeName` (upstream's CRD already is), with `index` not required.
// Owner references are a list-map keyed by uid in ObjectMeta, so each daemon
// adds its pod's reference and leaves the others alone.
//
// The daemon never writes `index`. A single writer (the controller, issue 9)
// assigns indexes, stable per node, under its own field manager; a daemon's
// apply does not mention the field, so it keeps the index it was given and
// cannot change anyone else's (upstream #1418). Until its index is there,
// the daemon waits (DNS-names mode) — see ImexDaemon.
//
// Leaving uses a JSON patch that first tests that the entry at position i
// still is this node's with this pod's IP, then removes it: a racing change
// fails the test and is re-read, and a successor pod on the same node (a
// new IP) is never removed by its predecessor.
//
// Ownership: borrows the Client, which must outlive it. Thread-safety:
// thread-safe (immutable; the Client is thread-safe).

#include <cstdint>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "k8s/client.h"

namespace nvdra::computedomain {

inline constexpr std::string_view kComputeDomainLabel = "resource.nvidia.com/computeDomain";
inline constexpr std::string_view kComputeDomainCliqueLabel = "resource.nvidia.com/computeDomain.cliqueID";
inline constexpr std::string_view kDaemonReady = "Ready";
inline constexpr std::string_view kDaemonNotReady = "NotReady";

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
// owner references there). Both are list-maps, so the same apply works.
enum class MembershipStore { kClique, kComputeDomainStatus };

// One entry of a clique's daemons[] (or of a ComputeDomain's status.nodes[]), as read.
struct CliqueMember {
  std::string node_name;
  std::string ip_address;
  std::string clique_id;
  std::optional<std::int64_t> index;  // absent until the index writer set it
  std::string status;
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
                   std::string cd_name = "", std::string cd_namespace = "");

  const DaemonIdentity& identity() const { return identity_; }
  MembershipStore store() const { return store_; }
  // The object holding the entries: the clique "<cdUID>.<cliqueID>" in the
  // pod's namespace, or the ComputeDomain.
  const std::string& clique_name() const { return object_name_; }
  const std::string& object_namespace() const { return object_namespace_; }
  const k8s::ResourceRef& resource() const;
  std::string field_manager() const;

  // Merge-patches the pod's label kComputeDomainCliqueLabel = clique ID
  // (empty included, as upstream). API errors as the Client's.
  common::Status LabelPod(std::stop_token stop = {});

  // Applies this node's entry {nodeName, ipAddress, cliqueID, status} with
  // the clique's labels and this pod's owner reference, creating the clique
  // if missing. Returns the clique as the server now has it. API errors as
  // the Client's. kComputeDomainStatus: {name, ...} into status.nodes of an
  // existing ComputeDomain (kNotFound while it is absent).
  k8s::ApiResult<nlohmann::json> ApplyEntry(std::string_view status, std::stop_token stop = {});

  // Removes this node's entry if it still carries this pod's IP. Absent
  // clique or entry: OK (nothing to do). Retries a failed test (a racing
  // change) a few times; other API errors as the Client's.
  common::Status RemoveEntry(std::stop_token stop = {});

 private:
  k8s::Client& client_;
  const DaemonIdentity identity_;
  const MembershipStore store_;
  const std::string object_name_;
  const std::string object_namespace_;
};

}  // namespace nvdra::computedomain
