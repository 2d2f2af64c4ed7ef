#include "computedomain/controller/indexes.h"

namespace nvdra::computedomain::controller {

IndexAssignment AssignIndexes(const std::vector<CliqueMember>& entries, int max_nodes) {
  IndexAssignment out;
  std::set<std::int64_t> taken;
  for (const CliqueMember& entry : entries) {
    if (entry.node_name.empty() || !entry.index) continue;
    // An index outside the range cannot name a DNS entry; it is the writer's
    // own mistake at worst, and the daemon rejects it, so it stays visible.
    out.indexes[entry.node_name] = *entry.index;
    if (*entry.index >= 0 && *entry.index < max_nodes) taken.insert(*entry.index);
  }
  std::int64_t next = 0;
  for (const CliqueMember& entry : entries) {
    if (entry.node_name.empty() || entry.index || out.indexes.contains(entry.node_name)) continue;
    while (taken.contains(next)) ++next;
    if (next >= max_nodes) {
      out.over_limit.push_back(entry.node_name);
      continue;
    }
    taken.insert(next);
    out.indexes[entry.node_name] = next;
    out.assigned.push_back(entry.node_name);
  }
  return out;
}

std::optional<int> AssignChannel(const std::set<int>& used, int channel_count) {
  for (int channel = 1; channel < channel_count; ++channel) {
    if (!used.contains(channel)) return channel;
  }
  return std::nullopt;
}

}  // namespace nvdra::computedomain::controller
