// ResourceSlicePublisher (src/kubeletplugin/resource_slice_publisher.h)
// against a real API server: what a publish writes (pool, generation, count,
// owner reference to a real Node), that unchanged state writes nothing (also
// across a restart of the publisher), generation bumps, splitting at 128
// devices, re-creation of a slice deleted by someone else, and removal of
// pools. Each test uses its own driver name, so tests see only their slices.
// Writes are counted twice: by the publisher's stats and by comparing the
// slices' names and resourceVersions before and after.

#include "kubeletplugin/resource_slice_publisher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "k8s/api_error.h"
#include "k8s/client.h"
#include "cluster_client.h"
#include "test_cluster.h"

namespace nvdra::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using k8s::resources::kResourceSlices;
using kubeletplugin::DesiredPool;
using kubeletplugin::DesiredSlice;
using kubeletplugin::DriverResources;
using kubeletplugin::PublisherOptions;
using kubeletplugin::ResourceSlicePublisher;

constexpr char kNode[] = "slice-node-a";
constexpr auto kSyncTimeout = 60s;

json Devices(int count, const std::string& prefix = "gpu-") {
  json devices = json::array();
  for (int i = 0; i < count; ++i) {
    devices.push_back({{"name", prefix + std::to_string(i)},
                       {"attributes", {{"index", {{"int", i}}}, {"uuid", {{"string", "GPU-" + std::to_string(i)}}}}},
                       {"capacity", {{"memory", {{"value", "80Gi"}}}}}});
  }
  return devices;
}

DriverResources OnePool(const std::string& pool, json devices) {
  DriverResources resources;
  DesiredSlice slice;
  slice.devices = std::move(devices);
  resources.pools[pool].slices.push_back(std::move(slice));
  return resources;
}

class ResourceSlicePublisherTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterClient started;
    ASSERT_EQ(StartClusterClient(started, ""), "");
    cluster_ = started.cluster.release();
    client_ = started.client.release();
    auto node = client_->Create(k8s::resources::kNodes, "",
                                {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", kNode}}}});
    ASSERT_TRUE(node.ok()) << node.status();
    node_uid_ = new std::string((*node)["metadata"]["uid"].get<std::string>());
  }
  static void TearDownTestSuite() {
    delete node_uid_;
    delete client_;
    delete cluster_;
  }

  // A driver name of this test's own, short enough that the generated name
  // prefix is not truncated by the server (58 characters).
  static std::string Driver() {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    return name.substr(0, 20) + ".example.com";
  }

  static std::unique_ptr<ResourceSlicePublisher> StartPublisher(bool give_uid = true) {
    PublisherOptions options;
    options.driver_name = Driver();
    options.node_name = kNode;
    if (give_uid) options.node_uid = *node_uid_;
    options.event_delay = 100ms;
    auto publisher = ResourceSlicePublisher::Start(*client_, options);
    EXPECT_TRUE(publisher.ok()) << publisher.status();
    return publisher.ok() ? std::move(*publisher) : nullptr;
  }

  // This test's slices, sorted by name.
  static std::vector<json> Slices() {
    k8s::ListOptions options;
    options.field_selector = "spec.driver=" + Driver();
    auto list = client_->ListAll(kResourceSlices, "", options);
    EXPECT_TRUE(list.ok()) << list.status();
    std::vector<json> out;
    if (!list.ok()) return out;
    for (const auto& item : (*list)["items"]) out.push_back(item);
    std::sort(out.begin(), out.end(), [](const json& a, const json& b) {
      return a["metadata"]["name"].get<std::string>() < b["metadata"]["name"].get<std::string>();
    });
    return out;
  }

  // name -> resourceVersion: equal snapshots mean no write happened.
  static std::map<std::string, std::string> Versions() {
    std::map<std::string, std::string> out;
    for (const auto& slice : Slices()) {
      out[slice["metadata"]["name"].get<std::string>()] = slice["metadata"]["resourceVersion"].get<std::string>();
    }
    return out;
  }

  static std::vector<std::string> DeviceNames(const json& slice) {
    std::vector<std::string> out;
    for (const auto& device : slice["spec"].value("devices", json::array())) out.push_back(device["name"]);
    return out;
  }

  static TestCluster* cluster_;
  static k8s::Client* client_;
  static std::string* node_uid_;
};

TestCluster* ResourceSlicePublisherTest::cluster_ = nullptr;
k8s::Client* ResourceSlicePublisherTest::client_ = nullptr;
std::string* ResourceSlicePublisherTest::node_uid_ = nullptr;

