#include "k8s/cache/store.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace nvdra::k8s::cache {
namespace {

using nlohmann::json;

ObjectPtr Object(const std::string& ns, const std::string& name, const std::string& rv,
                 json labels = json::object()) {
  json metadata = {{"name", name}, {"resourceVersion", rv}, {"labels", std::move(labels)}};
  if (!ns.empty()) metadata["namespace"] = ns;
  return std::make_shared<const json>(json{{"metadata", std::move(metadata)}});
}

std::string Key(const ObjectPtr& object) { return *ObjectKey(*object); }

std::vector<std::string> Names(const std::vector<ObjectPtr>& objects) {
  std::vector<std::string> names;
  for (const ObjectPtr& object : objects) names.push_back(Key(object));
  std::sort(names.begin(), names.end());
  return names;
}

void Put(Store& store, const ObjectPtr& object) { store.Upsert(Key(object), object); }

TEST(StoreTest, KeyIsNamespaceSlashNameOrNameWhenClusterScoped) {
  EXPECT_EQ(*ObjectKey(json{{"metadata", {{"name", "a"}, {"namespace", "ns"}}}}), "ns/a");
  EXPECT_EQ(*ObjectKey(json{{"metadata", {{"name", "node-1"}}}}), "node-1");
  EXPECT_EQ(ObjectKey(json{{"metadata", {{"namespace", "ns"}}}}).status().code(),
            common::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ObjectKey(json::array()).ok());
  EXPECT_FALSE(ObjectKey(json{{"metadata", {{"name", 7}}}}).ok());
}

TEST(StoreTest, GetReturnsTheSharedSnapshotNotACopy) {
  Store store;
  ObjectPtr a = Object("ns", "a", "1");
  EXPECT_EQ(store.Upsert("ns/a", a), nullptr);
  EXPECT_EQ(store.Get("ns/a").get(), a.get());
  EXPECT_EQ(store.Get("ns/missing"), nullptr);
  ObjectPtr a2 = Object("ns", "a", "2");
  EXPECT_EQ(store.Upsert("ns/a", a2).get(), a.get());
  EXPECT_EQ(store.Delete("ns/a").get(), a2.get());
  EXPECT_EQ(store.Delete("ns/a"), nullptr) << "deleting an absent key is not an error";
  EXPECT_EQ(store.size(), 0u);
}

TEST(StoreTest, AnObjectNobodyHoldsIsUnpackedIntoAnEqualFreshTree) {
  Store store;
  json original = Object("ns", "a", "1", {{"app", "gpu"}})->get<json>();
  original["spec"] = {{"n", -3}, {"big", 18446744073709551615ULL}, {"f", 0.25}, {"list", {1, "x", nullptr, true}}};
  store.Upsert("ns/a", std::make_shared<const json>(original));  // dropped at once
  ObjectPtr first = store.Get("ns/a");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(*first, original);
  // Trees decoded for readers are each the reader's own (equal, not shared).
  ObjectPtr second = store.Get("ns/a");
  EXPECT_NE(second.get(), first.get());
  EXPECT_EQ(*second, original);
  EXPECT_EQ(store.GetPacked("ns/a")->resource_version(), "1");
  EXPECT_EQ(Names(*store.ByIndex(kLabelIndex, "app=gpu")), (std::vector<std::string>{"ns/a"}));
}

TEST(StoreTest, PrepareThenPutAndRemoveWorkOnPackedObjects) {
  Store store;
  StoreItem item = store.Prepare("ns/a", json{{"metadata", {{"name", "a"}, {"namespace", "ns"},
                                                             {"resourceVersion", "4"}}}});
  EXPECT_EQ(item.key, "ns/a");
  ASSERT_EQ(item.index_values.size(), 2u);
  EXPECT_EQ(item.index_values[0], (std::vector<std::string>{"ns"}));
  EXPECT_EQ(store.Put(std::move(item)), nullptr);
  PackedPtr old = store.Put(store.Prepare("ns/a", Object("ns", "a", "5")));
  ASSERT_NE(old, nullptr);
  EXPECT_EQ(old->resource_version(), "4");
  EXPECT_EQ(store.GetPacked("ns/a")->resource_version(), "5");
  EXPECT_EQ(store.Remove("ns/a")->resource_version(), "5");
  EXPECT_EQ(store.Remove("ns/a"), nullptr);
  EXPECT_EQ(store.size(), 0u);
}

TEST(StoreTest, ReplaceWithoutResourceVersionsComparesContent) {
  Store store;
  auto bare = [](int n) {
    return std::make_shared<const json>(json{{"metadata", {{"name", "x"}}}, {"n", n}});
  };
  store.Upsert("x", bare(1));
  EXPECT_TRUE(store.Replace({{"x", bare(1)}}, "2").empty());
  std::vector<Delta> deltas = store.Replace({{"x", bare(2)}}, "3");
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(deltas[0].type, DeltaType::kUpdated);
  EXPECT_EQ((*store.Get("x"))["n"], 2);
}

TEST(StoreTest, NamespaceIndexSeparatesNamespacesAndClusterScope) {
  Store store;
  Put(store, Object("ns1", "a", "1"));
  Put(store, Object("ns1", "b", "1"));
  Put(store, Object("ns2", "a", "1"));
  Put(store, Object("", "node", "1"));
  EXPECT_EQ(Names(*store.ByIndex(kNamespaceIndex, "ns1")),
            (std::vector<std::string>{"ns1/a", "ns1/b"}));
  EXPECT_EQ(Names(*store.ByIndex(kNamespaceIndex, "ns2")), (std::vector<std::string>{"ns2/a"}));
  EXPECT_EQ(Names(*store.ByIndex(kNamespaceIndex, "")), (std::vector<std::string>{"node"}));
  EXPECT_TRUE(store.ByIndex(kNamespaceIndex, "ns3")->empty());
}

TEST(StoreTest, LabelIndexFollowsLabelChangesAndDeletes) {
  Store store;
  Put(store, Object("ns", "a", "1", {{"app", "gpu"}, {"tier", "x"}}));
  Put(store, Object("ns", "b", "1", {{"app", "gpu"}}));
  EXPECT_EQ(Names(*store.ByIndex(kLabelIndex, LabelIndexValue("app", "gpu"))),
            (std::vector<std::string>{"ns/a", "ns/b"}));
  Put(store, Object("ns", "a", "2", {{"app", "cd"}}));
  EXPECT_EQ(Names(*store.ByIndex(kLabelIndex, "app=gpu")), (std::vector<std::string>{"ns/b"}));
  EXPECT_EQ(Names(*store.ByIndex(kLabelIndex, "app=cd")), (std::vector<std::string>{"ns/a"}));
  EXPECT_TRUE(store.ByIndex(kLabelIndex, "tier=x")->empty()) << "stale index value kept";
  store.Delete("ns/b");
  std::vector<std::string> values = *store.IndexValues(kLabelIndex);
  EXPECT_EQ(values, (std::vector<std::string>{"app=cd"}));
}

TEST(StoreTest, CustomIndexWithManyValuesPerObject) {
  std::vector<Indexer> indexers = DefaultIndexers();
  indexers.push_back({"device", [](const json& object) {
                        std::vector<std::string> out;
                        if (!object.contains("devices")) return out;
                        for (const json& d : object["devices"]) out.push_back(d.get<std::string>());
                        return out;
                      }});
  Store store(std::move(indexers));
  store.Upsert("s1", std::make_shared<const json>(
                         json{{"metadata", {{"name", "s1"}}}, {"devices", {"gpu-0", "gpu-1"}}}));
  store.Upsert("s2", std::make_shared<const json>(
                         json{{"metadata", {{"name", "s2"}}}, {"devices", {"gpu-1"}}}));
  EXPECT_EQ(Names(*store.ByIndex("device", "gpu-1")), (std::vector<std::string>{"s1", "s2"}));
  EXPECT_EQ(Names(*store.ByIndex("device", "gpu-0")), (std::vector<std::string>{"s1"}));
  EXPECT_EQ(store.ByIndex("no-such-index", "x").status().code(), common::StatusCode::kNotFound);
}

TEST(StoreTest, ReplaceReportsExactlyTheDifference) {
  Store store;
  ObjectPtr a = Object("ns", "a", "1");
  Put(store, a);
  Put(store, Object("ns", "b", "1"));
  ObjectPtr c = Object("ns", "c", "1");
  Put(store, c);

  std::vector<std::pair<std::string, ObjectPtr>> listed = {
      {"ns/a", Object("ns", "a", "1")}, {"ns/b", Object("ns", "b", "5")}, {"ns/d", Object("ns", "d", "6")}};
  std::vector<Delta> deltas = store.Replace(std::move(listed), "20");
  std::sort(deltas.begin(), deltas.end(), [](const Delta& x, const Delta& y) { return x.key < y.key; });
  ASSERT_EQ(deltas.size(), 3u);
  EXPECT_EQ(deltas[0].key, "ns/b");
  EXPECT_EQ(deltas[0].type, DeltaType::kUpdated);
  EXPECT_EQ((*deltas[0].old_object->Unpack())["metadata"]["resourceVersion"], "1");
  EXPECT_EQ((*deltas[0].new_object->Unpack())["metadata"]["resourceVersion"], "5");
  EXPECT_EQ(deltas[1].key, "ns/c");
  EXPECT_EQ(deltas[1].type, DeltaType::kDeleted);
  EXPECT_EQ(deltas[1].old_object->Unpack().get(), c.get()) << "a delete carries the last cached object";
  EXPECT_EQ(deltas[2].key, "ns/d");
  EXPECT_EQ(deltas[2].type, DeltaType::kAdded);
  EXPECT_EQ(store.Get("ns/a").get(), a.get()) << "an unchanged object keeps its snapshot";
  EXPECT_EQ(store.ResourceVersion(), "20");
  EXPECT_EQ(Names(store.List()), (std::vector<std::string>{"ns/a", "ns/b", "ns/d"}));
  EXPECT_EQ(Names(*store.ByIndex(kNamespaceIndex, "ns")),
            (std::vector<std::string>{"ns/a", "ns/b", "ns/d"}));
}

// Readers must always see a consistent store: every object an index returns
// carries the indexed label. Run under ThreadSanitizer to check the locking.
TEST(StoreTest, ConcurrentReadersSeeConsistentIndexesWhileWriterChurns) {
  Store store;
  std::atomic<bool> writing{true};
  std::atomic<int> inconsistencies{0};
  std::vector<std::jthread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      while (writing.load()) {
        for (const std::string color : {"red", "blue"}) {
          // Hold the StatusOr: ranging over *temporary would dangle.
          const common::StatusOr<std::vector<ObjectPtr>> colored =
              store.ByIndex(kLabelIndex, "color=" + color);
          for (const ObjectPtr& object : *colored) {
            if ((*object)["metadata"]["labels"]["color"] != color) ++inconsistencies;
          }
        }
        for (const ObjectPtr& object : store.List()) {
          if (!object->contains("metadata")) ++inconsistencies;
        }
        store.Get("ns/o7").reset();
      }
    });
  }
  for (int i = 0; i < 3000; ++i) {
    const std::string name = "o" + std::to_string(i % 50);
    if (i % 7 == 0) {
      store.Delete("ns/" + name);
    } else {
      Put(store, Object("ns", name, std::to_string(i), {{"color", i % 2 == 0 ? "red" : "blue"}}));
    }
  }
  writing.store(false);
  readers.clear();
  EXPECT_EQ(inconsistencies.load(), 0);
}

}  // namespace
}  // namespace nvdra::k8s::cache
