#pragma once

// The GPU plugin's half of claim preparation (kubeletplugin::ClaimDeviceBackend):
// which config kind each device of this node takes (GpuConfig for a full
// GPU, MigDeviceConfig for a MIG device), the per-claim CDI spec, and the
// typed groups the framework records in upstream's checkpoint shape
// (kubeletplugin/prepared_devices.h), so that a node can switch between the
// Go driver and this one.
//
// Supported: full GPUs and static (pre-created) MIG devices, exclusive use.
// Sharing, VFIO and dynamic MIG fail with a clear "not supported yet".
//
// Ownership: owns its copy of the inventory; borrows the CDI generator.
// Thread-safety: the ClaimPreparer calls one method at a time (pu.lock);
// the device map is immutable after construction.

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/claim_cdi.h"
#include "gpu/discovery.h"
#include "kubeletplugin/claim_device_backend.h"

namespace nvdra::gpu {

inline constexpr std::string_view kDriverName = "gpu.nvidia.com";

class GpuDeviceState final : public kubeletplugin::ClaimDeviceBackend {
 public:
  GpuDeviceState(NodeInventory inventory, const GpuCdi& cdi);

  std::vector<api::ConfigKind> DefaultConfigKinds() const override;
  common::StatusOr<api::ConfigKind> ConfigKindOf(const std::string& device) const override;
  common::StatusOr<std::vector<kubeletplugin::PreparedDeviceGroup>> PrepareDevices(
      const kubeletplugin::ClaimView& claim) override;
  common::Status UnprepareDevices(const kubeletplugin::RecordedClaim& claim) override;

  // Devices this node can prepare, by name ("gpu-0", "gpu-0-mig-1g10gb-19-0").
  const std::map<std::string, NodeDeviceKind>& devices() const { return devices_; }
  const NodeInventory& inventory() const { return inventory_; }

 private:
  NodeInventory inventory_;
  const GpuCdi& cdi_;
  std::map<std::string, NodeDeviceKind> devices_;  // refers into inventory_
};

}  // namespace nvdra::gpu
