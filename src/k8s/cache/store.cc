#include "k8s/cache/store.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "k8s/cache/list_watch.h"

namespace nvdra::k8s::cache {
namespace {

const nlohmann::json* Metadata(const nlohmann::json& object) {
  if (!object.is_object()) return nullptr;
  auto it = object.find("metadata");
  if (it == object.end() || !it->is_object()) return nullptr;
  return &*it;
}

std::string MetadataString(const nlohmann::json& object, const char* field) {
  const nlohmann::json* metadata = Metadata(object);
  if (metadata == nullptr) return {};
  auto it = metadata->find(field);
  if (it == metadata->end() || !it->is_string()) return {};
  return it->get<std::string>();
}

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "cache::Store: %s\n", message.c_str());
  std::abort();
}

bool SameObject(const nlohmann::json& a, const nlohmann::json& b) {
  const std::string rv_a = ObjectResourceVersion(a);
  const std::string rv_b = ObjectResourceVersion(b);
  if (!rv_a.empty() && !rv_b.empty()) return rv_a == rv_b;
  return a == b;
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
    return std::vector<std::string>{MetadataString(object, "namespace")};
  };
}

IndexFunc LabelIndexFunc() {
  return [](const nlohmann::json& object) {
    std::vector<std::string> values;
    const nlohmann::json* metadata = Metadata(object);
    if (metadata == nullptr) return values;
    auto labels = metadata->find("labels");
    if (labels == metadata->end() || !labels->is_object()) return values;
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
  const std::string name = MetadataString(object, "name");
  if (name.empty()) return common::InvalidArgumentError("object has no metadata.name");
  const std::string ns = MetadataString(object, "namespace");
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

ObjectPtr Store::Get(std::string_view key) const {
  std::shared_lock lock(entries_mutex_);
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second.object;
}

std::vector<ObjectPtr> Store::List() const {
  std::shared_lock lock(entries_mutex_);
  std::vector<ObjectPtr> out;
  out.reserve(entries_.size());
  for (const auto& [key, entry] : entries_) out.push_back(entry.object);
  return out;
}

std::vector<std::string> Store::ListKeys() const {
  std::shared_lock lock(entries_mutex_);
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [key, entry] : entries_) out.push_back(key);
  return out;
}

common::StatusOr<std::vector<ObjectPtr>> Store::ByIndex(std::string_view index,
                                                        std::string_view value) const {
  const int position = IndexPosition(index);
  if (position < 0) return common::NotFoundError("no index \"" + std::string(index) + "\"");
  std::shared_lock lock(entries_mutex_);
  std::vector<ObjectPtr> out;
  const auto& by_value = indexes_[static_cast<std::size_t>(position)];
  auto keys = by_value.find(value);
  if (keys == by_value.end()) return out;
  out.reserve(keys->second.size());
  for (const std::string& key : keys->second) {
    auto entry = entries_.find(key);
    if (entry != entries_.end()) out.push_back(entry->second.object);
  }
  return out;
}

common::StatusOr<std::vector<std::string>> Store::IndexValues(std::string_view index) const {
  const int position = IndexPosition(index);
  if (position < 0) return common::NotFoundError("no index \"" + std::string(index) + "\"");
  std::shared_lock lock(entries_mutex_);
  std::vector<std::string> out;
  for (const auto& [value, keys] : indexes_[static_cast<std::size_t>(position)]) {
    out.push_back(value);
  }
  return out;
}

std::size_t Store::size() const {
  std::shared_lock lock(entries_mutex_);
  return entries_.size();
}

std::string Store::ResourceVersion() const {
  std::shared_lock lock(entries_mutex_);
  return resource_version_;
}

ObjectPtr Store::Upsert(const std::string& key, ObjectPtr object) {
  if (object == nullptr) Die("Upsert(" + key + ") with a null object");
  Entry entry{object, ComputeIndexValues(*object)};
  std::unique_lock lock(entries_mutex_);
  ObjectPtr old;
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    old = it->second.object;
    UnindexLocked(key, it->second);
    it->second = std::move(entry);
  } else {
    it = entries_.emplace(key, std::move(entry)).first;
  }
  IndexLocked(key, it->second);
  return old;
}

ObjectPtr Store::Delete(std::string_view key) {
  std::unique_lock lock(entries_mutex_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  ObjectPtr old = it->second.object;
  UnindexLocked(it->first, it->second);
  entries_.erase(it);
  return old;
}

std::vector<Delta> Store::Replace(std::vector<std::pair<std::string, ObjectPtr>> objects,
                                  std::string resource_version) {
  // Index functions are user code: run them before taking the lock.
  StringMap<Entry> incoming;
  incoming.reserve(objects.size());
  for (auto& [key, object] : objects) {
    if (object == nullptr) Die("Replace with a null object for " + key);
    Entry entry{object, ComputeIndexValues(*object)};
    incoming.insert_or_assign(std::move(key), std::move(entry));
  }

  std::vector<Delta> deltas;
  std::unique_lock lock(entries_mutex_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (incoming.contains(it->first)) {
      ++it;
      continue;
    }
    deltas.push_back(Delta{DeltaType::kDeleted, it->first, it->second.object, nullptr});
    UnindexLocked(it->first, it->second);
    it = entries_.erase(it);
  }
  for (auto& [key, entry] : incoming) {
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      deltas.push_back(Delta{DeltaType::kAdded, key, nullptr, entry.object});
      IndexLocked(key, entries_.emplace(key, std::move(entry)).first->second);
      continue;
    }
    if (SameObject(*it->second.object, *entry.object)) continue;
    deltas.push_back(Delta{DeltaType::kUpdated, key, it->second.object, entry.object});
    UnindexLocked(key, it->second);
    it->second = std::move(entry);
    IndexLocked(key, it->second);
  }
  resource_version_ = std::move(resource_version);
  return deltas;
}

void Store::SetResourceVersion(std::string resource_version) {
  std::unique_lock lock(entries_mutex_);
  resource_version_ = std::move(resource_version);
}

std::vector<std::vector<std::string>> Store::ComputeIndexValues(const nlohmann::json& object) const {
  std::vector<std::vector<std::string>> values;
  values.reserve(indexers_.size());
  for (const Indexer& indexer : indexers_) values.push_back(indexer.values(object));
  return values;
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