TEST_F(ResourceSlicePublisherTest, PublishCreatesSliceWithPoolGenerationCountAndNodeOwner) {
  // No UID given: the publisher reads the Node.
  auto publisher = StartPublisher(/*give_uid=*/false);
  ASSERT_NE(publisher, nullptr);
  publisher->Update(OnePool("pool-a", Devices(4)));
  ASSERT_TRUE(publisher->WaitForSync(kSyncTimeout).ok());

  auto slices = Slices();
  ASSERT_EQ(slices.size(), 1u);
  const json& slice = slices[0];
  EXPECT_EQ(slice["metadata"]["name"].get<std::string>().rfind("00000-" + Driver() + "-" + kNode + "-", 0), 0u)
      << slice["metadata"]["name"];
  EXPECT_EQ(slice["spec"]["driver"], Driver());
  EXPECT_EQ(slice["spec"]["nodeName"], kNode);
  EXPECT_EQ(slice["spec"]["pool"], json({{"name", "pool-a"}, {"generation", 1}, {"resourceSliceCount", 1}}));
  EXPECT_EQ(DeviceNames(slice), (std::vector<std::string>{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}));
  EXPECT_EQ(slice["spec"]["devices"][2]["attributes"]["index"]["int"], 2);
  ASSERT_EQ(slice["metadata"]["ownerReferences"].size(), 1u);
  EXPECT_EQ(slice["metadata"]["ownerReferences"][0],
            json({{"apiVersion", "v1"}, {"kind", "Node"}, {"name", kNode}, {"uid", *node_uid_}, {"controller", true}}));
  EXPECT_EQ(publisher->stats().creates, 1u);
}

TEST_F(ResourceSlicePublisherTest, IdenticalUpdateMakesNoWrites) {
  auto publisher = StartPublisher();
  ASSERT_NE(publisher, nullptr);
  publisher->Update(OnePool("pool-a", Devices(4)));
  ASSERT_TRUE(publisher->WaitForSync(kSyncTimeout).ok());
  const auto before = Versions();
  const auto stats = publisher->stats();

  // A fresh copy of the same state, with empty lists the server leaves out.
  json devices = Devices(4);
  devices[0]["taints"] = json::array();
  publisher->Update(OnePool("pool-a", devices));
  ASSERT_TRUE(publisher->WaitForSync(kSyncTimeout).ok());

  EXPECT_EQ(Versions(), before);
  EXPECT_EQ(publisher->stats().creates, stats.creates);
  EXPECT_EQ(publisher->stats().updates, stats.updates);
  EXPECT_EQ(publisher->stats().deletes, stats.deletes);
}

TEST_F(ResourceSlicePublisherTest, ChangedDevicesBumpGeneration) {
  auto publisher = StartPublisher();
  ASSERT_NE(publisher, nullptr);
  publisher->Update(OnePool("pool-a", Devices(4)));
  ASSERT_TRUE(publisher->WaitForSync(kSyncTimeout).ok());
  const auto before = Slices();
  ASSERT_EQ(before.size(), 1u);

  publisher->Update(OnePool("pool-a", Devices(5)));
  ASSERT_TRUE(publisher->WaitForSync(kSyncTimeout).ok());
  const auto after = Slices();
  ASSERT_EQ(after.size(), 1u);
  // Updated in place, one generation on.
  EXPECT_EQ(after[0]["metadata"]["name"], before[0]["metadata"]["name"]);
  EXPECT_EQ(after[0]["spec"]["pool"]["generation"], 2);
  EXPECT_EQ(after[0]["spec"]["pool"]["resourceSliceCount"], 1);
  EXPECT_EQ(DeviceNames(after[0]).size(), 5u);
  EXPECT_EQ(publisher->stats().updates, 1u);
  EXPECT_EQ(publisher->stats().creates, 1u);
}

TEST_F(ResourceSlicePublisherTest, ThreeHundredDevicesSplitIntoThreeSlices) {
  auto publisher = StartPublisher();
  ASSERT_NE(publisher, nullptr);
  publisher->Update(OnePool("big", Devices(300)));
  ASSERT_TRUE(publisher->WaitForSync(kSyncTimeout).ok());

  auto slices = Slices();
  ASSERT_EQ(slices.size(), 3u);
  std::vector<std::string> all;
  for (std::size_t i = 0; i < slices.size(); ++i) {
    EXPECT_EQ(slices[i]["metadata"]["name"].get<std::string>().substr(0, 6), "0000" + std::to_string(i) + "-");
    EXPECT_EQ(slices[i]["spec"]["pool"], json({{"name", "big"}, {"generation", 1}, {"resourceSliceCount", 3}}));
    auto names = DeviceNames(slices[i]);
    all.insert(all.end(), names.begin(), names.end());
  }
  EXPECT_EQ(DeviceNames(slices[0]).size(), 128u);
  EXPECT_EQ(DeviceNames(slices[1]).size(), 128u);
  EXPECT_EQ(DeviceNames(slices[2]).size(), 44u);
  // Order kept across the split.
  ASSERT_EQ(all.size(), 300u);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(all[static_cast<std::size_t>(i)], "gpu-" + std::to_string(i));
  EXPECT_EQ(publisher->stats().creates, 3u);
}

