#include "kubeletplugin/resource_slice_publisher.h"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>

#include "common/json_fields.h"
#include "common/log.h"
#include "k8s/api_error.h"
#include "k8s/rest_list_watch.h"

namespace nvdra::kubeletplugin {
namespace {

using common::JsonInt;
using common::JsonString;
using nlohmann::json;
using k8s::resources::kNodes;
using k8s::resources::kResourceSlices;

// resource.k8s.io/v1 limits per slice (k8s.io/api resource/v1 types.go,
// 1.35+; dra-wire-facts.md section 3.3).
constexpr std::size_t kMaxDevices = 128;
constexpr std::size_t kMaxDevicesWithAdvancedFeatures = 64;
constexpr std::size_t kMaxCounterSets = 8;
// Width of the hex slice index at the start of a generated name (the Go
// helper's resourceSliceIndexMinLength).
constexpr std::size_t kMinIndexLength = 5;
// Own deletes whose watch event never came (a relist skipped it) are
// forgotten after this.
constexpr auto kDeletedUidTtl = std::chrono::minutes(5);

bool HasNonEmpty(const json& object, const char* key) {
  if (!object.is_object()) return false;
  auto it = object.find(key);
  return it != object.end() && (it->is_array() || it->is_object()) && !it->empty();
}

// Taints, counter consumption and list-valued attributes lower the device
// limit of a slice to 64 (ResourceSliceMaxDevicesWithAdvancedFeatures).
bool UsesAdvancedFeatures(const json& device) {
  if (HasNonEmpty(device, "taints") || HasNonEmpty(device, "consumesCounters")) return true;
  if (!HasNonEmpty(device, "attributes")) return false;
  for (const auto& [name, value] : device["attributes"].items()) {
    for (const char* list : {"ints", "bools", "strings", "versions"}) {
      if (value.is_object() && value.contains(list)) return true;
    }
  }
  return false;
}

// The server leaves out empty lists and maps (omitempty) and null values;
// drop them on both sides of a comparison.
json DropEmpty(const json& value) {
  if (value.is_object()) {
    json out = json::object();
    for (const auto& [key, item] : value.items()) {
      if (item.is_null()) continue;
      json normal = DropEmpty(item);
      if ((normal.is_object() || normal.is_array()) && normal.empty()) continue;
      out[key] = std::move(normal);
    }
    return out;
  }
  if (value.is_array()) {
    json out = json::array();
    for (const auto& item : value) out.push_back(DropEmpty(item));
    return out;
  }
  return value;
}

// Slice content as compared: the spec without what the publisher sets
// itself (driver, nodeName, pool), without server-set taint times.
json NormalContent(const json& spec) {
  json content = spec.is_object() ? spec : json::object();
  content.erase("driver");
  content.erase("nodeName");
  content.erase("pool");
  if (content.contains("devices") && content["devices"].is_array()) {
    for (auto& device : content["devices"]) {
      if (!device.is_object() || !device.contains("taints") || !device["taints"].is_array()) continue;
      for (auto& taint : device["taints"]) {
        if (taint.is_object()) taint.erase("timeAdded");
      }
    }
  }
  return DropEmpty(content);
}

// A kept taint keeps the time the server stamped on it (the Go helper's
// copyTaintTimeAdded), so an update does not restart its clock.
void CopyTaintTimes(const json& stored_devices, json& devices) {
  if (!stored_devices.is_array() || !devices.is_array()) return;
  for (auto& device : devices) {
    if (!device.is_object() || !HasNonEmpty(device, "taints")) continue;
    const json* old = nullptr;
    for (const auto& candidate : stored_devices) {
      if (candidate.is_object() && JsonString(candidate, "name") == JsonString(device, "name")) old = &candidate;
    }
    if (old == nullptr || !HasNonEmpty(*old, "taints")) continue;
    for (auto& taint : device["taints"]) {
      if (!taint.is_object() || taint.contains("timeAdded")) continue;
      for (const auto& old_taint : (*old)["taints"]) {
        if (JsonString(old_taint, "key") == JsonString(taint, "key") &&
            JsonString(old_taint, "value") == JsonString(taint, "value") &&
            JsonString(old_taint, "effect") == JsonString(taint, "effect") && old_taint.contains("timeAdded")) {
          taint["timeAdded"] = old_taint["timeAdded"];
          break;
        }
      }
    }
  }
}

std::size_t IndexWidth(std::size_t slices) {
  std::size_t width = 1;
  for (std::size_t highest = slices > 0 ? slices - 1 : 0; highest >= 16; highest /= 16) ++width;
  return std::max(kMinIndexLength, width);
}

std::string EncodeIndex(std::size_t index, std::size_t width) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(width, '0');
  for (std::size_t pos = width; pos > 0 && index > 0; --pos, index /= 16) out[pos - 1] = kHex[index % 16];
  return out;
}

// The slice index in a generated name, or nullopt when the name does not
// start with `width` hex digits and a '-'.
std::optional<std::size_t> DecodeIndex(std::string_view name, std::size_t width) {
  if (name.size() <= width || name[width] != '-') return std::nullopt;
  std::size_t index = 0;
  auto [end, error] = std::from_chars(name.data(), name.data() + width, index, 16);
  if (error != std::errc() || end != name.data() + width) return std::nullopt;
  return index;
}

std::optional<std::int64_t> ParseResourceVersion(const std::string& rv) {
  std::int64_t value = 0;
  auto [end, error] = std::from_chars(rv.data(), rv.data() + rv.size(), value);
  if (rv.empty() || error != std::errc() || end != rv.data() + rv.size()) return std::nullopt;
  return value;
}

// Pool-wide rules the server cannot check slice by slice (the Go helper's
// validatePool): unique device and counter-set names, resolvable counter
// references.
common::Status ValidatePool(const std::string& pool, const std::vector<json>& contents) {
  std::map<std::string, std::set<std::string>> counter_sets;
  for (const auto& content : contents) {
    if (!content.contains("sharedCounters")) continue;
    for (const auto& set : content["sharedCounters"]) {
      const std::string name = set.value("name", "");
      if (counter_sets.contains(name)) {
        return common::InvalidArgumentError("pool " + pool + ": duplicate counter set \"" + name + "\"");
      }
      auto& counters = counter_sets[name];
      if (set.contains("counters") && set["counters"].is_object()) {
        for (const auto& [counter, value] : set["counters"].items()) counters.insert(counter);
      }
    }
  }
  std::set<std::string> devices;
  for (const auto& content : contents) {
    if (!content.contains("devices")) continue;
    for (const auto& device : content["devices"]) {
      const std::string name = device.is_object() ? device.value("name", "") : "";
      if (!devices.insert(name).second) {
        return common::InvalidArgumentError("pool " + pool + ": duplicate device \"" + name + "\"");
      }
      if (!HasNonEmpty(device, "consumesCounters")) continue;
      for (const auto& consumed : device["consumesCounters"]) {
        const std::string set = consumed.value("counterSet", "");
        auto it = counter_sets.find(set);
        if (it == counter_sets.end()) {
          return common::InvalidArgumentError("pool " + pool + ": device " + name + ": counter set \"" + set +
                                              "\" not found");
        }
        if (!consumed.contains("counters") || !consumed["counters"].is_object()) continue;
        for (const auto& [counter, value] : consumed["counters"].items()) {
          if (!it->second.contains(counter)) {
            return common::InvalidArgumentError("pool " + pool + ": device " + name + ": counter \"" + counter +
                                                "\" not in counter set \"" + set + "\"");
          }
        }
      }
    }
  }
  return common::OkStatus();
}

k8s::workqueue::WorkQueueOptions QueueOptions(const k8s::workqueue::RateLimits& limits) {
  k8s::workqueue::WorkQueueOptions options;
  options.limits = limits;
  return options;
}

}  // namespace

