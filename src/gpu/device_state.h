#pragma once

// The GPU plugin's half of claim preparation (kubeletplugin::ClaimDeviceBackend):
// which node devices a claim's allocation names, which opaque config applies
// to each (api::ResolveDeviceConfigs), the per-claim CDI spec, and the
// checkpoint groups in upstream's JSON shape
//   [{"devices": [{"gpu": {"info": {"uuid"}, "device": {...}}, "mig": null}],
//     "configState": {}}]
// so that a node can switch between the Go driver and this one.
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

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "gpu/claim_cdi.h"
#include "gpu/discovery.h"
#include "kubeletplugin/claim_preparer.h"

namespace nvdra::gpu {

inline constexpr std::string_view kDriverName = "gpu.nvidia.com";

// A device this node publishes and can prepare.
struct AllocatableDevice {
  std::string name;                 // "gpu-0", "gpu-0-mig-1g10gb-19-0"
  const GpuInfo* gpu = nullptr;     // the GPU, or the MIG device's parent
  const MigDeviceInfo* mig = nullptr;  // set for MIG devices
};

class GpuDeviceState final : public kubeletplugin::ClaimDeviceBackend {
 public:
  GpuDeviceState(NodeInventory inventory, const GpuCdi& cdi);

  common::StatusOr<nlohmann::ordered_json> PrepareDevices(const nlohmann::ordered_json& claim) override;
  common::Status UnprepareDevices(const std::string& claim_uid,
                                  const kubeletplugin::CheckpointedClaim& entry) override;

  const std::map<std::string, AllocatableDevice>& devices() const { return devices_; }
  const NodeInventory& inventory() const { return inventory_; }

 private:
  NodeInventory inventory_;
  const GpuCdi& cdi_;
  std::map<std::string, AllocatableDevice> devices_;  // by device name; points into inventory_
};

}  // namespace nvdra::gpu
