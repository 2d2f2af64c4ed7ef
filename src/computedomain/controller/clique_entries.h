#pragma once

// The single writer of a ComputeDomain's daemon entries and their IMEX
// indexes (clique_membership.h says why there is one writer): with cliques,
// each ComputeDomainClique's daemons[] from the daemon pods; without, the
// indexes in the domain's status.nodes[] (the daemons write the rest) and
// the removal of entries whose daemon pod is gone.
// Defines: CliqueEntries, MemberPodsByClique(), ComputeCliqueEntries(),
// MergeOwnerReferences(), StatusIndexes, ComputeStatusIndexes(),
// DepartedEntries, FindDepartedEntries(), TakeUncachedWrites(),
// CliqueEntryWriter.
//
// Ownership: CliqueEntryWriter borrows the ApiWriter, the caches and the
// options (all must outlive it) and owns its per-domain memory.
// Thread-safety: the free functions are pure; CliqueEntryWriter is
// thread-safe (the work queue never runs one domain's item twice at once).

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mutex.h"
#include "common/status.h"
#include "computedomain/clique_membership.h"
#include "computedomain/controller/api_writer.h"
#include "computedomain/controller/caches.h"
#include "computedomain/controller/controller_options.h"
#include "computedomain/controller/indexes.h"
#include "k8s/cache/informer.h"
#include "k8s/objects/compute_domain.h"

namespace nvdra::computedomain::controller {

// The member daemon pods of each clique: scheduled, not terminating, with
// an IP and the clique label their daemon sets once it knows its clique (an
// empty one: a node without a fabric, no clique). In pod creation order
// (then name), so indexes follow the join order. Pointers to the objects
// `pods` holds: valid while it lives.
std::map<std::string, std::vector<const nlohmann::json*>> MemberPodsByClique(
    const std::vector<k8s::cache::ObjectPtr>& pods);

struct CliqueEntries {
  nlohmann::json daemons = nlohmann::json::array();  // the clique's daemons[] as wanted
  IndexAssignment assignment;
};

// A clique's entries in list order: the listed nodes that still have a
// member pod (their index kept, their IP and status from the pod), then
// newcomers; indexes assigned up to `max_nodes`. `clique`: the current
// object, or null for one not created yet.
CliqueEntries ComputeCliqueEntries(const nlohmann::json& clique, const std::vector<const nlohmann::json*>& members,
                                   const std::string& clique_id, int max_nodes);

// The clique's owner references: every member pod's (the clique goes with
// its last daemon), earlier ones kept.
nlohmann::json MergeOwnerReferences(const nlohmann::json& clique, const std::vector<const nlohmann::json*>& members);

// Without cliques: the indexes status.nodes[] should carry.
struct StatusIndexes {
  nlohmann::json entries = nlohmann::json::array();  // [{name, index}] for a server-side apply
  bool changed = false;                              // some entry got a new index
  std::vector<std::pair<std::string, std::string>> over_limit;  // (clique, node) left without one
};
StatusIndexes ComputeStatusIndexes(const k8s::ComputeDomain& cd, int max_nodes);

// Entries (of `list` in an object, keyed by `key`) of departed daemons,
// i.e. whose node is in `departed` and that still carry its IP.
struct DepartedEntries {
  nlohmann::json patch = nlohmann::json::array();  // JSON patch: test, test, remove; last index first
  std::vector<std::string> nodes;                  // their nodes
};
DepartedEntries FindDepartedEntries(const nlohmann::json& object, const nlohmann::json::json_pointer& list,
                                    const std::string& key, const std::map<std::string, std::string>& departed);

// Our last writes of cliques (by "namespace/name") under `key_prefix` whose
// clique the cache does not hold (`cached`: the keys it holds) and whose
// version is newer than everything the cache has seen (`cache_version`):
// created by us, their watch event still on its way. Returned by the rest of
// the key (the clique ID). Those the cache has seen past without holding
// them are gone (their owners went) and are erased from `written`.
std::map<std::string, nlohmann::json> TakeUncachedWrites(std::map<std::string, nlohmann::json>& written,
                                                          const std::string& key_prefix,
                                                          const std::set<std::string>& cached,
                                                          std::uint64_t cache_version);

class CliqueEntryWriter {
 public:
  CliqueEntryWriter(ApiWriter& writer, const ControllerCaches& caches, const ControllerOptions& options)
      : writer_(writer), caches_(caches), options_(options) {}

  // Writes the domain's cliques from its daemon pods (ComputeCliqueEntries),
  // creating a clique when its first member appears. The first API error
  // after trying every clique.
  common::Status SyncCliques(const k8s::ComputeDomain& cd, std::stop_token stop);
  // Without cliques: assigns missing indexes in status.nodes[].
  common::Status AssignStatusIndexes(const k8s::ComputeDomain& cd, std::stop_token stop);
  // Removes entries of daemons whose pod is gone: those recorded by
  // RecordDeparture, still with that IP.
  common::Status PruneDeparted(const k8s::ComputeDomain& cd, std::stop_token stop);

  // A daemon pod of domain `uid` on `node` with `ip` was deleted (only
  // recorded without cliques: SyncCliques drops such entries itself).
  void RecordDeparture(const std::string& uid, const std::string& node, const std::string& ip);
  // At start, caches synced and no worker running: entries whose node has
  // no daemon pod of their domain.
  void RecordStartupDepartures();
  // Drops what is remembered of domain `uid`.
  void Forget(const std::string& uid);

 private:
  ApiWriter& writer_;
  const ControllerCaches& caches_;
  const ControllerOptions& options_;

  mutable common::Mutex entries_mu_;
  // domain UID -> node -> IP of a deleted daemon pod whose entry may remain
  std::map<std::string, std::map<std::string, std::string>> departed_ GUARDED_BY(entries_mu_);
  // "<ns>/<name>" of a clique -> the object our last write of it made
  std::map<std::string, nlohmann::json> cliques_written_ GUARDED_BY(entries_mu_);
};

}  // namespace nvdra::computedomain::controller