std::vector<json> SplitToApiLimits(const DesiredSlice& slice) {
  std::vector<json> out;
  if (slice.shared_counters.is_array()) {
    json chunk = json::array();
    for (const auto& set : slice.shared_counters) {
      if (chunk.size() == kMaxCounterSets) {
        out.push_back({{"sharedCounters", std::move(chunk)}});
        chunk = json::array();
      }
      chunk.push_back(set);
    }
    if (!chunk.empty()) out.push_back({{"sharedCounters", std::move(chunk)}});
  }
  if (slice.devices.is_array()) {
    json chunk = json::array();
    bool advanced = false;
    for (const auto& device : slice.devices) {
      const bool device_advanced = UsesAdvancedFeatures(device);
      const std::size_t limit = advanced || device_advanced ? kMaxDevicesWithAdvancedFeatures : kMaxDevices;
      if (chunk.size() >= limit) {
        out.push_back({{"devices", std::move(chunk)}});
        chunk = json::array();
        advanced = false;
      }
      chunk.push_back(device);
      advanced = advanced || device_advanced;
    }
    if (!chunk.empty()) out.push_back({{"devices", std::move(chunk)}});
  }
  if (slice.counters_with_devices && out.size() > 1 && out.front().contains("sharedCounters")) {
    // Before 1.35: the counter sets ride with the first device slice.
    json counters = std::move(out.front()["sharedCounters"]);
    out.erase(out.begin());
    while (!out.empty() && out.front().contains("sharedCounters")) {
      for (auto& set : out.front()["sharedCounters"]) counters.push_back(std::move(set));
      out.erase(out.begin());
    }
    if (out.empty()) {
      out.push_back({{"sharedCounters", std::move(counters)}});
    } else {
      out.front()["sharedCounters"] = std::move(counters);
    }
  }
  if (out.empty()) out.push_back(json::object());
  return out;
}

