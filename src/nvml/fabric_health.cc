#include "nvml/fabric_health.h"

#include <fmt/format.h>

namespace nvdra::nvml {
namespace {


// nvml.h's NVML_GPU_FABRIC_HEALTH_MASK_* fields (shift, width): nvml_abi.h
// declares only what the clique id needs.
constexpr std::uint32_t kTrue = 1;  // the *_TRUE value of the two-bit fields
struct MaskFlag {
  int shift;
  const char* words;
};
constexpr MaskFlag kFlags[] = {{4, "route unhealthy"},
                               {0, "degraded bandwidth"},
                               {2, "route recovery in progress"},
                               {6, "access timeout recovery in progress"}};
constexpr int kIncorrectConfigShift = 8;
constexpr std::uint32_t kIncorrectConfigWidth = 0xf;

const char* IncorrectConfiguration(std::uint32_t value) {
  switch (value) {
    case 2: return "incorrect configuration (system GUID)";
    case 3: return "incorrect configuration (chassis serial number)";
    case 4: return "incorrect configuration (no partition)";
    case 5: return "incorrect configuration (insufficient NVLinks)";
    default: return nullptr;  // 0 not supported, 1 none, later values unknown to us
  }
}

const char* SummaryName(unsigned char summary) {
  switch (summary) {
    case abi::NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY: return "Healthy";
    case abi::NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY: return "Unhealthy";
    case abi::NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY: return "LimitedCapacity";
    default: return "NotSupported";
  }
}

bool RegistrationFailed(const FabricInfo& info) {
  return info.state == abi::NVML_GPU_FABRIC_STATE_COMPLETED && info.status != abi::NVML_SUCCESS;
}

}  // namespace

std::string DescribeFabric(const std::string& uuid, const FabricInfo& info) {
  const bool registration_failed = RegistrationFailed(info);
  std::string details;
  if (registration_failed) details = fmt::format("registration failed, fabric status {}", info.status);
  if (info.health_summary) {
    if (!details.empty()) details += ", ";
    details += fmt::format("healthSummary {}", SummaryName(*info.health_summary));
  }
  if (info.health_mask) {
    if (!details.empty()) details += ", ";
    details += fmt::format("healthMask {:#x}", *info.health_mask);
    if (std::string words = DescribeHealthMask(*info.health_mask); !words.empty()) details += ": " + words;
  }
  return fmt::format("{} ({})", uuid, details);
}

std::string DescribeHealthMask(std::uint32_t mask) {
  std::string out;
  auto add = [&out](const char* words) {
    if (!out.empty()) out += ", ";
    out += words;
  };
  for (const MaskFlag& flag : kFlags) {
    if (((mask >> flag.shift) & 0x3) == kTrue) add(flag.words);
  }
  if (const char* words = IncorrectConfiguration((mask >> kIncorrectConfigShift) & kIncorrectConfigWidth)) add(words);
  return out;
}

FabricVerdict JudgeFabric(const FabricInfo& info) {
  if (info.state == abi::NVML_GPU_FABRIC_STATE_NOT_SUPPORTED) return FabricVerdict::kFine;
  const unsigned char summary = info.health_summary.value_or(abi::NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED);
  if (RegistrationFailed(info) || summary == abi::NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY) {
    return FabricVerdict::kUnhealthy;
  }
  if (summary == abi::NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY) return FabricVerdict::kLimitedCapacity;
  return FabricVerdict::kFine;
}

}  // namespace nvdra::nvml
