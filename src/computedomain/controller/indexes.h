#pragma once

// The controller's pure decisions about numbers it hands out: IMEX indexes of
// daemons within a clique (the single writer of `index`, see
// clique_membership.h) and, with --imex-isolation=channel, an IMEX channel per
// ComputeDomain. Defines: IndexAssignment, AssignIndexes, AssignChannel.
//
// Both keep what was given (an index or channel never moves while its holder
// lives) and fill the lowest gap first, so numbers freed by leavers are
// reused and the set stays dense.
//
// Ownership: values. Thread-safety: pure functions.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "computedomain/clique_membership.h"

namespace nvdra::computedomain::controller {

struct IndexAssignment {
  // Every entry's index after this decision (kept and new), by node name.
  std::map<std::string, std::int64_t> indexes;
  // The nodes that got an index in this decision (a subset of `indexes`).
  std::vector<std::string> assigned;
  // Entries left without an index because [0, max_nodes) is full.
  std::vector<std::string> over_limit;
};

// Entries of one clique (in list order, which is join order) with their
// current indexes. An index already set and inside [0, max_nodes) is kept;
// a duplicate of a kept index (only a foreign writer can cause one) is
// kept too and reported by nobody here: the controller never rewrites an
// index. Entries without one get the lowest free index in list order,
// until max_nodes are taken. Entries without a node name are ignored.
IndexAssignment AssignIndexes(const std::vector<CliqueMember>& entries, int max_nodes);

// The lowest channel in [1, channel_count) not in `used`; nullopt when all
// are taken. Channel 0 stays for domain isolation (every workload of an
// IMEX domain shares it).
std::optional<int> AssignChannel(const std::set<int>& used, int channel_count);

}  // namespace nvdra::computedomain::controller