common::StatusOr<std::unique_ptr<ResourceSlicePublisher>> ResourceSlicePublisher::Start(
    k8s::Client& client, PublisherOptions options) {
  if (options.driver_name.empty()) return common::InvalidArgumentError("resource slice publisher: empty driver name");
  if (options.node_name.empty()) return common::InvalidArgumentError("resource slice publisher: empty node name");
  std::unique_ptr<ResourceSlicePublisher> publisher(new ResourceSlicePublisher(client, std::move(options)));
  publisher->informer_->Start();
  publisher->worker_ = std::jthread([p = publisher.get()](std::stop_token stop) { p->RunWorker(stop); });
  return publisher;
}

ResourceSlicePublisher::ResourceSlicePublisher(k8s::Client& client, PublisherOptions options)
    : client_(client),
      options_(std::move(options)),
      queue_(QueueOptions(options_.retry_limits)),
      node_uid_(options_.node_uid) {
  k8s::cache::InformerOptions informer_options;
  informer_options.description = "resource.k8s.io/v1/resourceslices";
  informer_options.field_selector = "spec.nodeName=" + options_.node_name + ",spec.driver=" + options_.driver_name;
  informer_ = std::make_unique<k8s::cache::Informer>(
      std::make_unique<k8s::RestListWatch>(client_, kResourceSlices, ""), std::move(informer_options));
  informer_->AddEventHandler({
      .on_add = [this](const k8s::cache::ObjectPtr& object) { OnUpsert(*object); },
      .on_update = [this](const k8s::cache::ObjectPtr&, const k8s::cache::ObjectPtr& object) { OnUpsert(*object); },
      .on_delete = [this](const k8s::cache::ObjectPtr& object) { OnDelete(*object); },
      .needs_old_object = false,
  });
}

ResourceSlicePublisher::~ResourceSlicePublisher() {
  // The informer's handlers use the queue and the state: stop them first.
  informer_->Stop();
  queue_.ShutDown();
  if (worker_.joinable()) {
    worker_.request_stop();
    worker_.join();
  }
}

