#pragma once

// The informer's cache: the last known state of every object of one watch,
// keyed by "namespace/name" ("name" when cluster-scoped), with secondary
// indexes. Defines: IndexFunc, Indexer, kNamespaceIndex, kLabelIndex,
// LabelIndexValue(), NamespaceIndexFunc(), LabelIndexFunc(),
// DefaultIndexers(), ObjectKey(), DeltaType, Delta, Store.
//
// Objects are immutable snapshots (shared_ptr<const json>): a reader keeps
// what it got for as long as it likes and never sees later changes. The
// store keeps each object packed (packed_object.h: about a ninth of a parsed
// tree) and readers get it unpacked: Get(), List() and ByIndex() decode each
// object they return, unless the tree it was stored from is still held by
// someone, in which case they return that same tree. Readers that only need
// keys or index values (ListKeys, IndexValues, size) decode nothing.
// Index functions run when an object is prepared for writing (Prepare),
// outside the store's lock, and each object's index values are kept beside
// it, so a removal never calls them again.
//
// Ownership: owns its entries and index functions; shares the objects with
// readers. Thread-safety: thread-safe. Readers run concurrently; writers
// (the informer) exclude them only for the map update itself.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "k8s/cache/packed_object.h"

namespace nvdra::k8s::cache {

// The index values of an object (zero, one or many). Must not throw, must be
// a pure function of the object, and is called from the thread preparing a
// write (Store::Prepare; the informer's watch thread).
using IndexFunc = std::function<std::vector<std::string>(const nlohmann::json& object)>;

struct Indexer {
  std::string name;
  IndexFunc values;
};

// metadata.namespace; cluster-scoped objects are indexed under "".
inline constexpr std::string_view kNamespaceIndex = "namespace";
// One value per label, "key=value" (see LabelIndexValue).
inline constexpr std::string_view kLabelIndex = "label";

// The kLabelIndex value for a label: "key=value".
std::string LabelIndexValue(std::string_view key, std::string_view value);

IndexFunc NamespaceIndexFunc();
IndexFunc LabelIndexFunc();
// kNamespaceIndex and kLabelIndex.
std::vector<Indexer> DefaultIndexers();

// "namespace/name", or "name" for an object without metadata.namespace.
// kInvalidArgument when metadata.name is missing or empty.
common::StatusOr<std::string> ObjectKey(const nlohmann::json& object);

enum class DeltaType { kAdded, kUpdated, kDeleted };

// One change Replace() made, in packed form (unpack what you read).
// old_object is null for kAdded, new_object for kDeleted.
struct Delta {
  DeltaType type;
  std::string key;
  PackedPtr old_object;
  PackedPtr new_object;
};

// An object ready to be written to a Store: its key, packed form and index
// values (Store::Prepare). Movable; its contents are fixed.
struct StoreItem {
  std::string key;
  PackedPtr object;
  std::vector<std::vector<std::string>> index_values;  // per indexer, same order
};

class Store {
 public:
  // Index names must be unique and functions non-empty; a violation is a
  // programmer error and aborts.
  explicit Store(std::vector<Indexer> indexers = DefaultIndexers());
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // --- Readers ---------------------------------------------------------------
  // The object under `key`, or null.
  ObjectPtr Get(std::string_view key) const;
  // Every object, in no particular order.
  std::vector<ObjectPtr> List() const;
  std::vector<std::string> ListKeys() const;
  // The objects whose index `index` has the value `value` (empty when none).
  // kNotFound when no indexer is named `index`.
  common::StatusOr<std::vector<ObjectPtr>> ByIndex(std::string_view index,
                                                   std::string_view value) const;
  // Every value index `index` currently holds. kNotFound as above.
  common::StatusOr<std::vector<std::string>> IndexValues(std::string_view index) const;
  std::size_t size() const;
  // The resourceVersion the cache is current to (last list, event or
  // bookmark); empty before the first list.
  std::string ResourceVersion() const;

  // The packed object under `key`, or null: for checks (its
  // resourceVersion) that need no unpacking.
  PackedPtr GetPacked(std::string_view key) const;

  // --- Writers (the informer) ------------------------------------------------
  // Packs `object` under `key` and runs the index functions; takes no lock
  // (call it on any thread, then hand the item to the writer). The ObjectPtr
  // form lets readers share `object` itself while anyone holds it; the json
  // form is for objects nobody else holds (list items).
  StoreItem Prepare(std::string key, const ObjectPtr& object) const;
  StoreItem Prepare(std::string key, const nlohmann::json& object) const;
  // Inserts or replaces item.key; returns the previous object or null. A
  // null item.object is a programmer error and aborts, and so are index
  // values not made by this store's Prepare.
  PackedPtr Put(StoreItem item);
  // Removes `key`; returns the removed object, or null when absent (not an
  // error).
  PackedPtr Remove(std::string_view key);
  // Makes the store hold exactly `items` and returns what changed: adds for
  // new keys, deletes (with the last cached object) for keys absent from
  // `items`, and updates only where the object differs: its resourceVersion
  // changed, or, when either has none, its content did. An unchanged object
  // keeps its old snapshot. Later duplicates of a key win.
  std::vector<Delta> Replace(std::vector<StoreItem> items, std::string resource_version);
  void SetResourceVersion(std::string resource_version);

  // Conveniences over the above (tests, simple callers): unpacked results.
  ObjectPtr Upsert(const std::string& key, ObjectPtr object);
  ObjectPtr Delete(std::string_view key);
  std::vector<Delta> Replace(std::vector<std::pair<std::string, ObjectPtr>> objects,
                             std::string resource_version);

 private:
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  template <typename V>
  using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;
  using KeySet = std::unordered_set<std::string, StringHash, std::equal_to<>>;

  struct Entry {
    PackedPtr object;
    std::vector<std::vector<std::string>> index_values;  // per indexer, same order
  };

  std::vector<std::vector<std::string>> ComputeIndexValues(const nlohmann::json& object) const;
  // Aborts on a null object or index values of the wrong shape.
  void CheckItem(const StoreItem& item) const;
  // Position of `index` in indexers_, or -1.
  int IndexPosition(std::string_view index) const;
  void IndexLocked(const std::string& key, const Entry& entry) REQUIRES(entries_mutex_);
  void UnindexLocked(const std::string& key, const Entry& entry) REQUIRES(entries_mutex_);

  const std::vector<Indexer> indexers_;

  mutable common::SharedMutex entries_mutex_;  // guards everything below
  StringMap<Entry> entries_ GUARDED_BY(entries_mutex_);
  std::vector<StringMap<KeySet>> indexes_ GUARDED_BY(entries_mutex_);  // per indexer: value -> keys
  std::string resource_version_ GUARDED_BY(entries_mutex_);
};

}  // namespace nvdra::k8s::cache
