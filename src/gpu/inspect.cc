#include "gpu/inspect.h"

#include <string>
#include <utility>

#include "gpu/mig_profile.h"

namespace nvdra::gpu {
namespace {

nlohmann::json ProfileToJson(const nvml::GpuInstanceProfile& gi) {
  nlohmann::json out = {
      {"id", gi.id}, {"nvmlName", gi.name}, {"sliceCount", gi.slice_count}, {"instanceCount", gi.instance_count}};
  for (const MigProfileCount& count : kMigProfileCounts) out[std::string(count.name)] = gi.*count.field;
  out["memoryMiB"] = gi.memory_size_mb;
  return out;
}

}  // namespace

nlohmann::json GpuInfoToJson(const GpuInfo& gpu) {
  nlohmann::json out = {{"index", gpu.index},
                        {"minor", gpu.minor},
                        {"uuid", gpu.uuid},
                        {"productName", gpu.product_name},
                        {"brand", gpu.brand},
                        {"architecture", gpu.architecture},
                        {"cudaComputeCapability", gpu.cuda_compute_capability},
                        {"pciBusID", gpu.pci.bus_id},
                        {"pciDeviceID", gpu.pci.device_id},
                        {"pciVendorID", gpu.pci.vendor_id}};
  out["memoryBytes"] = gpu.memory_bytes ? nlohmann::json(*gpu.memory_bytes) : nlohmann::json();
  out["pcieRoot"] = gpu.pcie_root ? nlohmann::json(*gpu.pcie_root) : nlohmann::json();
  out["numaNode"] = gpu.numa_node ? nlohmann::json(*gpu.numa_node) : nlohmann::json();
  out["addressingMode"] =
      gpu.addressing_mode ? nlohmann::json(*gpu.addressing_mode) : nlohmann::json();
  out["moduleID"] = gpu.module_id ? nlohmann::json(*gpu.module_id) : nlohmann::json();
  nlohmann::json profiles = nlohmann::json::array();
  for (const auto& profile : gpu.mig_profiles) {
    nlohmann::json p = ProfileToJson(profile.gi);
    p["profile"] = profile.name.ToString();
    p["computeProfileIndex"] = profile.ci_profile_index;
    nlohmann::json placements = nlohmann::json::array();
    for (const auto& placement : profile.placements) {
      placements.push_back({{"start", placement.start}, {"size", placement.size}});
    }
    p["placements"] = std::move(placements);
    profiles.push_back(std::move(p));
  }
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& mig : gpu.mig_devices) {
    devices.push_back({{"uuid", mig.uuid},
                       {"profile", mig.profile},
                       {"profileID", mig.gi.id},
                       {"gpuInstanceID", mig.gi_id},
                       {"computeInstanceID", mig.ci_id},
                       {"placement", {{"start", mig.placement.start}, {"size", mig.placement.size}}}});
  }
  out["mig"] = {{"capable", gpu.mig_capable},
                {"enabled", gpu.mig_enabled},
                {"pending", gpu.mig_pending},
                {"memorySlices", gpu.MemorySliceCount()},
                {"profiles", std::move(profiles)},
                {"devices", std::move(devices)}};
  return out;
}

common::StatusOr<nlohmann::json> InspectNode(const InspectOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<nvml::Library> library,
                   nvml::Library::Open({options.driver_root, options.nvml_library}));
  ASSIGN_OR_RETURN(NodeInventory inventory, DiscoverDevices(*library, options.discovery));
  ASSIGN_OR_RETURN(PublishedResources published,
                   BuildPublishedResources(inventory, options.publish));

  nlohmann::json out;
  out["nvml"] = {{"library", library->path().string()},
                 {"driverVersion", inventory.driver_version},
                 {"cudaDriverVersion", inventory.cuda_driver_version_raw},
                 {"missingFunctions", inventory.missing_functions}};
  if (auto version = library->NvmlVersion(); version.ok()) out["nvml"]["nvmlVersion"] = *version;
  common::StatusOr<std::string> clique = nvml::NodeCliqueId(*library, options.clique);
  if (clique.ok()) {
    out["cliqueId"] = *clique;
  } else {
    out["cliqueError"] = clique.status().ToString();
  }
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& gpu : inventory.gpus) gpus.push_back(GpuInfoToJson(gpu));
  out["gpus"] = std::move(gpus);
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& device : published.devices) devices.push_back(DeviceToJson(device));
  nlohmann::json counters = nlohmann::json::array();
  for (const auto& set : published.counter_sets) counters.push_back(CounterSetToJson(set));
  out["resourceSlice"] = {{"driver", "gpu.nvidia.com"}, {"devices", std::move(devices)}};
  if (!counters.empty()) out["resourceSlice"]["sharedCounters"] = std::move(counters);
  return out;
}

}  // namespace nvdra::gpu