void ResourceSlicePublisher::Update(DriverResources desired) {
  std::map<std::string, Expanded> expanded;
  for (auto& [pool, spec] : desired.pools) {
    Expanded& out = expanded[pool];
    for (const auto& slice : spec.slices) {
      for (auto& content : SplitToApiLimits(slice)) out.contents.push_back(std::move(content));
    }
    // A pool with no slices publishes nothing (as if absent).
    if (spec.slices.empty()) out.contents.clear();
    out.invalid = ValidatePool(pool, out.contents);
    if (!out.invalid.ok()) LOG_ERROR("resource slice pool invalid", {{"pool", pool}, {"err", out.invalid}});
  }
  std::set<std::string> pools;
  {
    common::MutexLock lock(state_mutex_);
    for (const auto& [pool, unused] : desired_) pools.insert(pool);
    for (const auto& [pool, unused] : expanded) pools.insert(pool);
    for (const auto& [name, known] : known_) pools.insert(known.pool);
    desired_ = std::move(expanded);
    has_desired_ = true;
    for (const auto& pool : pools) MarkDirtyLocked(pool);
  }
  state_changed_.notify_all();
  for (const auto& pool : pools) queue_.Add(pool);
}

common::Status ResourceSlicePublisher::WaitForSync(std::chrono::milliseconds timeout) {
  common::MutexLock lock(state_mutex_);
  const bool synced = state_changed_.wait_for(lock.native(), timeout, [&]() REQUIRES(state_mutex_) {
    return has_desired_ && informer_synced_ && dirty_.empty();
  });
  if (!synced) {
    std::ostringstream message;
    message << "resource slices of " << options_.driver_name << " on " << options_.node_name << " not in sync after "
            << timeout.count() << "ms";
    if (!informer_synced_) message << "; watch not synced";
    if (!has_desired_) message << "; no Update yet";
    for (const auto& [pool, count] : dirty_) {
      message << "; pool " << pool;
      auto error = errors_.find(pool);
      if (error != errors_.end()) message << ": " << error->second.ToString();
    }
    return common::DeadlineExceededError(message.str());
  }
  for (const auto& [pool, expanded] : desired_) {
    if (!expanded.invalid.ok()) return expanded.invalid;
  }
  return common::OkStatus();
}

common::Status ResourceSlicePublisher::DeleteAll(std::chrono::milliseconds timeout) {
  Update({});
  return WaitForSync(timeout);
}

PublisherStats ResourceSlicePublisher::stats() const {
  return {creates_.load(), updates_.load(), deletes_.load()};
}

bool ResourceSlicePublisher::UpsertLocked(const json& object) {
  const std::string name = JsonString(object, {"metadata", "name"});
  const std::string uid = JsonString(object, {"metadata", "uid"});
  auto it = known_.find(name);
  if (it != known_.end() && it->second.uid == uid) {
    const std::string& old_rv = JsonString(it->second.object, {"metadata", "resourceVersion"});
    const std::string new_rv = JsonString(object, {"metadata", "resourceVersion"});
    if (old_rv == new_rv) return false;
    auto old_number = ParseResourceVersion(old_rv);
    auto new_number = ParseResourceVersion(new_rv);
    // An echo of our own write, or an event older than it.
    if (old_number && new_number && *new_number <= *old_number) return false;
  }
  known_[name] = Known{object, uid, JsonString(object, {"spec", "pool", "name"})};
  return true;
}

void ResourceSlicePublisher::OnUpsert(const json& object) {
  // The field selector should make this redundant; it is cheap insurance.
  if (JsonString(object, {"spec", "driver"}) != options_.driver_name ||
      JsonString(object, {"spec", "nodeName"}) != options_.node_name) {
    return;
  }
  const std::string pool = JsonString(object, {"spec", "pool", "name"});
  const std::string uid = JsonString(object, {"metadata", "uid"});
  {
    common::MutexLock lock(state_mutex_);
    if (deleted_uids_.contains(uid)) return;
    if (!UpsertLocked(object)) return;
    if (pool == syncing_pool_) {
      sync_events_.emplace_back(uid, JsonString(object, {"metadata", "resourceVersion"}));
      return;
    }
    MarkDirtyLocked(pool);
  }
  LOG_INFO(3, "resource slice changed by someone else", {{"slice", JsonString(object, {"metadata", "name"})},
                                                         {"pool", pool}});
  queue_.AddAfter(pool, options_.event_delay);
}

