#pragma once

// The GPU plugin's half of claim preparation (kubeletplugin::ClaimDeviceBackend):
// which config kind each device of this node takes (GpuConfig for a full
// GPU, MigDeviceConfig for a MIG device), the per-claim CDI spec, and the
// typed groups the framework records in upstream's checkpoint shape
// (kubeletplugin/prepared_devices.h), so that a node can switch between the
// Go driver and this one.
//
// Supported: full GPUs and static (pre-created) MIG devices, exclusive or
// time-sliced (sharing.strategy TimeSlicing, gate TimeSlicingSettings): on a
// full GPU, Prepare sets compute mode DEFAULT and the requested time-slice
// interval through the ComputePolicy and records timeSliceApplied in the
// group's config state; Unprepare sets the interval back to Default for the
// GPUs a group records (or, for a PrepareStarted leftover, the GPUs its
// allocation asked to time-slice: a crash may have come after the change).
// On a MIG device TimeSlicing is accepted and changes nothing, as upstream.
// MPS, VFIO and dynamic MIG fail validation with a clear "not supported yet".
//
// Ownership: owns its copy of the inventory; borrows the CDI generator and
// the compute policy.
// Thread-safety: the ClaimPreparer calls one method at a time (pu.lock);
// the device map is immutable after construction.

#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/claim_cdi.h"
#include "gpu/compute_policy.h"
#include "gpu/discovery.h"
#include "kubeletplugin/claim_device_backend.h"

namespace nvdra::gpu {

inline constexpr std::string_view kDriverName = "gpu.nvidia.com";

class GpuDeviceState final : public kubeletplugin::ClaimDeviceBackend {
 public:
  // `shares_devices`: --consumable-shares is on, so claims with equal
  // configs may share a device (upstream's rule).
  GpuDeviceState(NodeInventory inventory, const GpuCdi& cdi, ComputePolicy& compute_policy,
                 bool shares_devices = false);

  std::vector<api::ConfigKind> DefaultConfigKinds() const override;
  common::StatusOr<api::ConfigKind> ConfigKindOf(const std::string& device) const override;
  common::StatusOr<std::vector<kubeletplugin::PreparedDeviceGroup>> PrepareDevices(
      const kubeletplugin::ClaimView& claim) override;
  common::Status UnprepareDevices(const kubeletplugin::RecordedClaim& claim) override;
  bool SharesDevicesWithEqualConfigs() const override { return shares_devices_; }

  // Devices this node can prepare, by name ("gpu-0", "gpu-0-mig-1g10gb-19-0").
  const std::map<std::string, NodeDeviceKind>& devices() const { return devices_; }
  const NodeInventory& inventory() const { return inventory_; }

 private:
  // The full GPUs of `group` that its config asks to time-slice, by device
  // name -> UUID.
  std::map<std::string, std::string> TimeSlicedGpus(const api::ConfiguredResults& group) const;

  NodeInventory inventory_;
  const GpuCdi& cdi_;
  ComputePolicy& compute_policy_;
  const bool shares_devices_;
  std::map<std::string, NodeDeviceKind> devices_;  // refers into inventory_
};

}  // namespace nvdra::gpu
