#pragma once

// VFIO passthrough of whole GPUs (gate PassthroughSupport): binding a GPU's
// PCI function to vfio-pci for a claim and giving it back to nvidia when the
// claim goes, and the device node a container gets for it.
//
// Only what the plugin bound is given back: a GPU that was on vfio-pci
// before the plugin took it (bound by the operator or at boot) stays there
// (upstream #1089 rebinds such GPUs to nvidia). The functions the plugin
// bound are recorded in a small file in the plugin folder, written before
// each bind, with the boot they belong to (a reboot resets every binding),
// so a crash between bind and checkpoint, or a plugin restart, loses none.
//
// Defines: VfioPassthroughOptions, VfioPassthrough.
// Ownership: owns the sysfs accessor and the record file.
// Thread-safety: thread-compatible; the device state calls it under pu.lock.

#include <filesystem>
#include <set>
#include <string>

#include "api/opaque_config.h"
#include "common/status.h"
#include "gpu/pci_sysfs.h"

namespace nvdra::gpu {

struct VfioPassthroughOptions {
  std::filesystem::path host_root;    // --host-root: sysfs and /dev of the host
  std::filesystem::path record_file;  // <plugin dir>/vfio-bindings.json
  std::string boot_id;                // the node's current boot id
};

class VfioPassthrough {
 public:
  // Checks that the IOMMU is on and vfio-pci is loaded (kFailedPrecondition
  // saying how to fix it), then lists the node's GPU functions.
  static common::StatusOr<VfioPassthrough> Open(VfioPassthroughOptions options);

  // The GPU functions at start-up, in gpu-vfio-<n> order.
  const std::vector<PciGpuFunction>& functions() const { return functions_; }
  bool iommufd_available() const { return iommufd_; }

  // Binds the function to vfio-pci (recording it first) unless it is there
  // already. kFailedPrecondition when it is on another driver than nvidia or
  // has SR-IOV virtual functions; errors of PciSysfs::Rebind.
  common::Status Bind(const std::string& bus_id);
  // Gives a function the plugin bound back to nvidia and forgets it; one the
  // plugin did not bind is left where it is (logged).
  common::Status Release(const std::string& bus_id);
  // Releases every recorded function not in `held` (prepared claims'):
  // leftovers of a Prepare that crashed or of a claim the checkpoint lost.
  // Returns how many went back to nvidia.
  common::StatusOr<int> ReleaseAllBut(const std::set<std::string>& held);

  // The node a container gets for a bound function: /dev/vfio/<group>, or
  // /dev/vfio/devices/vfio<n> when the config prefers IOMMUFD and the host
  // has it.
  common::StatusOr<std::string> DeviceNode(const std::string& bus_id, const api::VfioSettings& settings) const;
  // The IOMMU API device enableAPIDevice adds: /dev/iommu with IOMMUFD
  // preferred and present, else /dev/vfio/vfio.
  std::string ApiDeviceNode(const api::VfioSettings& settings) const;

 private:
  VfioPassthrough(VfioPassthroughOptions options, PciSysfs sysfs, std::vector<PciGpuFunction> functions,
                  bool iommufd);
  std::set<std::string> Recorded() const;
  common::Status Record(const std::set<std::string>& bus_ids) const;

  VfioPassthroughOptions options_;
  PciSysfs sysfs_;
  std::vector<PciGpuFunction> functions_;
  bool iommufd_ = false;
};

}  // namespace nvdra::gpu