TEST_F(ResourceSlicePublisherTest, ExternallyDeletedSliceIsRecreated) {
  auto publisher = StartPublisher();
  ASSERT_NE(publisher, nullptr);
  publisher->Update(OnePool("big", Devices(300)));
  ASSERT_TRUE(publisher->WaitForSync(kSyncTimeout).ok());
  auto before = Slices();
  ASSERT_EQ(before.size(), 3u);
  const std::string victim = before[1]["metadata"]["name"];

  // Watch from the list's version, delete, and await the re-creation.
  k8s::WatchOptions watch_options;
  watch_options.field_selector = "spec.driver=" + Driver();
  long long newest = 0;
  for (const auto& slice : before) {
    newest = std::max(newest, std::stoll(slice["metadata"]["resourceVersion"].get<std::string>()));
  }
  watch_options.resource_version = std::to_string(newest);
  auto watch = client_->Watch(kResourceSlices, "", watch_options);
  ASSERT_TRUE(watch.ok()) << watch.status();
  auto deleted = client_->Delete(kResourceSlices, "", victim);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  json recreated;
  const auto deadline = std::chrono::steady_clock::now() + kSyncTimeout;
  while (recreated.is_null() && std::chrono::steady_clock::now() < deadline) {
    auto event = (*watch)->Next();
    ASSERT_TRUE(event.ok()) << event.status();
    ASSERT_TRUE(event->has_value()) << "watch ended";
    if ((*event)->type == k8s::WatchEventType::kAdded) recreated = (*event)->object;
  }
  ASSERT_FALSE(recreated.is_null());
  ASSERT_TRUE(publisher->WaitForSync(kSyncTimeout).ok());

  // The same index and devices, the same generation; the others untouched.
  EXPECT_EQ(recreated["metadata"]["name"].get<std::string>().substr(0, 6), "00001-");
  EXPECT_NE(recreated["metadata"]["name"], victim);
  EXPECT_EQ(recreated["spec"]["pool"], before[1]["spec"]["pool"]);
  EXPECT_EQ(DeviceNames(recreated), DeviceNames(before[1]));
  auto after = Slices();
  ASSERT_EQ(after.size(), 3u);
  EXPECT_EQ(after[0], before[0]);
  EXPECT_EQ(after[2], before[2]);
  EXPECT_EQ(publisher->stats().creates, 4u);
  EXPECT_EQ(publisher->stats().updates, 0u);
}

TEST_F(ResourceSlicePublisherTest, ExternallyModifiedSliceIsRestoredInANewGeneration) {
  auto publisher = StartPublisher();
  ASSERT_NE(publisher, nullptr);
  publisher->Update(OnePool("pool-a", Devices(3)));
  ASSERT_TRUE(publisher->WaitForSync(kSyncTimeout).ok());
  auto before = Slices();
  ASSERT_EQ(before.size(), 1u);

  k8s::WatchOptions watch_options;
  watch_options.field_selector = "spec.driver=" + Driver();
  watch_options.resource_version = before[0]["metadata"]["resourceVersion"];
  auto watch = client_->Watch(kResourceSlices, "", watch_options);
  ASSERT_TRUE(watch.ok()) << watch.status();
  json tampered = before[0];
  tampered["spec"]["devices"].erase(1);
  auto updated = client_->Update(kResourceSlices, "", tampered);
  ASSERT_TRUE(updated.ok()) << updated.status();
  // Await the publisher's answer: a MODIFIED event after ours.
  json restored;
  const auto deadline = std::chrono::steady_clock::now() + kSyncTimeout;
  while (restored.is_null() && std::chrono::steady_clock::now() < deadline) {
    auto event = (*watch)->Next();
    ASSERT_TRUE(event.ok()) << event.status();
    ASSERT_TRUE(event->has_value()) << "watch ended";
    if ((*event)->type == k8s::WatchEventType::kModified &&
        (*event)->object["metadata"]["resourceVersion"] != (*updated)["metadata"]["resourceVersion"]) {
      restored = (*event)->object;
    }
  }
  ASSERT_FALSE(restored.is_null());
  ASSERT_TRUE(publisher->WaitForSync(kSyncTimeout).ok());
  EXPECT_EQ(DeviceNames(restored), (std::vector<std::string>{"gpu-0", "gpu-1", "gpu-2"}));
  EXPECT_EQ(restored["spec"]["pool"]["generation"], 2);
  EXPECT_EQ(publisher->stats().updates, 1u);
}

