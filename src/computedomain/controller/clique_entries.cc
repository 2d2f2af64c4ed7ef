#include "computedomain/controller/clique_entries.h"

#include <algorithm>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "common/json_fields.h"
#include "common/log.h"
#include "computedomain/controller/daemon_pods.h"
#include "k8s/api_error.h"

namespace nvdra::computedomain::controller {

using common::Status;
using k8s::cache::ObjectPtr;
using nlohmann::json;

namespace {

// Numeric resourceVersion (an etcd revision in practice); 0 when it is not one.
std::uint64_t VersionNumber(const json& object) {
  const std::string text = common::JsonString(object, {"metadata", "resourceVersion"});
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::stoull(text);
}

// A clique entry's fields the controller writes, in a fixed shape.
json EntryOf(const CliqueMember& m, std::optional<std::int64_t> index) {
  json entry = {{"nodeName", m.node_name}, {"ipAddress", m.ip_address}, {"cliqueID", m.clique_id},
                {"status", m.status}};
  if (index) entry["index"] = *index;
  // Ours and optional: only when the daemon said why it is NotReady.
  if (!m.reason.empty()) entry["reason"] = m.reason;
  if (!m.message.empty()) entry["message"] = m.message;
  return entry;
}

std::string NameOf(const json& object) { return common::JsonString(object, {"metadata", "name"}); }
std::string UidOf(const json& object) { return common::JsonString(object, {"metadata", "uid"}); }

}  // namespace

std::map<std::string, std::vector<const json*>> MemberPodsByClique(const std::vector<ObjectPtr>& cached_pods) {
  std::vector<ObjectPtr> pods = cached_pods;
  std::sort(pods.begin(), pods.end(), [](const ObjectPtr& a, const ObjectPtr& b) {
    return std::pair(common::JsonString(*a, {"metadata", "creationTimestamp"}), NameOf(*a)) <
           std::pair(common::JsonString(*b, {"metadata", "creationTimestamp"}), NameOf(*b));
  });
  std::map<std::string, std::vector<const json*>> members_by_clique;
  for (const ObjectPtr& pod_ptr : pods) {
    const json& pod = *pod_ptr;
    // An empty clique ID: a node without a fabric, no clique (its daemon
    // runs no IMEX; the domain's status lists it with index -1).
    if (IsDeleting(pod) || LabelOf(pod, kComputeDomainCliqueLabel).empty()) continue;
    if (DaemonPodNode(pod).empty() || DaemonPodIp(pod).empty()) continue;
    members_by_clique[LabelOf(pod, kComputeDomainCliqueLabel)].push_back(&pod);
  }
  return members_by_clique;
}

CliqueEntries ComputeCliqueEntries(const json& clique, const std::vector<const json*>& members,
                                   const std::string& clique_id, int max_nodes) {
  std::map<std::string, const json*> pod_by_node;
  for (const json* pod : members) pod_by_node.try_emplace(DaemonPodNode(*pod), pod);
  std::vector<CliqueMember> entries;
  std::set<std::string> listed;
  for (CliqueMember& m : CliqueMembers(clique.is_null() ? json::object() : clique)) {
    auto it = pod_by_node.find(m.node_name);
    if (it == pod_by_node.end() || !listed.insert(m.node_name).second) continue;
    m.ip_address = DaemonPodIp(*it->second);
    m.clique_id = clique_id;
    m.status = DaemonPodStatus(*it->second);
    m.reason = DaemonPodReason(*it->second);
    m.message = DaemonPodMessage(*it->second);
    entries.push_back(std::move(m));
  }
  for (const json* pod : members) {
    const std::string node = DaemonPodNode(*pod);
    if (!listed.insert(node).second) continue;
    entries.push_back({.node_name = node,
                       .ip_address = DaemonPodIp(*pod),
                       .clique_id = clique_id,
                       .index = std::nullopt,
                       .status = DaemonPodStatus(*pod),
                       .reason = DaemonPodReason(*pod),
                       .message = DaemonPodMessage(*pod)});
  }
  CliqueEntries out;
  out.assignment = AssignIndexes(entries, max_nodes);
  for (const CliqueMember& m : entries) {
    auto it = out.assignment.indexes.find(m.node_name);
    out.daemons.push_back(EntryOf(m, it == out.assignment.indexes.end() ? std::nullopt : std::optional(it->second)));
  }
  return out;
}

json MergeOwnerReferences(const json& clique, const std::vector<const json*>& members) {
  json owners = clique.is_null() ? json::array() : clique.value("/metadata/ownerReferences"_json_pointer, json::array());
  std::set<std::string> owner_uids;
  for (const json& ref : owners) owner_uids.insert(ref.value("uid", ""));
  for (const json* pod : members) {
    if (owner_uids.insert(UidOf(*pod)).second) {
      owners.push_back({{"apiVersion", "v1"}, {"kind", "Pod"}, {"name", NameOf(*pod)}, {"uid", UidOf(*pod)}});
    }
  }
  return owners;
}

StatusIndexes ComputeStatusIndexes(const k8s::ComputeDomain& cd, int max_nodes) {
  std::map<std::string, std::vector<CliqueMember>> by_clique;
  for (CliqueMember& m : CliqueMembers(cd.json(), MembershipStore::kComputeDomainStatus)) {
    if (!m.clique_id.empty()) by_clique[m.clique_id].push_back(std::move(m));
  }
  StatusIndexes out;
  for (const auto& [clique, group] : by_clique) {
    IndexAssignment assignment = AssignIndexes(group, max_nodes);
    for (const std::string& node : assignment.over_limit) out.over_limit.emplace_back(clique, node);
    out.changed = out.changed || !assignment.assigned.empty();
    for (const auto& [node, index] : assignment.indexes) out.entries.push_back({{"name", node}, {"index", index}});
  }
  return out;
}

DepartedEntries FindDepartedEntries(const json& object, const json::json_pointer& list, const std::string& key,
                                    const std::map<std::string, std::string>& departed) {
  DepartedEntries out;
  if (!object.contains(list) || !object.at(list).is_array()) return out;
  const json& entries = object.at(list);
  for (std::size_t i = entries.size(); i-- > 0;) {
    const std::string node = entries[i].value(key, "");
    auto it = departed.find(node);
    if (it == departed.end()) continue;
    if (entries[i].value("ipAddress", "") != it->second) continue;  // a successor's entry
    // Test, then remove: a concurrent change fails the patch (re-read on retry).
    const std::string path = list.to_string() + "/" + std::to_string(i);
    out.patch.push_back({{"op", "test"}, {"path", path + "/" + key}, {"value", node}});
    out.patch.push_back({{"op", "test"}, {"path", path + "/ipAddress"}, {"value", it->second}});
    out.patch.push_back({{"op", "remove"}, {"path", path}});
    out.nodes.push_back(node);
  }
  return out;
}

std::map<std::string, json> TakeUncachedWrites(std::map<std::string, json>& written, const std::string& key_prefix,
                                               const std::set<std::string>& cached, std::uint64_t cache_version) {
  std::map<std::string, json> out;
  for (auto it = written.lower_bound(key_prefix); it != written.end() && it->first.starts_with(key_prefix);) {
    if (cached.contains(it->first)) {
      ++it;
    } else if (VersionNumber(it->second) > cache_version) {
      out[it->first.substr(key_prefix.size())] = it->second;
      ++it;
    } else {
      it = written.erase(it);
    }
  }
  return out;
}

Status CliqueEntryWriter::SyncCliques(const k8s::ComputeDomain& cd, std::stop_token stop) {
  const std::string uid = cd.uid();
  const std::vector<ObjectPtr> pods = CachedByLabel(*caches_.pods, uid);  // keeps the pods members point into
  std::map<std::string, std::vector<const json*>> members_by_clique = MemberPodsByClique(pods);
  std::map<std::string, json> cliques;  // clique ID -> the newest object we know (null: none yet)
  const std::string prefix = uid + ".";
  for (const ObjectPtr& cached : CachedByLabel(*caches_.cliques, uid)) {
    const k8s::ComputeDomainClique clique(*cached);
    const std::string name = clique.name();
    if (!name.starts_with(prefix)) continue;
    json newest = clique.json();
    {
      // Our own last write may be newer than the cache (its watch event is
      // on its way): compute from it, so we neither conflict nor repeat.
      common::MutexLock lock(entries_mu_);
      auto it = cliques_written_.find(clique.Key());
      if (it != cliques_written_.end() && VersionNumber(it->second) > VersionNumber(newest)) newest = it->second;
    }
    cliques[name.substr(prefix.size())] = std::move(newest);
  }
  {
    // A clique we created whose watch event has not reached the cache: it
    // exists, so updating it beats creating it again (an AlreadyExists
    // answer and a failed reconcile, seen at 72 nodes).
    std::set<std::string> cached;
    for (const auto& [clique_id, _] : cliques) cached.insert(options_.driver_namespace + "/" + prefix + clique_id);
    const std::uint64_t cache_version =
        VersionNumber({{"metadata", {{"resourceVersion", caches_.cliques->store().ResourceVersion()}}}});
    common::MutexLock lock(entries_mu_);
    for (auto& [clique_id, object] :
         TakeUncachedWrites(cliques_written_, options_.driver_namespace + "/" + prefix, cached, cache_version)) {
      cliques[clique_id] = std::move(object);
    }
  }
  for (const auto& [clique_id, _] : members_by_clique) cliques.try_emplace(clique_id, json());

  Status first_error = common::OkStatus();
  for (auto& [clique_id, object] : cliques) {
    const std::vector<const json*>& members = members_by_clique[clique_id];
    const std::string name = prefix + clique_id;
    CliqueEntries entries = ComputeCliqueEntries(object, members, clique_id, options_.max_nodes_per_imex_domain);
    for (const std::string& node : entries.assignment.over_limit) {
      writer_.Emit(cd, k8s::EventType::kWarning, "CliqueFull",
                   fmt::format("node {} cannot join clique {}: it already has {} daemons "
                               "(--max-nodes-per-imex-domain); its workload stays pending until one leaves",
                               node, name, options_.max_nodes_per_imex_domain));
    }
    json owners = MergeOwnerReferences(object, members);

    k8s::ApiResult<json> result = json();
    if (object.is_null()) {
      if (entries.daemons.empty()) continue;
      k8s::ComputeDomainClique clique = k8s::ComputeDomainClique::New(options_.driver_namespace, name);
      clique.set_labels({{std::string(kComputeDomainLabel), uid}, {std::string(kComputeDomainCliqueLabel), clique_id}});
      clique.mutable_json()["metadata"]["ownerReferences"] = owners;
      clique.mutable_json()["daemons"] = entries.daemons;
      result = writer_.Create(k8s::resources::kComputeDomainCliques, options_.driver_namespace, clique.json(), stop);
    } else {
      if (object.value("daemons", json::array()) == entries.daemons &&
          object.value("/metadata/ownerReferences"_json_pointer, json::array()) == owners) {
        continue;
      }
      k8s::ComputeDomainClique updated(object);
      updated.mutable_json()["daemons"] = entries.daemons;
      updated.mutable_json()["metadata"]["ownerReferences"] = owners;
      updated.mutable_json()["metadata"].erase("managedFields");
      // With the resourceVersion we computed from: the controller is the
      // only writer, so a conflict means a stale cache (retried).
      result = writer_.Update(k8s::resources::kComputeDomainCliques, updated.namespace_name(), updated.json(), stop);
    }
    if (!result.ok()) {
      if (first_error.ok()) first_error = result.status();
      continue;
    }
    if (!entries.assignment.assigned.empty()) {
      LOG_INFO(1, "indexes assigned",
               {{"clique", name}, {"nodes", fmt::format("{}", fmt::join(entries.assignment.assigned, ","))}});
    }
    LOG_INFO(2, "clique entries written",
             {{"clique", name},
              {"entries", entries.daemons.size()},
              {"resourceVersion", common::JsonString(*result, {"metadata", "resourceVersion"})}});
    common::MutexLock lock(entries_mu_);
    cliques_written_[options_.driver_namespace + "/" + name] = *std::move(result);
  }
  return first_error;
}

Status CliqueEntryWriter::AssignStatusIndexes(const k8s::ComputeDomain& cd, std::stop_token stop) {
  const StatusIndexes indexes = ComputeStatusIndexes(cd, options_.max_nodes_per_imex_domain);
  for (const auto& [clique, node] : indexes.over_limit) {
    writer_.Emit(cd, k8s::EventType::kWarning, "CliqueFull",
                 fmt::format("node {} cannot join clique {}: it already has {} daemons (--max-nodes-per-imex-domain)",
                             node, clique, options_.max_nodes_per_imex_domain));
  }
  if (!indexes.changed) return common::OkStatus();
  k8s::ComputeDomain intent = k8s::ComputeDomain::New(cd.namespace_name(), cd.name());
  intent.mutable_json()["status"] = {{"nodes", indexes.entries}};
  auto result = writer_.ApplyForced(k8s::resources::kComputeDomains, cd.namespace_name(), intent.json(), "status",
                                    stop);
  return result.ok() ? common::OkStatus() : result.status();
}

void CliqueEntryWriter::RecordDeparture(const std::string& uid, const std::string& node, const std::string& ip) {
  // With cliques, SyncCliques drops entries without a member pod itself.
  if (options_.cliques_enabled) return;
  if (uid.empty() || node.empty() || ip.empty()) return;
  common::MutexLock lock(entries_mu_);
  departed_[uid][node] = ip;
}

void CliqueEntryWriter::RecordStartupDepartures() {
  // Daemon pods deleted while no controller ran left entries whose node now
  // has no daemon pod of the domain. Both caches are synced and no worker
  // runs yet; a daemon that starts right now has its pod already (pods
  // exist before their daemons write), so it is not taken for departed.
  for (const ObjectPtr& cached : caches_.domains->store().List()) {
    const k8s::ComputeDomain cd(*cached);
    std::set<std::string> nodes_with_pod;
    for (const ObjectPtr& pod : CachedByLabel(*caches_.pods, cd.uid())) nodes_with_pod.insert(DaemonPodNode(*pod));
    for (const CliqueMember& m : CliqueMembers(cd.json(), MembershipStore::kComputeDomainStatus)) {
      if (!nodes_with_pod.contains(m.node_name)) RecordDeparture(cd.uid(), m.node_name, m.ip_address);
    }
  }
}

Status CliqueEntryWriter::PruneDeparted(const k8s::ComputeDomain& cd, std::stop_token stop) {
  // A daemon removes its own entry when it stops; this covers daemons that
  // could not (node lost, SIGKILL, partition), as upstream's periodic prune
  // does, on the pod's delete event instead of a 2 s poll. Only an entry
  // that still carries the departed pod's IP goes: a successor pod on the
  // same node re-applies the entry with its own IP, and the patch's test
  // keeps it (never "no pod seen, so prune": the pod informer may lag
  // behind the domain informer by a few milliseconds).
  const std::string uid = cd.uid();
  std::map<std::string, std::string> departed;
  {
    common::MutexLock lock(entries_mu_);
    auto it = departed_.find(uid);
    if (it == departed_.end()) return common::OkStatus();
    departed = it->second;
  }
  const DepartedEntries found = FindDepartedEntries(cd.json(), "/status/nodes"_json_pointer, "name", departed);
  std::set<std::string> still_listed;  // departures whose entry is still there
  if (!found.nodes.empty()) {
    auto result = writer_.Patch(k8s::resources::kComputeDomains, cd.namespace_name(), cd.name(),
                                k8s::PatchType::kJson, found.patch, "status", stop);
    if (!result.ok() && !k8s::IsNotFound(result.status())) return result.status();
    if (result.ok()) {
      LOG_INFO(0, "removed entries of daemons whose pod is gone",
               {{"object", cd.Key()}, {"nodes", fmt::format("{}", fmt::join(found.nodes, ","))}});
    } else {
      still_listed.insert(found.nodes.begin(), found.nodes.end());
    }
  }
  // Done with departures whose entry is gone (or never was there).
  common::MutexLock lock(entries_mu_);
  auto it = departed_.find(uid);
  if (it != departed_.end()) {
    for (const auto& [node, ip] : departed) {
      auto entry = it->second.find(node);
      if (entry != it->second.end() && entry->second == ip && !still_listed.contains(node)) it->second.erase(entry);
    }
    if (it->second.empty()) departed_.erase(it);
  }
  return common::OkStatus();
}

void CliqueEntryWriter::Forget(const std::string& uid) {
  common::MutexLock lock(entries_mu_);
  departed_.erase(uid);
  const std::string prefix = options_.driver_namespace + "/" + uid + ".";
  std::erase_if(cliques_written_, [&](const auto& item) { return item.first.starts_with(prefix); });
}

}  // namespace nvdra::computedomain::controller
