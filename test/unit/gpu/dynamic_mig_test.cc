// DynamicMig (src/gpu/dynamic_mig.h) against the mock NVML's placement rules:
// a MIG device made at a placement of an H100 (MIG mode off until the first
// one), destroyed again (MIG mode off once none is left), an occupied
// placement refused with the instance named, and the sweep keeping exactly
// the instances it is told to keep.

#include "gpu/dynamic_mig.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "mock_node.h"

namespace nvdra::gpu {
namespace {

using ::testing::HasSubstr;

const MigProfileInfo& Profile(const GpuInfo& gpu, const std::string& name) {
  for (const MigProfileInfo& profile : gpu.mig_profiles) {
    if (profile.name.ToString() == name) return profile;
  }
  ADD_FAILURE() << "no profile " << name << " on " << gpu.uuid;
  return gpu.mig_profiles.front();
}

class DynamicMigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    library_ = node_.Open();
    ASSERT_NE(library_, nullptr);
    inventory_ = node_.Discover();
    ASSERT_FALSE(inventory_.gpus.empty());
    ASSERT_FALSE(inventory_.gpus[0].mig_enabled);
  }
  bool MigOn(const GpuInfo& gpu) {
    auto device = library_->DeviceByUuid(gpu.uuid);
    auto mode = device->GetMigMode();
    return mode.ok() && mode->current;
  }

  MockNode node_{"h100-sxm.json"};
  std::unique_ptr<nvml::Library> library_;
  NodeInventory inventory_;
};

TEST_F(DynamicMigTest, CreatesAtThePlacementAndDestroysWithMigModeFollowing) {
  const GpuInfo& gpu = inventory_.gpus[0];
  DynamicMig mig(*library_);
  const MigProfileInfo& small = Profile(gpu, "1g.10gb");
  auto made = mig.Create(gpu, small, {.start = 3, .size = 1});
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_TRUE(MigOn(gpu));
  EXPECT_EQ(made->parent_uuid, gpu.uuid);
  EXPECT_EQ(made->placement, (nvml::GpuInstancePlacement{.start = 3, .size = 1}));
  EXPECT_EQ(made->gi_profile_id, small.gi.id);
  EXPECT_THAT(made->uuid, ::testing::StartsWith("MIG-"));

  auto found = mig.FindAt(gpu, small, {.start = 3, .size = 1});
  ASSERT_TRUE(found.ok());
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->gi_id, made->gi_id);
  EXPECT_FALSE(mig.FindAt(gpu, small, {.start = 4, .size = 1})->has_value());

  // A second device on overlapping slices is refused, naming the holder.
  auto overlap = mig.Create(gpu, Profile(gpu, "2g.20gb"), {.start = 2, .size = 2});
  ASSERT_FALSE(overlap.ok());
  EXPECT_EQ(overlap.status().code(), common::StatusCode::kFailedPrecondition);
  EXPECT_THAT(overlap.status().message(), HasSubstr("held by GPU instance " + std::to_string(made->gi_id)));

  ASSERT_TRUE(mig.Destroy(gpu, made->gi_id).ok());
  EXPECT_FALSE(MigOn(gpu)) << "an H100 without MIG devices goes back to MIG mode off";
  EXPECT_TRUE(mig.Destroy(gpu, made->gi_id).ok()) << "destroying again is not an error";
}

TEST_F(DynamicMigTest, SweepKeepsOnlyTheInstancesItIsToldToKeep) {
  const GpuInfo& gpu = inventory_.gpus[1];
  DynamicMig mig(*library_);
  auto kept = mig.Create(gpu, Profile(gpu, "3g.40gb"), {.start = 0, .size = 4});
  auto gone = mig.Create(gpu, Profile(gpu, "1g.10gb"), {.start = 5, .size = 1});
  ASSERT_TRUE(kept.ok() && gone.ok());
  auto swept = mig.Sweep(inventory_.gpus, {{gpu.uuid, kept->gi_id}});
  ASSERT_TRUE(swept.ok()) << swept.status();
  EXPECT_EQ(*swept, 1);
  EXPECT_TRUE(mig.FindAt(gpu, Profile(gpu, "3g.40gb"), {.start = 0, .size = 4})->has_value());
  EXPECT_FALSE(mig.FindAt(gpu, Profile(gpu, "1g.10gb"), {.start = 5, .size = 1})->has_value());
  EXPECT_TRUE(MigOn(gpu));

  EXPECT_EQ(*mig.Sweep(inventory_.gpus, {}), 1);
  EXPECT_FALSE(MigOn(gpu));
}

}  // namespace
}  // namespace nvdra::gpu