void ResourceSlicePublisher::OnDelete(const json& object) {
  const std::string name = JsonString(object, {"metadata", "name"});
  const std::string uid = JsonString(object, {"metadata", "uid"});
  const std::string pool = JsonString(object, {"spec", "pool", "name"});
  {
    common::MutexLock lock(state_mutex_);
    if (deleted_uids_.erase(uid) > 0) return;  // our own delete
    auto it = known_.find(name);
    if (it == known_.end() || it->second.uid != uid) return;
    known_.erase(it);
    if (pool == syncing_pool_) {
      sync_events_.emplace_back(uid, "");  // never one of own_writes_
      return;
    }
    MarkDirtyLocked(pool);
  }
  LOG_INFO(2, "resource slice deleted by someone else", {{"slice", name}, {"pool", pool}});
  queue_.AddAfter(pool, options_.event_delay);
}

void ResourceSlicePublisher::RecordWritten(const json& object) {
  common::MutexLock lock(state_mutex_);
  UpsertLocked(object);
  own_writes_.insert(JsonString(object, {"metadata", "uid"}) + "/" +
                     JsonString(object, {"metadata", "resourceVersion"}));
}

void ResourceSlicePublisher::ExpectDelete(const std::string& uid) {
  common::MutexLock lock(state_mutex_);
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(deleted_uids_, [&](const auto& entry) { return now - entry.second > kDeletedUidTtl; });
  deleted_uids_[uid] = now;
}

void ResourceSlicePublisher::FinishDelete(const std::string& name, const std::string& uid, bool deleted) {
  common::MutexLock lock(state_mutex_);
  if (!deleted) {
    deleted_uids_.erase(uid);
    return;
  }
  auto it = known_.find(name);
  if (it != known_.end() && it->second.uid == uid) known_.erase(it);
}

bool ResourceSlicePublisher::EndSyncLocked() {
  bool outside = false;
  for (const auto& [uid, rv] : sync_events_) outside = outside || !own_writes_.contains(uid + "/" + rv);
  sync_events_.clear();
  own_writes_.clear();
  syncing_pool_.clear();
  return outside;
}

void ResourceSlicePublisher::RunWorker(std::stop_token stop) {
  if (!informer_->WaitForSync(stop)) return;
  {
    common::MutexLock lock(state_mutex_);
    informer_synced_ = true;
    state_changed_.notify_all();
    // Nothing is written before the driver said what it has.
    if (!state_changed_.wait(lock.native(), stop, [&]() REQUIRES(state_mutex_) { return has_desired_; })) return;
  }
  while (std::optional<std::string> pool = queue_.Get(stop)) {
    std::uint64_t seen = 0;
    {
      common::MutexLock lock(state_mutex_);
      auto it = dirty_.find(*pool);
      if (it != dirty_.end()) seen = it->second;
      syncing_pool_ = *pool;
    }
    bool retry = true;
    common::Status status = SyncPool(*pool, stop, retry);
    bool outside_change = false;
    {
      common::MutexLock lock(state_mutex_);
      outside_change = EndSyncLocked();
      if (outside_change) MarkDirtyLocked(*pool);
      if (status.ok() || !retry) {
        auto it = dirty_.find(*pool);
        if (it != dirty_.end() && it->second == seen) dirty_.erase(it);
      }
      if (status.ok()) {
        errors_.erase(*pool);
      } else {
        errors_[*pool] = status;
      }
    }
    state_changed_.notify_all();
    if (outside_change) {
      LOG_INFO(3, "resource slices changed by someone else during sync", {{"pool", *pool}});
      queue_.AddAfter(*pool, options_.event_delay);
    }
    if (status.ok() || !retry) {
      queue_.Forget(*pool);
    } else if (!stop.stop_requested()) {
      LOG_ERROR("resource slice sync failed", {{"pool", *pool}, {"err", status}});
      queue_.AddRateLimited(*pool);
    }
    queue_.Done(*pool);
  }
}

