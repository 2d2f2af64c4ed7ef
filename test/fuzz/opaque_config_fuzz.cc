// Opaque device configs (GpuConfig, MigDeviceConfig, VfioDeviceConfig,
// ComputeDomainChannelConfig, ComputeDomainDaemonConfig), as a claim carries
// them: the input is JSON, tried both as one config's `parameters` and as a
// claim's `devices` (spec.devices or status.allocation.devices).

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/device_configs.h"
#include "api/fabric_topology.h"
#include "api/opaque_config.h"
#include "fuzz_support.h"

namespace {

using nvdra::api::ConfigKind;

void FuzzParameters(const nlohmann::json& parameters) {
  auto config = nvdra::api::DecodeOpaqueConfig(parameters, "parameters");
  if (!config.ok()) return;
  for (const auto& gates : nvdra::fuzz::GateSettings()) {
    if (!nvdra::api::ValidateConfig(*config, "parameters", gates).ok()) continue;
    (void)nvdra::api::VfioSettingsOf(*config);
    (void)nvdra::api::FabricTopologyOf(config->object, "parameters");
    const auto sharing = nvdra::api::SharingOf(*config);
    if (sharing && std::holds_alternative<nvdra::api::MpsSharing>(*sharing)) {
      (void)nvdra::api::MpsPinnedMemoryLimits(std::get<nvdra::api::MpsSharing>(*sharing),
                                              {"GPU-0", "GPU-1"}, "parameters");
    }
  }
}

void FuzzDevices(const nlohmann::json& devices) {
  for (const auto& gates : nvdra::fuzz::GateSettings()) {
    (void)nvdra::api::ValidateDeviceConfigs(devices, "spec.devices", gates);
    (void)nvdra::api::ValidateDeviceConfigs(devices, "spec.devices", gates, nvdra::api::kGpuDriverName);
  }
  (void)nvdra::api::DeviceConfigWarnings(devices, "spec.devices");
  const auto kind_of_device = [](const std::string& device) -> nvdra::common::StatusOr<ConfigKind> {
    if (device.find("mig") != std::string::npos) return ConfigKind::kMigDeviceConfig;
    if (device.find("vfio") != std::string::npos) return ConfigKind::kVfioDeviceConfig;
    if (device.find("channel") != std::string::npos) return ConfigKind::kComputeDomainChannelConfig;
    if (device.find("gpu") != std::string::npos) return ConfigKind::kGpuConfig;
    return nvdra::common::NotFoundError("unknown device " + device);
  };
  (void)nvdra::api::ResolveDeviceConfigs(devices, nvdra::api::kGpuDriverName,
                                         {ConfigKind::kGpuConfig, ConfigKind::kMigDeviceConfig}, kind_of_device);
  (void)nvdra::api::ResolveDeviceConfigs(devices, nvdra::api::kComputeDomainDriverName,
                                         {ConfigKind::kComputeDomainChannelConfig}, kind_of_device);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto json = nlohmann::json::parse(nvdra::fuzz::Text(data, size), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  FuzzParameters(json);
  FuzzDevices(json);
  return 0;
}
