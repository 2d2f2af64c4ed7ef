#pragma once

// One unit of the controller's work queue: which kind of work, and on what.
// Defines: WorkKind, WorkItem, WorkItemHash.
//
// The kinds are kept apart so that the slow ones never hold the others back
// (a clique write waits for no domain write) and so that the queue's
// de-duplication and per-item backoff apply to each kind separately.
//
// Ownership: a value. Thread-safety: immutable.

#include <cstddef>
#include <functional>
#include <string>
#include <utility>

namespace nvdra::computedomain::controller {

enum class WorkKind {
  // key "<ns>/<name>" of a ComputeDomain: its objects, status, or teardown.
  kReconcileDomain,
  // key "<ns>/<name>" of a ComputeDomain: its clique entries (CliqueEntryWriter).
  kSyncCliques,
  // key "<uid>" of a ComputeDomain that may no longer exist: sweep what it left.
  kSweepGoneDomain,
  // key "<ns>/<name>" of a workload ResourceClaim just allocated: label its node.
  kLabelAllocatedNode,
};

struct WorkItem {
  WorkKind kind = WorkKind::kReconcileDomain;
  std::string key;

  static WorkItem Domain(std::string key) { return {WorkKind::kReconcileDomain, std::move(key)}; }
  static WorkItem Cliques(std::string key) { return {WorkKind::kSyncCliques, std::move(key)}; }
  static WorkItem GoneDomain(std::string uid) { return {WorkKind::kSweepGoneDomain, std::move(uid)}; }
  static WorkItem AllocatedClaim(std::string key) { return {WorkKind::kLabelAllocatedNode, std::move(key)}; }

  // For logs: the key, after "cliques/", "gone/" or "allocated/" for those kinds.
  std::string ToString() const {
    switch (kind) {
      case WorkKind::kReconcileDomain:
        return key;
      case WorkKind::kSyncCliques:
        return "cliques/" + key;
      case WorkKind::kSweepGoneDomain:
        return "gone/" + key;
      case WorkKind::kLabelAllocatedNode:
        return "allocated/" + key;
    }
    return key;
  }

  friend bool operator==(const WorkItem&, const WorkItem&) = default;
};

struct WorkItemHash {
  std::size_t operator()(const WorkItem& item) const {
    return std::hash<std::string>()(item.key) * 31 + static_cast<std::size_t>(item.kind);
  }
};

}  // namespace nvdra::computedomain::controller
