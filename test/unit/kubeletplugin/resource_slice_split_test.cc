// SplitToApiLimits (src/kubeletplugin/resource_slice_publisher.h): the
// resource.k8s.io/v1 per-slice limits of 1.35+ (128 devices, 64 with taints,
// counters or list attributes; at most 8 counter sets; counter sets never
// beside devices). The publisher's behaviour against a real API server is in
// test/cluster/resource_slice_publisher_test.cc.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kubeletplugin/resource_slice_publisher.h"

namespace nvdra::kubeletplugin {
namespace {

using nlohmann::json;

json Plain(int i) { return {{"name", "dev-" + std::to_string(i)}}; }

std::vector<std::size_t> DeviceCounts(const std::vector<json>& slices) {
  std::vector<std::size_t> out;
  for (const auto& slice : slices) out.push_back(slice.value("devices", json::array()).size());
  return out;
}

TEST(SplitToApiLimitsTest, EmptySliceStaysOneEmptySlice) {
  auto slices = SplitToApiLimits(DesiredSlice{});
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0], json::object());
}

TEST(SplitToApiLimitsTest, PlainDevicesSplitAt128KeepingOrder) {
  DesiredSlice slice;
  for (int i = 0; i < 300; ++i) slice.devices.push_back(Plain(i));
  auto slices = SplitToApiLimits(slice);
  EXPECT_EQ(DeviceCounts(slices), (std::vector<std::size_t>{128, 128, 44}));
  EXPECT_EQ(slices[1]["devices"][0]["name"], "dev-128");
  EXPECT_EQ(slices[2]["devices"][43]["name"], "dev-299");
  EXPECT_FALSE(slices[0].contains("sharedCounters"));
}

TEST(SplitToApiLimitsTest, ExactlyOneFullSlice) {
  DesiredSlice slice;
  for (int i = 0; i < 128; ++i) slice.devices.push_back(Plain(i));
  EXPECT_EQ(DeviceCounts(SplitToApiLimits(slice)), (std::vector<std::size_t>{128}));
}

TEST(SplitToApiLimitsTest, TaintedDeviceLowersTheLimitTo64) {
  DesiredSlice slice;
  for (int i = 0; i < 100; ++i) slice.devices.push_back(Plain(i));
  for (int i = 100; i < 110; ++i) {
    json device = Plain(i);
    device["taints"] = json::array({{{"key", "k"}, {"effect", "NoSchedule"}}});
    slice.devices.push_back(device);
  }
  // 100 plain devices cannot take a tainted one (64 would be the limit).
  EXPECT_EQ(DeviceCounts(SplitToApiLimits(slice)), (std::vector<std::size_t>{100, 10}));
}

TEST(SplitToApiLimitsTest, ListAttributeCountsAsAdvanced) {
  DesiredSlice slice;
  for (int i = 0; i < 65; ++i) {
    json device = Plain(i);
    device["attributes"] = {{"ids", {{"ints", {1, 2}}}}};
    slice.devices.push_back(device);
  }
  EXPECT_EQ(DeviceCounts(SplitToApiLimits(slice)), (std::vector<std::size_t>{64, 1}));
}

TEST(SplitToApiLimitsTest, CounterSetsGetSlicesOfTheirOwnFirst) {
  DesiredSlice slice;
  for (int s = 0; s < 10; ++s) {
    slice.shared_counters.push_back({{"name", "set-" + std::to_string(s)},
                                     {"counters", {{"memory", {{"value", "1Gi"}}}}}});
  }
  for (int i = 0; i < 70; ++i) {
    json device = Plain(i);
    device["consumesCounters"] =
        json::array({{{"counterSet", "set-" + std::to_string(i % 10)}, {"counters", {{"memory", {{"value", "1Gi"}}}}}}});
    slice.devices.push_back(device);
  }
  auto slices = SplitToApiLimits(slice);
  ASSERT_EQ(slices.size(), 4u);
  EXPECT_EQ(slices[0]["sharedCounters"].size(), 8u);
  EXPECT_EQ(slices[1]["sharedCounters"].size(), 2u);
  EXPECT_EQ(slices[1]["sharedCounters"][1]["name"], "set-9");
  for (std::size_t i = 0; i < 2; ++i) EXPECT_FALSE(slices[i].contains("devices"));
  EXPECT_EQ(slices[2]["devices"].size(), 64u);
  EXPECT_EQ(slices[3]["devices"].size(), 6u);
  for (std::size_t i = 2; i < 4; ++i) EXPECT_FALSE(slices[i].contains("sharedCounters"));
}

TEST(SplitToApiLimitsTest, CombinedLayoutKeepsCounterSetsWithTheFirstDeviceSlice) {
  DesiredSlice slice;
  slice.counters_with_devices = true;
  slice.shared_counters = json::array({{{"name", "gpu-0-counter-set"}}, {{"name", "gpu-1-counter-set"}}});
  for (int i = 0; i < 3; ++i) slice.devices.push_back(Plain(i));
  auto slices = SplitToApiLimits(slice);
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0]["sharedCounters"].size(), 2u);
  EXPECT_EQ(slices[0]["devices"].size(), 3u);

  // Counter sets alone stay a slice of their own.
  DesiredSlice counters_only;
  counters_only.counters_with_devices = true;
  counters_only.shared_counters = slice.shared_counters;
  auto alone = SplitToApiLimits(counters_only);
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_FALSE(alone[0].contains("devices"));

  // The split layout of 1.35+ (the default) for the same slice.
  slice.counters_with_devices = false;
  auto split = SplitToApiLimits(slice);
  ASSERT_EQ(split.size(), 2u);
  EXPECT_FALSE(split[0].contains("devices"));
  EXPECT_FALSE(split[1].contains("sharedCounters"));
}

}  // namespace
}  // namespace nvdra::kubeletplugin
