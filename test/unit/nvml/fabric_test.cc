#include "nvml/fabric.h"

#include <gtest/gtest.h>

namespace nvdra::nvml {
namespace {

constexpr std::array<unsigned char, 16> kCluster = {0x1b, 0x2c, 0x3d, 0x4e, 0x5f, 0x60, 0x47, 0x80,
                                                    0x91, 0xa2, 0xb3, 0xc4, 0xd5, 0xe6, 0xf7, 0x08};
constexpr const char* kClusterText = "1b2c3d4e-5f60-4780-91a2-b3c4d5e6f708";

DeviceFabric Gpu(const std::string& uuid, unsigned char state, std::uint32_t clique = 7,
                 abi::nvmlReturn_t status = abi::NVML_SUCCESS,
                 std::array<unsigned char, 16> cluster = kCluster) {
  FabricInfo info;
  info.cluster_uuid = cluster;
  info.status = status;
  info.clique_id = clique;
  info.state = state;
  return DeviceFabric{uuid, info};
}

DeviceFabric Failing(const std::string& uuid, Status status) { return DeviceFabric{uuid, status}; }

constexpr unsigned char kCompleted = abi::NVML_GPU_FABRIC_STATE_COMPLETED;
constexpr unsigned char kInProgress = abi::NVML_GPU_FABRIC_STATE_IN_PROGRESS;
constexpr unsigned char kNotSupported = abi::NVML_GPU_FABRIC_STATE_NOT_SUPPORTED;
const CliqueOptions kLegacy{};
const CliqueOptions kStrict{.strict = true};

TEST(CliqueId, AttachedTrayGivesClusterDotClique) {
  std::vector<DeviceFabric> gpus = {Gpu("a", kCompleted), Gpu("b", kCompleted),
                                    Gpu("c", kCompleted), Gpu("d", kCompleted)};
  for (const auto& options : {kLegacy, kStrict}) {
    auto clique = DeriveCliqueId(gpus, options);
    ASSERT_TRUE(clique.ok()) << clique.status();
    EXPECT_EQ(*clique, std::string(kClusterText) + ".7");
  }
}

TEST(CliqueId, NotSupportedIsNoCliqueInBothModes) {
  std::vector<DeviceFabric> gpus = {
      Failing("a", Status(common::StatusCode::kUnimplemented, "nvmlDeviceGetGpuFabricInfo: Not Supported")),
      Gpu("b", kNotSupported)};
  EXPECT_EQ(DeriveCliqueId(gpus, kLegacy).value(), "");
  EXPECT_EQ(DeriveCliqueId(gpus, kStrict).value(), "");
}

TEST(CliqueId, ZeroClusterUuidIsNoClique) {
  std::vector<DeviceFabric> gpus = {Gpu("a", kCompleted, 0, abi::NVML_SUCCESS, {})};
  EXPECT_EQ(DeriveCliqueId(gpus, kLegacy).value(), "");
  EXPECT_EQ(DeriveCliqueId(gpus, kStrict).value(), "");
}

TEST(CliqueId, InProgressIsNoCliqueInLegacyAndFatalInStrict) {
  std::vector<DeviceFabric> gpus = {Gpu("a", kInProgress)};
  EXPECT_EQ(DeriveCliqueId(gpus, kLegacy).value(), "");
  auto strict = DeriveCliqueId(gpus, kStrict);
  EXPECT_EQ(strict.status().code(), common::StatusCode::kFailedPrecondition);
  EXPECT_NE(strict.status().message().find("IN_PROGRESS"), std::string::npos);
  CliqueOptions partitions{.strict = true, .ignore_incomplete_registration = true};
  EXPECT_EQ(DeriveCliqueId(gpus, partitions).value(), "");
}

TEST(CliqueId, FailedRegistrationIsNoCliqueInLegacyAndFatalInStrict) {
  std::vector<DeviceFabric> gpus = {Gpu("a", kCompleted, 7, abi::NVML_ERROR_UNKNOWN)};
  EXPECT_EQ(DeriveCliqueId(gpus, kLegacy).value(), "");
  EXPECT_EQ(DeriveCliqueId(gpus, kStrict).status().code(), common::StatusCode::kFailedPrecondition);
}

TEST(CliqueId, MixedCliquesOnOneNodeAreAnError) {
  std::vector<DeviceFabric> gpus = {Gpu("a", kCompleted, 7), Gpu("b", kCompleted, 8)};
  for (const auto& options : {kLegacy, kStrict}) {
    auto clique = DeriveCliqueId(gpus, options);
    EXPECT_EQ(clique.status().code(), common::StatusCode::kFailedPrecondition);
    EXPECT_NE(clique.status().message().find("different NVLink cliques"), std::string::npos);
  }
  auto other_cluster = kCluster;
  other_cluster[0] = 0xff;
  gpus = {Gpu("a", kCompleted, 7), Gpu("b", kCompleted, 7, abi::NVML_SUCCESS, other_cluster)};
  EXPECT_FALSE(DeriveCliqueId(gpus, kLegacy).ok());
}

TEST(CliqueId, OneAttachedGpuAmongUnattachedOnesCounts) {
  std::vector<DeviceFabric> gpus = {Gpu("a", kInProgress), Gpu("b", kCompleted)};
  EXPECT_EQ(DeriveCliqueId(gpus, kLegacy).value(), std::string(kClusterText) + ".7");
}

TEST(CliqueId, OtherCallErrorsAreErrors) {
  std::vector<DeviceFabric> gpus = {
      Failing("a", Status(common::StatusCode::kUnavailable, "nvmlDeviceGetGpuFabricInfo: GPU is lost"))};
  EXPECT_EQ(DeriveCliqueId(gpus, kLegacy).status().code(), common::StatusCode::kUnavailable);
  EXPECT_EQ(DeriveCliqueId(gpus, kStrict).status().code(), common::StatusCode::kUnavailable);
}

TEST(CliqueId, ClusterUuidFormatting) {
  EXPECT_EQ(FormatClusterUuid(kCluster), kClusterText);
  EXPECT_EQ(FormatClusterUuid({}), "00000000-0000-0000-0000-000000000000");
}

}  // namespace
}  // namespace nvdra::nvml
