#pragma once

// NVIDIA GPU PCI functions as the host's sysfs shows them, and moving one
// between kernel drivers (nvidia <-> vfio-pci) through the driver core's
// sysfs files, for VFIO passthrough (gate PassthroughSupport).
//
// Every path is under the host root the plugin is given (--host-root):
// <host root>/sys/bus/pci/devices, .../drivers, /sys/kernel/iommu_groups and
// <host root>/dev/{iommu,vfio}. Upstream reads some of these from the
// container's own /sys and others under the host root; one root keeps them
// consistent (its users hit the mix-up in upstream #1089).
//
// Defines: PciGpuFunction, PciSysfs, AddressableMemoryBytes, VfioDeviceUuid.
// Thread-safety: PciSysfs is immutable and its methods may run concurrently,
// but two Rebind calls for one function must not overlap (the device state
// calls them under its lock).

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nvdra::gpu {

inline constexpr std::string_view kNvidiaPciDriver = "nvidia";
inline constexpr std::string_view kVfioPciDriver = "vfio-pci";

// One physical function of an NVIDIA GPU (class 0x0300 or 0x0302, not an
// SR-IOV virtual function).
struct PciGpuFunction {
  std::string bus_id;  // "0000:18:00.0", as sysfs names it
  std::uint16_t vendor_id = 0;
  std::uint16_t device_id = 0;
  std::string driver;  // "nvidia", "vfio-pci", ... ("" when unbound)
  std::optional<int> iommu_group;
  std::string iommufd_device;  // "vfio3" while bound to vfio-pci with IOMMUFD; else ""
  std::optional<std::string> pcie_root;  // "pci0000:17"
  std::optional<int> numa_node;          // only when >= 0
  std::uint64_t addressable_memory_bytes = 0;
  int sriov_vfs = 0;  // sriov_numvfs; 0 when the function has no SR-IOV
};

class PciSysfs {
 public:
  explicit PciSysfs(std::filesystem::path host_root);

  // NVIDIA GPU functions, sorted by bus id (upstream's order, which names
  // gpu-vfio-<n>). kNotFound when <host root>/sys/bus/pci/devices is missing.
  common::StatusOr<std::vector<PciGpuFunction>> ListGpus() const;
  common::StatusOr<PciGpuFunction> Read(const std::string& bus_id) const;

  // kFailedPrecondition when <host root>/sys/kernel/iommu_groups is missing
  // or empty (IOMMU off: vfio-pci cannot work), saying how to turn it on.
  common::Status CheckIommuEnabled() const;
  // <host root>/dev/iommu exists (the kernel has IOMMUFD).
  bool IommufdAvailable() const;
  // kFailedPrecondition naming modprobe when the driver has no folder in
  // <host root>/sys/bus/pci/drivers (its module is not loaded).
  common::Status CheckDriverLoaded(std::string_view driver) const;

  // Binds `bus_id` to `driver` the way the driver core is driven: the
  // function's driver_override is set, it is unbound from its current
  // driver, then bound to `driver`. Waits up to `timeout` for sysfs to show
  // each step (the kernel applies them before the write returns; a
  // simulated one may lag). OK at once when already bound to `driver`.
  // Errors name the function, the file and the driver it is left on.
  common::Status Rebind(const std::string& bus_id, std::string_view driver,
                        std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;

  const std::filesystem::path& host_root() const { return host_root_; }

 private:
  std::filesystem::path DeviceDir(const std::string& bus_id) const;
  std::filesystem::path DriversDir() const;

  std::filesystem::path host_root_;
};

// The memory a function's 64-bit memory BARs address, from its sysfs
// `resource` table (first six BARs), rounded up to a power of two, as
// upstream's addressableMemory capacity.
std::uint64_t AddressableMemoryBytes(std::string_view resource_table);

// The name-based (SHA-1, version 5) UUID of a PCI address in the DNS
// namespace, which upstream publishes as a VFIO device's uuid.
std::string VfioDeviceUuid(std::string_view bus_id);

}  // namespace nvdra::gpu
