#include "gpu/mig_profile.h"

#include <gtest/gtest.h>

#include "nvml/nvml_abi.h"

namespace nvdra::gpu {
namespace {

namespace abi = nvml::abi;
// A real H100 80GB HBM3 (test/data/h100/h100-nvml-probe.json).
constexpr std::uint64_t kH100Bytes = 85520809984ULL;
// An A100-SXM4-40GB: 40536 MiB.
constexpr std::uint64_t kA100Bytes = 40536ULL * 1024 * 1024;

TEST(MigProfileName, H100ProfilesMatchNvidiaSmiNames) {
  // nvidia-smi mig -lgip on the real H100: 1g.10gb (9984 MiB), 1g.20gb and
  // 2g.20gb (20096), 3g.40gb and 4g.40gb (40448), 7g.80gb (81152).
  struct Case { std::uint32_t gi; std::uint32_t ci; std::uint64_t mb; const char* want; };
  const Case cases[] = {
      {abi::NVML_GPU_INSTANCE_PROFILE_1_SLICE, 0, 9984, "1g.10gb"},
      {abi::NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 0, 9984, "1g.10gb+me"},
      {abi::NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 0, 20096, "1g.20gb"},
      {abi::NVML_GPU_INSTANCE_PROFILE_2_SLICE, 1, 20096, "2g.20gb"},
      {abi::NVML_GPU_INSTANCE_PROFILE_3_SLICE, 2, 40448, "3g.40gb"},
      {abi::NVML_GPU_INSTANCE_PROFILE_4_SLICE, 3, 40448, "4g.40gb"},
      {abi::NVML_GPU_INSTANCE_PROFILE_7_SLICE, 4, 81152, "7g.80gb"},
      {abi::NVML_GPU_INSTANCE_PROFILE_7_SLICE, 8, 81152, "7g.80gb"},  // 7_SLICE_NVL
  };
  for (const Case& c : cases) {
    auto name = MakeMigProfileName(c.gi, c.ci, c.mb, kH100Bytes);
    ASSERT_TRUE(name.has_value()) << c.want;
    EXPECT_EQ(name->ToString(), c.want);
  }
}

TEST(MigProfileName, A100ProfilesRoundLikeGoNvlib) {
  EXPECT_EQ(MakeMigProfileName(0, 0, 4864, kA100Bytes)->ToString(), "1g.5gb");
  EXPECT_EQ(MakeMigProfileName(1, 1, 9856, kA100Bytes)->ToString(), "2g.10gb");
  EXPECT_EQ(MakeMigProfileName(2, 2, 19968, kA100Bytes)->ToString(), "3g.20gb");
  EXPECT_EQ(MakeMigProfileName(4, 4, 40192, kA100Bytes)->ToString(), "7g.40gb");
}

TEST(MigProfileName, SmallerComputeInstanceAndAttributes) {
  EXPECT_EQ(MakeMigProfileName(1, 0, 20096, kH100Bytes)->ToString(), "1c.2g.20gb");
  EXPECT_EQ(MakeMigProfileName(0xD, 0, 9984, kH100Bytes)->ToString(), "1g.10gb-me");
  EXPECT_EQ(MakeMigProfileName(0xF, 0, 9984, kH100Bytes)->ToString(), "1g.10gb+me.all");
  EXPECT_EQ(MakeMigProfileName(0xA, 0, 9984, kH100Bytes)->ToString(), "1g.10gb+gfx");
}

TEST(MigProfileName, UnknownProfileIndexIsSkippedNotFatal) {
  EXPECT_FALSE(MakeMigProfileName(0x11, 0, 1, kH100Bytes).has_value());
  EXPECT_FALSE(MakeMigProfileName(0, 0x9, 1, kH100Bytes).has_value());
}

TEST(MigDeviceName, UpstreamShape) {
  EXPECT_EQ(MigDeviceName(0, "1g.10gb", 19, 0), "gpu-0-mig-1g10gb-19-0");
  EXPECT_EQ(MigDeviceName(3, "1g.10gb+me", 20, 6), "gpu-3-mig-1g10gb-me-20-6");
  EXPECT_EQ(MigDeviceName(1, "1g.10gb+me.all", 0, 2), "gpu-1-mig-1g10gb-meall-0-2");
  EXPECT_EQ(GpuDeviceName(7), "gpu-7");
}

TEST(MigDeviceName, ParsesBackAndRejectsOtherNames) {
  auto parts = ParseMigDeviceName("gpu-3-mig-1g10gb-me-20-6");
  ASSERT_TRUE(parts.ok()) << parts.status();
  EXPECT_EQ(parts->parent_minor, 3U);
  EXPECT_EQ(parts->profile, "1g10gb-me");
  EXPECT_EQ(parts->gi_profile_id, 20U);
  EXPECT_EQ(parts->placement_start, 6U);
  EXPECT_EQ(ParseMigDeviceName("gpu-0").status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseMigDeviceName("gpu-99999999999-mig-x-1-2").status().code(),
            common::StatusCode::kInvalidArgument);
}

TEST(Rfc1123, CleansLikeUpstream) {
  EXPECT_EQ(ToRfc1123("--Gpu_0+Me.--"), "gpu-0-me");
  EXPECT_EQ(ToRfc1123("abc."), "abc");
  EXPECT_EQ(ToRfc1123("---"), "");
}

}  // namespace
}  // namespace nvdra::gpu
