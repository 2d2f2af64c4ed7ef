// The NVLink fabric verdict behind the daemon's readiness (fabric_health.h):
// which GPU answers make the entry NotReady, which only warn, which are no
// verdict at all; the message names GPU, health summary and mask.

#include "computedomain/fabric_health.h"

#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace nvdra::computedomain {
namespace {

namespace abi = nvml::abi;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr unsigned char kHealthy = abi::NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY;
constexpr unsigned char kUnhealthy = abi::NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY;
constexpr unsigned char kLimited = abi::NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY;

// A GB200 GPU's answer: registered (COMPLETED, SUCCESS), v3 fields set.
nvml::DeviceFabric Gpu(std::string uuid, std::optional<unsigned char> summary, std::optional<std::uint32_t> mask = 0,
                       unsigned char state = abi::NVML_GPU_FABRIC_STATE_COMPLETED,
                       abi::nvmlReturn_t status = abi::NVML_SUCCESS) {
  nvml::FabricInfo info;
  info.state = state;
  info.status = status;
  info.health_summary = summary;
  info.health_mask = mask;
  return {.uuid = std::move(uuid), .info = info};
}

nvml::DeviceFabric Failing(std::string uuid, common::Status status) {
  return {.uuid = std::move(uuid), .info = status};
}

TEST(JudgeFabricHealthTest, HealthyGpusGiveNoVerdict) {
  const FabricHealth health = JudgeFabricHealth({Gpu("GPU-a", kHealthy), Gpu("GPU-b", kHealthy)});
  EXPECT_TRUE(health.healthy());
  EXPECT_THAT(health.limited, IsEmpty());
  EXPECT_THAT(health.unreadable, IsEmpty());
  EXPECT_EQ(health.Message(), "");
  EXPECT_EQ(health, FabricHealth{});
}

TEST(JudgeFabricHealthTest, AnUnhealthySummaryNamesTheGpuSummaryAndMask) {
  const FabricHealth health = JudgeFabricHealth({Gpu("GPU-a", kHealthy), Gpu("GPU-b", kUnhealthy, 0x10)});
  EXPECT_FALSE(health.healthy());
  EXPECT_THAT(health.unhealthy, ElementsAre("GPU-b (healthSummary Unhealthy, healthMask 0x10: route unhealthy)"));
  EXPECT_EQ(health.Message(),
            "NVLink fabric unhealthy: GPU-b (healthSummary Unhealthy, healthMask 0x10: route unhealthy)");
}

TEST(JudgeFabricHealthTest, ACompletedRegistrationWithAFailedStatusIsUnhealthyWhateverTheSummary) {
  const FabricHealth health = JudgeFabricHealth(
      {Gpu("GPU-a", kHealthy, 0, abi::NVML_GPU_FABRIC_STATE_COMPLETED, abi::NVML_ERROR_UNKNOWN)});
  EXPECT_THAT(health.unhealthy,
              ElementsAre("GPU-a (registration failed, fabric status 999, healthSummary Healthy, healthMask 0x0)"));
}

TEST(JudgeFabricHealthTest, LimitedCapacityOnlyWarns) {
  const FabricHealth health = JudgeFabricHealth({Gpu("GPU-a", kLimited, 0x1)});
  EXPECT_TRUE(health.healthy());
  EXPECT_EQ(health.Message(), "");
  EXPECT_THAT(health.limited,
              ElementsAre("GPU-a (healthSummary LimitedCapacity, healthMask 0x1: degraded bandwidth)"));
}

TEST(JudgeFabricHealthTest, NoFabricOrNoSummaryOrRegistrationUnderWayIsNoVerdict) {
  const FabricHealth health = JudgeFabricHealth({
      Failing("GPU-h100", common::UnimplementedError("nvmlDeviceGetGpuFabricInfo: Not Supported")),
      Gpu("GPU-nofabric", kUnhealthy, 0x10, abi::NVML_GPU_FABRIC_STATE_NOT_SUPPORTED),
      Gpu("GPU-v2", std::nullopt, 0x10),  // an older driver: no healthSummary
      Gpu("GPU-starting", std::nullopt, std::nullopt, abi::NVML_GPU_FABRIC_STATE_IN_PROGRESS, abi::NVML_ERROR_UNKNOWN),
  });
  EXPECT_EQ(health, FabricHealth{});
}

TEST(JudgeFabricHealthTest, AFailingCallIsUnreadableNotUnhealthy) {
  const FabricHealth health = JudgeFabricHealth(
      {Failing("GPU-lost", common::UnavailableError("nvmlDeviceGetGpuFabricInfoV: GPU is lost")),
       Failing("", common::UnavailableError("nvmlDeviceGetCount_v2: Driver Not Loaded"))});
  EXPECT_TRUE(health.healthy());
  ASSERT_EQ(health.unreadable.size(), 2u);
  EXPECT_THAT(health.unreadable[0], ::testing::StartsWith("GPU-lost: "));
  EXPECT_THAT(health.unreadable[1], ::testing::StartsWith("GPUs: "));
}

TEST(JudgeFabricHealthTest, EveryUnhealthyGpuIsListedInNvmlOrder) {
  const FabricHealth health = JudgeFabricHealth({Gpu("GPU-a", kUnhealthy, 0x10), Gpu("GPU-b", kHealthy),
                                                 Gpu("GPU-c", kUnhealthy, std::nullopt)});
  EXPECT_EQ(health.Message(),
            "NVLink fabric unhealthy: GPU-a (healthSummary Unhealthy, healthMask 0x10: route unhealthy); "
            "GPU-c (healthSummary Unhealthy)");
}

TEST(DescribeHealthMaskTest, EachTrueFieldAndTheIncorrectConfiguration) {
  EXPECT_EQ(DescribeHealthMask(0), "");
  // Every two-bit field FALSE (2) and configuration NONE (1): what a healthy GPU says.
  EXPECT_EQ(DescribeHealthMask(0x2 | 0x2 << 2 | 0x2 << 4 | 0x2 << 6 | 0x1 << 8), "");
  EXPECT_EQ(DescribeHealthMask(0x1 | 0x1 << 2 | 0x1 << 4 | 0x1 << 6),
            "route unhealthy, degraded bandwidth, route recovery in progress, access timeout recovery in progress");
  EXPECT_EQ(DescribeHealthMask(0x5 << 8), "incorrect configuration (insufficient NVLinks)");
  EXPECT_EQ(DescribeHealthMask(0x4 << 8 | 0x1 << 4), "route unhealthy, incorrect configuration (no partition)");
}

}  // namespace
}  // namespace nvdra::computedomain
