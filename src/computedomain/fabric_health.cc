#include "computedomain/fabric_health.h"

#include <utility>

#include <fmt/format.h>

namespace nvdra::computedomain {
namespace {

namespace abi = nvml::abi;

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

// "GPU-... (healthSummary Unhealthy, healthMask 0x10: route unhealthy)".
std::string Describe(const std::string& uuid, const nvml::FabricInfo& info, bool registration_failed) {
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

}  // namespace

std::vector<nvml::DeviceFabric> ReadNodeFabric(const nvml::Library& library) {
  std::vector<nvml::DeviceFabric> gpus;
  common::StatusOr<std::uint32_t> count = library.DeviceCount();
  if (!count.ok()) {
    gpus.push_back({.uuid = "", .info = count.status()});
    return gpus;
  }
  for (std::uint32_t index = 0; index < *count; ++index) {
    nvml::DeviceFabric gpu{.uuid = fmt::format("GPU {}", index)};
    common::StatusOr<nvml::Device> device = library.DeviceByIndex(index);
    if (!device.ok()) {
      gpu.info = device.status();
    } else {
      if (common::StatusOr<std::string> uuid = device->Uuid(); uuid.ok()) gpu.uuid = *uuid;
      // Only the versioned call carries the health summary and mask.
      gpu.info = device->GpuFabricInfo(nvml::Device::FabricCall::kPreferVersioned);
    }
    gpus.push_back(std::move(gpu));
  }
  return gpus;
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

std::string FabricHealth::Message() const {
  if (unhealthy.empty()) return "";
  return fmt::format("NVLink fabric unhealthy: {}", fmt::join(unhealthy, "; "));
}

FabricHealth JudgeFabricHealth(const std::vector<nvml::DeviceFabric>& gpus) {
  FabricHealth health;
  for (const nvml::DeviceFabric& gpu : gpus) {
    if (!gpu.info.ok()) {
      if (nvml::IsNotSupported(gpu.info.status())) continue;
      health.unreadable.push_back(
          fmt::format("{}: {}", gpu.uuid.empty() ? "GPUs" : gpu.uuid, gpu.info.status().ToString()));
      continue;
    }
    const nvml::FabricInfo& info = *gpu.info;
    if (info.state == abi::NVML_GPU_FABRIC_STATE_NOT_SUPPORTED) continue;
    const bool registration_failed =
        info.state == abi::NVML_GPU_FABRIC_STATE_COMPLETED && info.status != abi::NVML_SUCCESS;
    const unsigned char summary = info.health_summary.value_or(abi::NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED);
    if (registration_failed || summary == abi::NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY) {
      health.unhealthy.push_back(Describe(gpu.uuid, info, registration_failed));
    } else if (summary == abi::NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY) {
      health.limited.push_back(Describe(gpu.uuid, info, false));
    }
  }
  return health;
}

}  // namespace nvdra::computedomain