common::Status ResourceSlicePublisher::EnsureNodeUid(std::stop_token stop) {
  if (!node_uid_.empty()) return common::OkStatus();
  auto node = client_.Get(kNodes, "", options_.node_name, {}, stop);
  if (!node.ok()) return node.status().WithContext("node " + options_.node_name);
  node_uid_ = JsonString(*node, {"metadata", "uid"});
  if (node_uid_.empty()) return common::InternalError("node " + options_.node_name + " has no uid");
  return common::OkStatus();
}

void ResourceSlicePublisher::Reread(const std::string& name, std::stop_token stop) {
  auto fresh = client_.Get(kResourceSlices, "", name, {}, stop);
  if (fresh.ok()) {
    RecordWritten(*fresh);
  } else if (k8s::IsNotFound(fresh.status())) {
    common::MutexLock lock(state_mutex_);
    known_.erase(name);
  }
}

common::Status ResourceSlicePublisher::DeleteSlice(const json& slice, std::stop_token stop) {
  const std::string name = JsonString(slice, {"metadata", "name"});
  const std::string uid = JsonString(slice, {"metadata", "uid"});
  k8s::DeleteOptions options;
  // Only the version this decision was based on.
  options.precondition_uid = uid;
  options.precondition_resource_version = JsonString(slice, {"metadata", "resourceVersion"});
  ExpectDelete(uid);
  auto deleted = client_.Delete(kResourceSlices, "", name, options, stop);
  if (deleted.ok()) {
    ++deletes_;
    LOG_INFO(2, "resource slice deleted", {{"slice", name}, {"pool", JsonString(slice, {"spec", "pool", "name"})}});
  } else if (!k8s::IsNotFound(deleted.status())) {
    FinishDelete(name, uid, false);
    if (k8s::IsConflict(deleted.status())) Reread(name, stop);
    return deleted.status().WithContext("delete resource slice " + name);
  }
  FinishDelete(name, uid, true);
  return common::OkStatus();
}