TEST_F(ResourceSlicePublisherTest, RemovingPoolDeletesItsSlices) {
  auto publisher = StartPublisher();
  ASSERT_NE(publisher, nullptr);
  DriverResources both = OnePool("keep", Devices(2));
  both.pools["drop"].slices.push_back(DesiredSlice{Devices(200, "x-"), json::array()});
  publisher->Update(both);
  ASSERT_TRUE(publisher->WaitForSync(kSyncTimeout).ok());
  ASSERT_EQ(Slices().size(), 3u);
  const auto kept_before = Versions();

  publisher->Update(OnePool("keep", Devices(2)));
  ASSERT_TRUE(publisher->WaitForSync(kSyncTimeout).ok());
  auto slices = Slices();
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0]["spec"]["pool"]["name"], "keep");
  EXPECT_EQ(kept_before.at(slices[0]["metadata"]["name"]),
            slices[0]["metadata"]["resourceVersion"].get<std::string>());
  EXPECT_EQ(publisher->stats().deletes, 2u);

  ASSERT_TRUE(publisher->DeleteAll(kSyncTimeout).ok());
  EXPECT_TRUE(Slices().empty());
}

TEST_F(ResourceSlicePublisherTest, ShrinkingPoolDeletesSurplusSlicesAndBumpsGeneration) {
  auto publisher = StartPublisher();
  ASSERT_NE(publisher, nullptr);
  publisher->Update(OnePool("big", Devices(300)));
  ASSERT_TRUE(publisher->WaitForSync(kSyncTimeout).ok());
  publisher->Update(OnePool("big", Devices(130)));
  ASSERT_TRUE(publisher->WaitForSync(kSyncTimeout).ok());
  auto slices = Slices();
  ASSERT_EQ(slices.size(), 2u);
  for (const auto& slice : slices) {
    EXPECT_EQ(slice["spec"]["pool"], json({{"name", "big"}, {"generation", 2}, {"resourceSliceCount", 2}}));
  }
  EXPECT_EQ(DeviceNames(slices[1]).size(), 2u);
  EXPECT_EQ(publisher->stats().deletes, 1u);
}

TEST_F(ResourceSlicePublisherTest, RestartWithSameStateMakesNoWritesAndRemovesStalePools) {
  DriverResources desired = OnePool("big", Devices(300));
  desired.pools["small"].slices.push_back(DesiredSlice{Devices(1, "s-"), json::array()});
  {
    auto first = StartPublisher();
    ASSERT_NE(first, nullptr);
    DriverResources with_stale = desired;
    with_stale.pools["stale"].slices.push_back(DesiredSlice{Devices(1, "old-"), json::array()});
    first->Update(with_stale);
    ASSERT_TRUE(first->WaitForSync(kSyncTimeout).ok());
    ASSERT_EQ(Slices().size(), 5u);
  }  // destroyed: slices stay
  auto before = Versions();
  ASSERT_EQ(before.size(), 5u);

  auto second = StartPublisher();
  ASSERT_NE(second, nullptr);
  second->Update(desired);
  ASSERT_TRUE(second->WaitForSync(kSyncTimeout).ok());
  // Adopted: only the pool the new run no longer has is gone.
  EXPECT_EQ(second->stats().creates, 0u);
  EXPECT_EQ(second->stats().updates, 0u);
  EXPECT_EQ(second->stats().deletes, 1u);
  auto after = Versions();
  EXPECT_EQ(after.size(), 4u);
  for (const auto& [name, version] : after) EXPECT_EQ(before.at(name), version) << name;
}

TEST_F(ResourceSlicePublisherTest, InvalidPoolIsReportedAndNotPublished) {
  auto publisher = StartPublisher();
  ASSERT_NE(publisher, nullptr);
  json devices = Devices(2);
  devices[1]["name"] = "gpu-0";
  publisher->Update(OnePool("dup", devices));
  auto status = publisher->WaitForSync(kSyncTimeout);
  EXPECT_EQ(status.code(), common::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(Slices().empty());
}

TEST_F(ResourceSlicePublisherTest, WaitForSyncBeforeUpdateTimesOut) {
  auto publisher = StartPublisher();
  ASSERT_NE(publisher, nullptr);
  EXPECT_EQ(publisher->WaitForSync(200ms).code(), common::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace nvdra::testing
