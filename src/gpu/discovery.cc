#include "gpu/discovery.h"

#include <algorithm>
#include <fstream>
#include <system_error>
#include <utility>

#include <fmt/format.h>

namespace nvdra::gpu {
namespace {

using common::StatusOr;
namespace fs = std::filesystem;

// A value every GPU must have; the error names the GPU and the call.
template <typename T>
StatusOr<T> Required(StatusOr<T> value, std::uint32_t index, std::string_view what) {
  if (!value.ok()) {
    return std::move(value).status().WithContext(fmt::format("GPU {}: {}", index, what));
  }
  return value;
}

// PCIe root complex of `bus_id` ("pci0000:17"): the first "pci*" folder on the
// path the sysfs device link resolves to.
std::optional<std::string> PcieRoot(const fs::path& sysfs_root, const std::string& bus_id) {
  std::error_code ec;
  fs::path device = fs::canonical(sysfs_root / "bus/pci/devices" / bus_id, ec);
  if (ec) return std::nullopt;
  for (const auto& part : device) {
    std::string name = part.string();
    if (name.rfind("pci", 0) == 0) return name;
  }
  return std::nullopt;
}

std::optional<int> NumaNode(const fs::path& sysfs_root, const std::string& bus_id) {
  std::ifstream in(sysfs_root / "bus/pci/devices" / bus_id / "numa_node");
  int node = -1;
  if (!(in >> node) || node < 0) return std::nullopt;
  return node;
}

std::string_view AddressingModeName(std::uint32_t mode) {
  switch (mode) {
    case nvml::abi::NVML_DEVICE_ADDRESSING_MODE_ATS: return "ATS";
    case nvml::abi::NVML_DEVICE_ADDRESSING_MODE_HMM: return "HMM";
    case nvml::abi::NVML_DEVICE_ADDRESSING_MODE_NONE: return "None";
    default: return "";
  }
}

// Every MIG profile of `device` whose compute instance spans the whole GPU
// instance (the ones upstream publishes), in NVML's profile-index order, then
// compute-profile order.
StatusOr<std::vector<MigProfileInfo>> ReadMigProfiles(const nvml::Device& device,
                                                      std::uint32_t index,
                                                      std::uint64_t memory_bytes) {
  std::vector<MigProfileInfo> profiles;
  for (std::uint32_t p = 0; p < nvml::abi::NVML_GPU_INSTANCE_PROFILE_COUNT; ++p) {
    StatusOr<nvml::GpuInstanceProfile> gi = device.GetGpuInstanceProfile(p);
    if (!gi.ok()) {
      // Not every GPU has every profile; NVML says NOT_SUPPORTED or
      // INVALID_ARGUMENT for the ones it lacks.
      if (nvml::IsNotSupported(gi.status()) ||
          gi.status().code() == common::StatusCode::kInvalidArgument) {
        continue;
      }
      return gi.status().WithContext(fmt::format("GPU {}: MIG profile index {}", index, p));
    }
    StatusOr<std::vector<nvml::GpuInstancePlacement>> placements =
        device.GpuInstancePossiblePlacements(gi->id);
    if (!placements.ok()) {
      if (nvml::IsNotSupported(placements.status()) ||
          placements.status().code() == common::StatusCode::kInvalidArgument) {
        continue;
      }
      return placements.status().WithContext(
          fmt::format("GPU {}: placements of MIG profile id {}", index, gi->id));
    }
    for (std::uint32_t c = 0; c < nvml::abi::NVML_COMPUTE_INSTANCE_PROFILE_COUNT; ++c) {
      std::optional<MigProfileName> name =
          MakeMigProfileName(p, c, gi->memory_size_mb, memory_bytes);
      if (!name || name->compute_slices != name->gpu_slices) continue;
      profiles.push_back(MigProfileInfo{*name, c, *gi, *placements});
    }
  }
  return profiles;
}

// The MIG devices that exist on `device` now.
StatusOr<std::vector<MigDeviceInfo>> ReadMigDevices(const nvml::Device& device,
                                                    const GpuInfo& gpu) {
  std::vector<MigDeviceInfo> devices;
  ASSIGN_OR_RETURN(std::uint32_t max_count,
                   Required(device.MaxMigDeviceCount(), gpu.index, "MIG device count"));
  for (std::uint32_t i = 0; i < max_count; ++i) {
    StatusOr<nvml::Device> mig = device.MigDeviceByIndex(i);
    if (!mig.ok()) {
      if (mig.status().code() == common::StatusCode::kNotFound) continue;  // empty index
      return mig.status().WithContext(fmt::format("GPU {}: MIG device index {}", gpu.index, i));
    }
    std::string context = fmt::format("GPU {}: MIG device index {}", gpu.index, i);
    MigDeviceInfo info;
    ASSIGN_OR_RETURN(info.uuid, Required(mig->Uuid(), gpu.index, context));
    ASSIGN_OR_RETURN(info.gi_id, Required(mig->GpuInstanceId(), gpu.index, context));
    ASSIGN_OR_RETURN(info.ci_id, Required(mig->ComputeInstanceId(), gpu.index, context));
    ASSIGN_OR_RETURN(nvml::GpuInstance gi, Required(device.GpuInstanceById(info.gi_id), gpu.index, context));
    ASSIGN_OR_RETURN(auto gi_info, Required(gi.Info(), gpu.index, context));
    info.placement = {gi_info.placement.start, gi_info.placement.size};
    // The compute instance's profile id, from the instance list of the GI.
    std::optional<std::uint32_t> ci_profile_id;
    std::optional<std::uint32_t> ci_profile_index;
    for (std::uint32_t c = 0; c < nvml::abi::NVML_COMPUTE_INSTANCE_PROFILE_COUNT && !ci_profile_id; ++c) {
      StatusOr<nvml::ComputeInstanceProfile> cip = gi.GetComputeInstanceProfile(c);
      if (!cip.ok()) continue;
      StatusOr<std::vector<nvml::ComputeInstance>> cis = gi.ComputeInstances(cip->id);
      if (!cis.ok()) continue;
      for (const auto& ci : *cis) {
        auto ci_info = ci.Info();
        if (ci_info.ok() && ci_info->id == info.ci_id) {
          ci_profile_id = cip->id;
          ci_profile_index = c;
        }
      }
    }
    if (!ci_profile_id) {
      return common::InternalError(fmt::format(
          "{}: no compute-instance profile lists compute instance {} of GPU instance {}", context,
          info.ci_id, info.gi_id));
    }
    info.ci_profile_id = *ci_profile_id;
    // The GI profile: the one whose id the instance reports.
    const MigProfileInfo* match = nullptr;
    for (const auto& profile : gpu.mig_profiles) {
      if (profile.gi.id == gi_info.profileId) match = &profile;
    }
    if (match == nullptr) {
      return common::InternalError(fmt::format("{}: GPU instance {} has profile id {}, which the "
                                               "GPU does not list",
                                               context, info.gi_id, gi_info.profileId));
    }
    info.gi = match->gi;
    std::optional<MigProfileName> name = MakeMigProfileName(
        match->gi.profile_index, *ci_profile_index, match->gi.memory_size_mb,
        gpu.memory_bytes.value_or(0));
    info.profile = name ? name->ToString() : match->name.ToString();
    devices.push_back(std::move(info));
  }
  return devices;
}

StatusOr<GpuInfo> ReadGpu(const nvml::Device& device, std::uint32_t index,
                          const DiscoveryOptions& options) {
  GpuInfo gpu;
  gpu.index = index;
  ASSIGN_OR_RETURN(gpu.minor, Required(device.MinorNumber(), index, "minor number"));
  ASSIGN_OR_RETURN(gpu.uuid, Required(device.Uuid(), index, "UUID"));
  ASSIGN_OR_RETURN(gpu.product_name, Required(device.Name(), index, "product name"));
  ASSIGN_OR_RETURN(int brand, Required(device.Brand(), index, "brand"));
  ASSIGN_OR_RETURN(gpu.brand, Required(BrandName(brand), index, "brand"));
  ASSIGN_OR_RETURN(std::uint32_t arch, Required(device.Architecture(), index, "architecture"));
  ASSIGN_OR_RETURN(gpu.architecture, Required(ArchitectureName(arch), index, "architecture"));
  ASSIGN_OR_RETURN(nvml::ComputeCapability cc,
                   Required(device.CudaComputeCapability(), index, "CUDA compute capability"));
  gpu.cuda_compute_capability = fmt::format("{}.{}", cc.major, cc.minor);
  ASSIGN_OR_RETURN(gpu.pci, Required(device.Pci(), index, "PCI info"));

  StatusOr<nvml::MemoryInfo> memory = device.Memory();
  if (memory.ok()) {
    gpu.memory_bytes = memory->total_bytes;
  } else if (!nvml::IsNotSupported(memory.status())) {
    return memory.status().WithContext(fmt::format("GPU {}: memory info", index));
  }

  StatusOr<std::uint32_t> mode = device.AddressingMode();
  if (mode.ok()) {
    std::string_view name = AddressingModeName(*mode);
    if (name.empty()) {
      return common::InternalError(
          fmt::format("GPU {}: unknown addressing mode {} from NVML", index, *mode));
    }
    gpu.addressing_mode = std::string(name);
  } else if (!nvml::IsNotSupported(mode.status())) {
    return mode.status().WithContext(fmt::format("GPU {}: addressing mode", index));
  }

  if (StatusOr<std::uint32_t> module = device.ModuleId(); module.ok()) gpu.module_id = *module;

  gpu.pcie_root = PcieRoot(options.sysfs_root, gpu.pci.bus_id);
  gpu.numa_node = NumaNode(options.sysfs_root, gpu.pci.bus_id);

  StatusOr<nvml::MigMode> mig = device.GetMigMode();
  if (mig.ok()) {
    gpu.mig_capable = true;
    gpu.mig_enabled = mig->current;
    gpu.mig_pending = mig->pending;
  } else if (!nvml::IsNotSupported(mig.status())) {
    return mig.status().WithContext(fmt::format("GPU {}: MIG mode", index));
  }

  if (gpu.mig_capable && (options.read_mig_profiles || gpu.mig_enabled)) {
    ASSIGN_OR_RETURN(gpu.mig_profiles, ReadMigProfiles(device, index, gpu.memory_bytes.value_or(0)));
  }
  if (gpu.mig_enabled) {
    ASSIGN_OR_RETURN(gpu.mig_devices, ReadMigDevices(device, gpu));
  }
  return gpu;
}

}  // namespace

std::uint32_t GpuInfo::MemorySliceCount() const {
  std::uint32_t count = 0;
  for (const auto& profile : mig_profiles) {
    for (const auto& placement : profile.placements) count = std::max(count, placement.size);
  }
  return count;
}

StatusOr<std::string> BrandName(int brand) {
  switch (brand) {
    case 0: return std::string("Unknown");
    case 1: return std::string("Quadro");
    case 2: return std::string("Tesla");
    case 3: return std::string("NVS");
    case 4: return std::string("Grid");
    case 5: return std::string("GeForce");
    case 6: return std::string("Titan");
    case 7: return std::string("NvidiaVApps");
    case 8: return std::string("NvidiaVPC");
    case 9: return std::string("NvidiaVCS");
    case 10: return std::string("NvidiaVWS");
    case 11: return std::string("NvidiaCloudGaming");
    case 12: return std::string("QuadroRTX");
    case 13: return std::string("NvidiaRTX");
    case 14: return std::string("Nvidia");
    case 15: return std::string("GeForceRTX");
    case 16: return std::string("TitanRTX");
    default:
      return common::InvalidArgumentError(fmt::format("unknown NVML brand {}", brand));
  }
}

StatusOr<std::string> ArchitectureName(std::uint32_t architecture) {
  namespace abi = nvml::abi;
  switch (architecture) {
    case abi::NVML_DEVICE_ARCH_KEPLER: return std::string("Kepler");
    case abi::NVML_DEVICE_ARCH_MAXWELL: return std::string("Maxwell");
    case abi::NVML_DEVICE_ARCH_PASCAL: return std::string("Pascal");
    case abi::NVML_DEVICE_ARCH_VOLTA: return std::string("Volta");
    case abi::NVML_DEVICE_ARCH_TURING: return std::string("Turing");
    case abi::NVML_DEVICE_ARCH_AMPERE: return std::string("Ampere");
    case abi::NVML_DEVICE_ARCH_ADA: return std::string("Ada Lovelace");
    case abi::NVML_DEVICE_ARCH_HOPPER: return std::string("Hopper");
    case abi::NVML_DEVICE_ARCH_BLACKWELL: return std::string("Blackwell");
    case abi::NVML_DEVICE_ARCH_RUBIN: return std::string("Rubin");
    case abi::NVML_DEVICE_ARCH_UNKNOWN: return std::string("Unknown");
    default:
      return common::InvalidArgumentError(
          fmt::format("unknown NVML architecture {}", architecture));
  }
}

std::string CudaDriverVersionString(int version) {
  return fmt::format("{}.{}", version / 1000, (version % 1000) / 10);
}

StatusOr<NodeInventory> DiscoverDevices(const nvml::Library& library,
                                        const DiscoveryOptions& options) {
  NodeInventory inventory;
  inventory.missing_functions = library.MissingFunctions();
  ASSIGN_OR_RETURN(inventory.driver_version, library.DriverVersion());
  ASSIGN_OR_RETURN(inventory.cuda_driver_version_raw, library.CudaDriverVersion());
  inventory.cuda_driver_version = CudaDriverVersionString(inventory.cuda_driver_version_raw);
  ASSIGN_OR_RETURN(std::uint32_t count, library.DeviceCount());
  for (std::uint32_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(nvml::Device device, Required(library.DeviceByIndex(i), i, "device handle"));
    ASSIGN_OR_RETURN(GpuInfo gpu, ReadGpu(device, i, options));
    inventory.gpus.push_back(std::move(gpu));
  }
  return inventory;
}

}  // namespace nvdra::gpu
