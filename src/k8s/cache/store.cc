#include "k8s/cache/store.h"

#include <cstdio>
#include <cstdlib>

#include "common/json_fields.h"
#include "k8s/cache/list_watch.h"

namespace nvdra::k8s::cache {
namespace {

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "cache::Store: %s\n", message.c_str());
  std::abort();
}

bool SameObject(const PackedObject& a, const PackedObject& b) {
  if (!a.resource_version().empty() && !b.resource_version().empty()) {
    return a.resource_version() == b.resource_version();
  }
  return a.SameContent(b);
}

}  // namespace

std::string LabelIndexValue(std::string_view key, std::string_view value) {
  std::string out;
  out.reserve(key.size() + 1 + value.size());
  out.append(key).append("=").append(value);
  return out;
}

IndexFunc NamespaceIndexFunc() {
  return [](const nlohmann::json& object) {
    return std::vector<std::string>{common::JsonString(object, {"metadata", "namespace"})};
  };
}

IndexFunc LabelIndexFunc() {
  return [](const nlohmann::json& object) {
    std::vector<std::string> values;
    const nlohmann::json* labels = common::JsonFind(object, {"metadata", "labels"});
    if (labels == nullptr || !labels->is_object()) return values;
    for (auto it = labels->begin(); it != labels->end(); ++it) {
      if (it.value().is_string()) {
        values.push_back(LabelIndexValue(it.key(), it.value().get_ref<const std::string&>()));
      }
    }
    return values;
  };
}

std::vector<Indexer> DefaultIndexers() {
  return {Indexer{std::string(kNamespaceIndex), NamespaceIndexFunc()},
          Indexer{std::string(kLabelIndex), LabelIndexFunc()}};
}

common::StatusOr<std::string> ObjectKey(const nlohmann::json& object) {
  const std::string name = common::JsonString(object, {"metadata", "name"});
  if (name.empty()) return common::InvalidArgumentError("object has no metadata.name");
  const std::string ns = common::JsonString(object, {"metadata", "namespace"});
  if (ns.empty()) return name;
  return ns + "/" + name;
}

Store::Store(std::vector<Indexer> indexers) : indexers_(std::move(indexers)) {
  for (std::size_t i = 0; i < indexers_.size(); ++i) {
    if (!indexers_[i].values) Die("indexer \"" + indexers_[i].name + "\" has no function");
    for (std::size_t j = 0; j < i; ++j) {
      if (indexers_[j].name == indexers_[i].name) {
        Die("indexer \"" + indexers_[i].name + "\" registered twice");
      }
    }
  }
  indexes_.resize(indexers_.size());
}

namespace {

// Unpacks outside the store's lock: decoding is the slow part of a read.
std::vector<ObjectPtr> UnpackAll(const std::vector<PackedPtr>& packed) {
  std::vector<ObjectPtr> out;
  out.reserve(packed.size());
  for (const PackedPtr& object : packed) out.push_back(object->Unpack());
  return out;
}

}  // namespace

ObjectPtr Store::Get(std::string_view key) const {
  PackedPtr packed = GetPacked(key);
  return packed == nullptr ? nullptr : packed->Unpack();
}

PackedPtr Store::GetPacked(std::string_view key) const {
  common::ReaderLock lock(entries_mutex_);
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second.object;
}

std::vector<ObjectPtr> Store::List() const {
  std::vector<PackedPtr> packed;
  {
    common::ReaderLock lock(entries_mutex_);
    packed.reserve(entries_.size());
    for (const auto& [key, entry] : entries_) packed.push_back(entry.object);
  }
  return UnpackAll(packed);
}

std::vector<std::string> Store::ListKeys() const {
  common::ReaderLock lock(entries_mutex_);
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [key, entry] : entries_) out.push_back(key);
  return out;
}

common::StatusOr<std::vector<ObjectPtr>> Store::ByIndex(std::string_view index,
                                                        std::string_view value) const {
  const int position = IndexPosition(index);
  if (position < 0) return common::NotFoundError("no index \"" + std::string(index) + "\"");
  std::vector<PackedPtr> packed;
  {
    common::ReaderLock lock(entries_mutex_);
    const auto& by_value = indexes_[static_cast<std::size_t>(position)];
    auto keys = by_value.find(value);
    if (keys == by_value.end()) return std::vector<ObjectPtr>();
    packed.reserve(keys->second.size());
    for (const std::string& key : keys->second) {
      auto entry = entries_.find(key);
      if (entry != entries_.end()) packed.push_back(entry->second.object);
    }
  }
  return UnpackAll(packed);
}

common::StatusOr<std::vector<std::string>> Store::IndexValues(std::string_view index) const {
  const int position = IndexPosition(index);
  if (position < 0) return common::NotFoundError("no index \"" + std::string(index) + "\"");
  common::ReaderLock lock(entries_mutex_);
  std::vector<std::string> out;
  for (const auto& [value, keys] : indexes_[static_cast<std::size_t>(position)]) {
    out.push_back(value);
  }
  return out;
}

std::size_t Store::size() const {
  common::ReaderLock lock(entries_mutex_);
  return entries_.size();
}

std::string Store::ResourceVersion() const {
  common::ReaderLock lock(entries_mutex_);
  return resource_version_;
}