common::Status ResourceSlicePublisher::SyncPool(const std::string& pool, std::stop_token stop, bool& retry) {
  std::optional<Expanded> desired;
  std::vector<json> existing;
  {
    common::MutexLock lock(state_mutex_);
    auto it = desired_.find(pool);
    if (it != desired_.end()) desired = it->second;
    for (const auto& [name, known] : known_) {
      if (known.pool == pool) existing.push_back(known.object);
    }
  }
  if (desired && !desired->invalid.ok()) {
    retry = false;  // leave what is published; the driver has to fix its input
    return desired->invalid;
  }
  if (!desired || desired->contents.empty()) {
    for (const auto& slice : existing) RETURN_IF_ERROR(DeleteSlice(slice, stop));
    accepted_.erase(pool);
    return common::OkStatus();
  }

  const std::vector<json>& contents = desired->contents;
  const std::size_t count = contents.size();
  const std::size_t width = IndexWidth(count);
  std::int64_t max_generation = 0;
  for (const auto& slice : existing) {
    max_generation = std::max(max_generation, JsonInt(slice, {"spec", "pool", "generation"}));
  }

  // Match stored slices of the newest generation to desired indices by the
  // index in their names; everything else is obsolete.
  std::vector<std::optional<json>> matched(count);
  std::vector<json> obsolete;
  bool surplus = false;  // an unmatched slice of the newest generation
  for (const auto& slice : existing) {
    if (JsonInt(slice, {"spec", "pool", "generation"}) < max_generation) {
      obsolete.push_back(slice);
      continue;
    }
    auto index = DecodeIndex(JsonString(slice, {"metadata", "name"}), width);
    if (index && *index < count && !matched[*index]) {
      matched[*index] = slice;
    } else {
      obsolete.push_back(slice);
      surplus = true;
    }
  }

  k8s::WriteOptions write_options;
  write_options.field_manager = options_.field_manager;
  auto& accepted = accepted_[pool];
  auto expected_content = [&](std::size_t i) {
    json wanted = NormalContent(contents[i]);
    auto it = accepted.find(i);
    if (it != accepted.end() && it->second.sent == wanted) return it->second.stored;
    return wanted;
  };
  bool any_matched = false;
  bool all_equal = true;
  for (std::size_t i = 0; i < count; ++i) {
    if (!matched[i]) continue;
    any_matched = true;
    const json& stored = *matched[i];
    if (JsonInt(stored, {"spec", "pool", "resourceSliceCount"}) != static_cast<std::int64_t>(count) ||
        NormalContent(stored.value("spec", json::object())) != expected_content(i)) {
      all_equal = false;
    }
  }
  // Slices that vanished while the rest still match are re-created in the
  // same generation; any other change starts a new one, rewriting all.
  const bool keep_generation = any_matched && all_equal && !surplus;
  const std::int64_t generation = keep_generation ? max_generation : max_generation + 1;

  auto spec_for = [&](std::size_t i) {
    json spec = contents[i];
    spec["driver"] = options_.driver_name;
    spec["nodeName"] = options_.node_name;
    spec["pool"] = {{"name", pool}, {"generation", generation}, {"resourceSliceCount", count}};
    return spec;
  };
  auto remember = [&](std::size_t i, const json& stored) {
    RecordWritten(stored);
    json sent = NormalContent(contents[i]);
    json got = NormalContent(stored.value("spec", json::object()));
    if (sent == got) {
      accepted.erase(i);
      return;
    }
    // A feature gate that is off drops fields silently; compare against
    // what the server keeps so the next sync does not write again.
    LOG_WARNING("API server changed resource slice content", {{"slice", JsonString(stored, {"metadata", "name"})},
                                                             {"pool", pool}, {"sent", sent.dump()},
                                                             {"stored", got.dump()}});
    accepted[i] = Accepted{std::move(sent), std::move(got)};
  };

  // Obsolete slices go first: devices the driver no longer has should
  // disappear even when publishing the new ones fails.
  for (const auto& slice : obsolete) RETURN_IF_ERROR(DeleteSlice(slice, stop));

  for (std::size_t i = 0; i < count; ++i) {
    if (!matched[i] || keep_generation) continue;
    json object = *matched[i];
    json spec = spec_for(i);
    if (spec.contains("devices")) CopyTaintTimes(object["spec"].value("devices", json::array()), spec["devices"]);
    object["spec"] = std::move(spec);
    const std::string name = JsonString(object, {"metadata", "name"});
    auto updated = client_.Update(kResourceSlices, "", object, write_options, stop);
    if (!updated.ok()) {
      if (k8s::IsConflict(updated.status()) || k8s::IsNotFound(updated.status())) Reread(name, stop);
      return updated.status().WithContext("update resource slice " + name);
    }
    ++updates_;
    LOG_INFO(2, "resource slice updated", {{"slice", name}, {"pool", pool}, {"generation", generation}});
    remember(i, *updated);
  }

  bool need_create = false;
  for (const auto& slice : matched) need_create = need_create || !slice;
  if (!need_create) return common::OkStatus();
  RETURN_IF_ERROR(EnsureNodeUid(stop));
  for (std::size_t i = 0; i < count; ++i) {
    if (matched[i]) continue;
    json object = {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "ResourceSlice"},
        {"metadata",
         {{"generateName", EncodeIndex(i, width) + "-" + options_.driver_name + "-" + options_.node_name + "-"},
          {"ownerReferences", json::array({{{"apiVersion", "v1"},
                                            {"kind", "Node"},
                                            {"name", options_.node_name},
                                            {"uid", node_uid_},
                                            {"controller", true}}})}}},
        {"spec", spec_for(i)},
    };
    auto created = client_.Create(kResourceSlices, "", object, write_options, stop);
    if (!created.ok()) return created.status().WithContext("create resource slice " + std::to_string(i) + " of pool " + pool);
    ++creates_;
    LOG_INFO(2, "resource slice created", {{"slice", JsonString(*created, {"metadata", "name"})}, {"pool", pool},
                                           {"generation", generation}});
    remember(i, *created);
  }
  return common::OkStatus();
}

}  // namespace nvdra::kubeletplugin
