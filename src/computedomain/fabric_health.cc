#include "computedomain/fabric_health.h"

#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "nvml/fabric_health.h"

namespace nvdra::computedomain {

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
    switch (nvml::JudgeFabric(*gpu.info)) {
      case nvml::FabricVerdict::kUnhealthy:
        health.unhealthy.push_back(nvml::DescribeFabric(gpu.uuid, *gpu.info));
        break;
      case nvml::FabricVerdict::kLimitedCapacity:
        health.limited.push_back(nvml::DescribeFabric(gpu.uuid, *gpu.info));
        break;
      case nvml::FabricVerdict::kFine:
        break;
    }
  }
  return health;
}

}  // namespace nvdra::computedomain