StoreItem Store::Prepare(std::string key, const ObjectPtr& object) const {
  if (object == nullptr) Die("Prepare(" + key + ") with a null object");
  return StoreItem{std::move(key), std::make_shared<const PackedObject>(object),
                   ComputeIndexValues(*object)};
}

StoreItem Store::Prepare(std::string key, const nlohmann::json& object) const {
  return StoreItem{std::move(key), std::make_shared<const PackedObject>(object),
                   ComputeIndexValues(object)};
}

PackedPtr Store::Put(StoreItem item) {
  CheckItem(item);
  Entry entry{std::move(item.object), std::move(item.index_values)};
  common::WriterLock lock(entries_mutex_);
  PackedPtr old;
  auto it = entries_.find(item.key);
  if (it != entries_.end()) {
    old = std::move(it->second.object);
    UnindexLocked(it->first, it->second);
    it->second = std::move(entry);
  } else {
    it = entries_.emplace(std::move(item.key), std::move(entry)).first;
  }
  IndexLocked(it->first, it->second);
  return old;
}

PackedPtr Store::Remove(std::string_view key) {
  common::WriterLock lock(entries_mutex_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  PackedPtr old = std::move(it->second.object);
  UnindexLocked(it->first, it->second);
  entries_.erase(it);
  return old;
}

std::vector<Delta> Store::Replace(std::vector<StoreItem> items, std::string resource_version) {
  StringMap<Entry> incoming;
  incoming.reserve(items.size());
  for (StoreItem& item : items) {
    CheckItem(item);
    incoming.insert_or_assign(std::move(item.key),
                              Entry{std::move(item.object), std::move(item.index_values)});
  }
  items = {};

  std::vector<Delta> deltas;
  common::WriterLock lock(entries_mutex_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (incoming.contains(it->first)) {
      ++it;
      continue;
    }
    deltas.push_back(Delta{DeltaType::kDeleted, it->first, it->second.object, nullptr});
    UnindexLocked(it->first, it->second);
    it = entries_.erase(it);
  }
  entries_.reserve(incoming.size());
  while (!incoming.empty()) {
    // Moved out node by node, so the incoming map shrinks as the store grows.
    auto node = incoming.extract(incoming.begin());
    const std::string& key = node.key();
    Entry& entry = node.mapped();
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      deltas.push_back(Delta{DeltaType::kAdded, key, nullptr, entry.object});
      auto inserted = entries_.insert(std::move(node)).position;
      IndexLocked(inserted->first, inserted->second);
      continue;
    }
    if (SameObject(*it->second.object, *entry.object)) continue;
    deltas.push_back(Delta{DeltaType::kUpdated, key, it->second.object, entry.object});
    UnindexLocked(key, it->second);
    it->second = std::move(entry);
    IndexLocked(it->first, it->second);
  }
  resource_version_ = std::move(resource_version);
  return deltas;
}

ObjectPtr Store::Upsert(const std::string& key, ObjectPtr object) {
  if (object == nullptr) Die("Upsert(" + key + ") with a null object");
  PackedPtr old = Put(Prepare(key, object));
  return old == nullptr ? nullptr : old->Unpack();
}

ObjectPtr Store::Delete(std::string_view key) {
  PackedPtr old = Remove(key);
  return old == nullptr ? nullptr : old->Unpack();
}

std::vector<Delta> Store::Replace(std::vector<std::pair<std::string, ObjectPtr>> objects,
                                  std::string resource_version) {
  std::vector<StoreItem> items;
  items.reserve(objects.size());
  for (auto& [key, object] : objects) {
    if (object == nullptr) Die("Replace with a null object for " + key);
    items.push_back(Prepare(std::move(key), object));
  }
  return Replace(std::move(items), std::move(resource_version));
}

void Store::SetResourceVersion(std::string resource_version) {
  common::WriterLock lock(entries_mutex_);
  resource_version_ = std::move(resource_version);
}

std::vector<std::vector<std::string>> Store::ComputeIndexValues(const nlohmann::json& object) const {
  std::vector<std::vector<std::string>> values;
  values.reserve(indexers_.size());
  for (const Indexer& indexer : indexers_) values.push_back(indexer.values(object));
  return values;
}

void Store::CheckItem(const StoreItem& item) const {
  if (item.object == nullptr) Die("write of " + item.key + " with a null object");
  if (item.index_values.size() != indexers_.size()) {
    Die("write of " + item.key + " with index values not from this store's Prepare");
  }
}

int Store::IndexPosition(std::string_view index) const {
  for (std::size_t i = 0; i < indexers_.size(); ++i) {
    if (indexers_[i].name == index) return static_cast<int>(i);
  }
  return -1;
}

void Store::IndexLocked(const std::string& key, const Entry& entry) {
  for (std::size_t i = 0; i < indexes_.size(); ++i) {
    for (const std::string& value : entry.index_values[i]) indexes_[i][value].insert(key);
  }
}

void Store::UnindexLocked(const std::string& key, const Entry& entry) {
  for (std::size_t i = 0; i < indexes_.size(); ++i) {
    for (const std::string& value : entry.index_values[i]) {
      auto keys = indexes_[i].find(value);
      if (keys == indexes_[i].end()) continue;
      keys->second.erase(key);
      if (keys->second.empty()) indexes_[i].erase(keys);
    }
  }
}

}  // namespace nvdra::k8s::cache
