#pragma once

// GPU discovery: what NVML and sysfs say about this node's GPUs, collected once
// into plain values (NodeInventory) that the publisher, the diagnostic and the
// tests read without touching NVML again.
//
// Per GPU: identity, product, versions, PCI placement (bus id, PCIe root and
// NUMA node from sysfs, as Kubernetes' standard attributes want), memory, MIG
// capability and mode, every MIG profile with its possible placements (what a
// dynamic-MIG publisher offers), and the static MIG devices that exist now.
// What upstream treats as "not supported here" (memory info, addressing mode,
// a MIG profile the GPU lacks) is left empty, not an error; a failure of a call
// every GPU must answer (UUID, minor, name, PCI info) is an error naming the
// GPU index and the NVML function.
//
// Thread-safety: DiscoverDevices is as thread-safe as the Library; results are
// values.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/mig_profile.h"
#include "nvml/library.h"

namespace nvdra::gpu {

struct DiscoveryOptions {
  // Where sysfs is mounted; tests point this at a fake tree.
  std::filesystem::path sysfs_root = "/sys";
  // Read MIG profiles and placements (needed for DynamicMIG and diagnostics;
  // costs a few NVML calls per GPU).
  bool read_mig_profiles = true;
};

// One MIG profile of a GPU (the compute instance as large as the GPU
// instance), with where its instances can be placed.
struct MigProfileInfo {
  MigProfileName name;
  std::uint32_t ci_profile_index = 0;
  nvml::GpuInstanceProfile gi;
  std::vector<nvml::GpuInstancePlacement> placements;
};

// A MIG device that exists now (static MIG).
struct MigDeviceInfo {
  std::string uuid;  // "MIG-..."
  std::string profile;  // "1g.10gb"
  nvml::GpuInstanceProfile gi;
  std::uint32_t gi_id = 0;
  std::uint32_t ci_id = 0;
  std::uint32_t ci_profile_id = 0;
  nvml::GpuInstancePlacement placement;
};

struct GpuInfo {
  std::uint32_t index = 0;  // NVML enumeration index
  std::uint32_t minor = 0;  // /dev/nvidia<minor>
  std::string uuid;
  std::string product_name;   // "NVIDIA H100 80GB HBM3"
  std::string brand;          // "Nvidia", "Tesla", ...
  std::string architecture;   // "Hopper", "Ampere", "Blackwell", ...
  std::string cuda_compute_capability;  // "9.0"
  std::optional<std::uint64_t> memory_bytes;  // empty where NVML cannot tell
  nvml::PciInfo pci;          // pci.bus_id "0000:18:00.0"
  std::optional<std::string> pcie_root;  // "pci0000:17", when sysfs resolves it
  std::optional<int> numa_node;          // only when sysfs gives one >= 0
  std::optional<std::string> addressing_mode;  // "HMM", "ATS", "None"; empty when unsupported
  std::optional<std::uint32_t> module_id;
  bool mig_capable = false;
  bool mig_enabled = false;
  bool mig_pending = false;
  std::vector<MigProfileInfo> mig_profiles;
  std::vector<MigDeviceInfo> mig_devices;

  // Most memory slices any placement spans: the GPU's memory slice count.
  [[nodiscard]] std::uint32_t MemorySliceCount() const;
};

struct NodeInventory {
  std::string driver_version;       // as NVML reports it: "580.159.04"
  int cuda_driver_version_raw = 0;  // 13000
  std::string cuda_driver_version;  // "13.0"
  std::vector<GpuInfo> gpus;
  std::vector<std::string> missing_functions;  // of the loaded NVML
};

common::StatusOr<NodeInventory> DiscoverDevices(const nvml::Library& library,
                                                const DiscoveryOptions& options);

// go-nvlib's names for nvmlBrandType_t and NVML_DEVICE_ARCH_* values.
// kInvalidArgument for a value it does not know.
common::StatusOr<std::string> BrandName(int brand);
common::StatusOr<std::string> ArchitectureName(std::uint32_t architecture);

// "13.0" from 13000 (major = v/1000, minor = (v%1000)/10).
std::string CudaDriverVersionString(int version);

}  // namespace nvdra::gpu
