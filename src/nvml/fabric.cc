#include "nvml/fabric.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace nvdra::nvml {
namespace {

bool IsZero(const std::array<unsigned char, abi::kGpuFabricUuidLength>& uuid) {
  return std::all_of(uuid.begin(), uuid.end(), [](unsigned char b) { return b == 0; });
}

std::string_view StateName(unsigned char state) {
  switch (state) {
    case abi::NVML_GPU_FABRIC_STATE_NOT_SUPPORTED: return "NOT_SUPPORTED";
    case abi::NVML_GPU_FABRIC_STATE_NOT_STARTED: return "NOT_STARTED";
    case abi::NVML_GPU_FABRIC_STATE_IN_PROGRESS: return "IN_PROGRESS";
    case abi::NVML_GPU_FABRIC_STATE_COMPLETED: return "COMPLETED";
    default: return "UNKNOWN";
  }
}

// The clique this GPU belongs to, "" for none, or why that cannot be told.
StatusOr<std::string> DeviceClique(const DeviceFabric& device, const CliqueOptions& options) {
  if (!device.info.ok()) {
    if (IsNotSupported(device.info.status())) return std::string();
    return device.info.status().WithContext("GPU " + device.uuid + ": reading fabric info");
  }
  const FabricInfo& info = *device.info;
  std::string clique = fmt::format("{}.{}", FormatClusterUuid(info.cluster_uuid), info.clique_id);
  if (!options.strict) {
    bool attached = info.state == abi::NVML_GPU_FABRIC_STATE_COMPLETED &&
                    info.status == abi::NVML_SUCCESS && !IsZero(info.cluster_uuid);
    return attached ? clique : std::string();
  }
  if (info.state == abi::NVML_GPU_FABRIC_STATE_NOT_SUPPORTED) return std::string();
  if (info.state != abi::NVML_GPU_FABRIC_STATE_COMPLETED) {
    if (options.ignore_incomplete_registration) return std::string();
    return common::FailedPreconditionError(fmt::format(
        "GPU {}: NVLink fabric registration not complete (state {}); refusing to start with "
        "CrashOnNVLinkFabricErrors on: check nvidia-fabricmanager and the NVLink switches, or "
        "turn the gate off to run without a clique",
        device.uuid, StateName(info.state)));
  }
  if (info.status != abi::NVML_SUCCESS) {
    return common::FailedPreconditionError(fmt::format(
        "GPU {}: NVLink fabric registration failed (fabric status {}); refusing to start with "
        "CrashOnNVLinkFabricErrors on",
        device.uuid, info.status));
  }
  if (IsZero(info.cluster_uuid)) return std::string();  // NVLink, but not multi-node
  return clique;
}

}  // namespace

std::string FormatClusterUuid(const std::array<unsigned char, abi::kGpuFabricUuidLength>& uuid) {
  std::string out;
  out.reserve(36);
  for (std::size_t i = 0; i < uuid.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    out += fmt::format("{:02x}", uuid[i]);
  }
  return out;
}

StatusOr<std::string> DeriveCliqueId(const std::vector<DeviceFabric>& devices,
                                     const CliqueOptions& options) {
  std::string clique;
  std::string first_uuid;
  for (const DeviceFabric& device : devices) {
    ASSIGN_OR_RETURN(std::string this_clique, DeviceClique(device, options));
    if (this_clique.empty()) continue;
    if (clique.empty()) {
      clique = std::move(this_clique);
      first_uuid = device.uuid;
    } else if (this_clique != clique) {
      return common::FailedPreconditionError(fmt::format(
          "GPUs of this node are in different NVLink cliques: {} reports {}, {} reports {}; "
          "a node must be in one clique",
          first_uuid, clique, device.uuid, this_clique));
    }
  }
  return clique;
}

StatusOr<std::string> NodeCliqueId(const Library& library, const CliqueOptions& options) {
  ASSIGN_OR_RETURN(std::uint32_t count, library.DeviceCount());
  std::vector<DeviceFabric> devices;
  devices.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(Device device, library.DeviceByIndex(i));
    DeviceFabric fabric;
    fabric.uuid = device.Uuid().value_or(fmt::format("index {}", i));
    fabric.info = device.GpuFabricInfo();
    devices.push_back(std::move(fabric));
  }
  return DeriveCliqueId(devices, options);
}

}  // namespace nvdra::nvml
