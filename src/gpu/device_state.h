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
// MPS (gate MPSSupport, full GPUs and MIG devices): Prepare starts one MPS
// control daemon per group (mps_daemon.h) and, until its Deployment is
// Ready, answers kUnavailable, so that the ClaimPreparer waits outside the
// node lock in AwaitRetry, woken by the Deployment watch; then records the
// daemon's id (mpsControlDaemonID) and gives the group's devices the MPS
// edits. A PrepareStarted leftover is kept (RollBackLeftover): Prepare
// redoes each step idempotently and must not tear down a daemon it is
// waiting for. Unprepare stops the daemon; SweepLeftovers removes daemons
// of claims the checkpoint does not hold. MPS with consumable shares is
// refused, as upstream.
// VFIO (gate PassthroughSupport): gpu-vfio-<n> binds its GPU to vfio-pci at
// Prepare and gives it back at Unprepare (vfio_passthrough.h); a VFIO device
// and the full GPU or MIG devices of the same GPU exclude each other: while
// one is prepared the others are withdrawn from the slice (Withdrawn(),
// republished through `on_withdrawn_changed`) and refused at Prepare.
//
// Ownership: owns its copy of the inventory; borrows the CDI generator, the
// compute policy and the MPS daemons (null with MPSSupport off).
// Thread-safety: the ClaimPreparer calls one method at a time (pu.lock),
// except AwaitRetry; the device map is immutable after construction, the
// prepared-device map is only touched by the pu.lock-serialised methods.

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <variant>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "gpu/claim_cdi.h"
#include "gpu/compute_policy.h"
#include "gpu/discovery.h"
#include "gpu/dynamic_mig.h"
#include "gpu/fabric_partitions.h"
#include "gpu/mps_daemon.h"
#include "gpu/vfio_passthrough.h"
#include "kubeletplugin/claim_device_backend.h"

namespace nvdra::gpu {

inline constexpr std::string_view kDriverName = "gpu.nvidia.com";

// A MIG device DynamicMIG publishes and Prepare creates: a profile at a
// placement of a GPU.
struct DynamicMigSlot {
  const GpuInfo& parent;
  const MigProfileInfo& profile;
  nvml::GpuInstancePlacement placement;
};

// A GPU PCI function passed through with vfio-pci (PassthroughSupport).
// `parent`: the NVML GPU on it, null when the plugin started with it off
// nvidia (on vfio-pci already).
struct VfioSlot {
  const PciGpuFunction& function;
  const GpuInfo* parent;
};

// A device this node publishes, as the device state knows it.
using StateDeviceKind = std::variant<FullGpuDevice, MigSliceDevice, DynamicMigSlot, VfioSlot>;

struct GpuDeviceStateOptions {
  // --consumable-shares is on: claims with equal configs may share a device
  // (upstream's rule).
  bool shares_devices = false;
  MpsDaemons* mps = nullptr;  // MPSSupport; null: off
  // DynamicMIG: MIG-capable GPUs are the full GPU (unless an Ampere GPU has
  // MIG on) plus every profile x placement, made at Prepare. Null: off.
  const DynamicMig* dynamic_mig = nullptr;
  // PassthroughSupport: gpu-vfio-<n> devices. Null: off.
  VfioPassthrough* vfio = nullptr;
  // Fabric Manager on an NVSwitch node (FabricManagerPartitioning or
  // FabricTopologySupport on; gpu/fabric_partitions.h). Null: off, or no
  // NVSwitch fabric here.
  FabricPartitions* fabric = nullptr;
  // FabricManagerPartitioning: Prepare activates the partition of exactly
  // the claim's full and VFIO GPUs not under a fabricTopologyConfig, and
  // Unprepare deactivates it.
  bool exact_set_partitions = false;
  // Said about a claim whose fabricTopologyConfig applies without a fabric
  // action (Disabled, VGPU, FullPassthrough): an Event on the claim.
  std::function<void(const kubeletplugin::ClaimRef& claim, const std::string& note)> on_fabric_note{};
  // Called, under pu.lock, when the devices to withdraw from the slice
  // change (PassthroughSupport), with the new Withdrawn().
  std::function<void(const std::set<std::string>& withdrawn)> on_withdrawn_changed{};
  // DeviceMetadata: the published attributes (resource.k8s.io JSON) the
  // checkpoint entry of each named device carries, as upstream's for VFIO
  // devices only.
  std::map<std::string, nlohmann::json> device_metadata{};
};

class GpuDeviceState final : public kubeletplugin::ClaimDeviceBackend {
 public:
  GpuDeviceState(NodeInventory inventory, const GpuCdi& cdi, ComputePolicy& compute_policy,
                 GpuDeviceStateOptions options = {});

  std::vector<api::ConfigKind> DefaultConfigKinds() const override;
  common::StatusOr<api::ConfigKind> ConfigKindOf(const std::string& device) const override;
  common::StatusOr<std::vector<kubeletplugin::PreparedDeviceGroup>> PrepareDevices(
      const kubeletplugin::ClaimView& claim) override;
  common::Status UnprepareDevices(const kubeletplugin::RecordedClaim& claim) override;
  bool SharesDevicesWithEqualConfigs() const override { return shares_devices_; }
  common::Status RollBackLeftover(const kubeletplugin::RecordedClaim& claim) override;
  common::Status ForgetUnknownClaim(const std::string& claim_uid) override { return cdi_.RemoveClaimSpec(claim_uid); }
  bool AwaitRetry(const kubeletplugin::ClaimView& claim, const common::Status& failure,
                  std::chrono::steady_clock::time_point deadline) override;
  common::Status SweepLeftovers(const kubeletplugin::Checkpoint& checkpoint) override;

  // Devices this node can prepare, by name ("gpu-0", "gpu-0-mig-1g10gb-19-0").
  const std::map<std::string, StateDeviceKind>& devices() const { return devices_; }
  const NodeInventory& inventory() const { return inventory_; }

  // Published devices to leave out of the slice now: the siblings of
  // prepared devices on the same GPU (its VFIO twin while the full GPU or one
  // of its MIG devices is prepared; the full GPU and its MIG devices while the
  // twin is). Empty without PassthroughSupport.
  std::set<std::string> Withdrawn() const;

 private:
  // The PCI function (bus id) a device of this node lives on.
  std::string BusIdOf(const std::string& device) const;
  // kFailedPrecondition when a device of `claim` and a device another claim
  // holds (or another device of this claim) are a GPU and its VFIO twin.
  common::Status CheckPassthroughConflicts(const kubeletplugin::ClaimView& claim) const;
  void NoteHeld(const std::string& claim_uid, std::set<std::string> devices);
  // The NVML GPU behind a full GPU or VFIO device name; null for others (and
  // for a VFIO function NVML did not see at start-up).
  const GpuInfo* WholeGpuOf(const std::string& device) const;
  // FabricManagerPartitioning: the partition made of exactly the whole GPUs
  // among `devices`; nullopt when there are none. kFailedPrecondition when
  // those GPUs are no partition (the message says how to ask for one).
  common::StatusOr<std::optional<std::uint32_t>> FabricPartitionOf(const std::vector<std::string>& devices) const;
  // The module ids of the whole GPUs among `devices`.
  common::StatusOr<std::set<std::uint32_t>> ModulesOf(const std::vector<std::string>& devices) const;
  // The partitions to activate for `claim`, one list per group (a
  // fabricTopologyConfig's plan, or the exact-set partition on the first
  // group of whole GPUs without one), and the notes to say. `check_figures`
  // false: for a crashed Prepare's leftover (what it may have activated).
  struct ClaimFabricPlan {
    std::vector<std::vector<std::uint32_t>> per_group;
    std::vector<std::string> notes;
  };
  common::StatusOr<ClaimFabricPlan> PlanClaimFabric(const kubeletplugin::ClaimView& claim, bool check_figures);
  // The partitions a checkpoint entry says its claim holds; nullopt for an
  // entry without the record (an older plugin's), then derived from its
  // devices as FabricManagerPartitioning does.
  std::optional<std::set<std::uint32_t>> RecordedPartitions(const kubeletplugin::CheckpointedClaim& entry) const;
  // Unprepare: deactivates the claim's partition unless another prepared
  // claim holds one of its GPUs.
  common::Status DeactivateFabricPartitionOf(const kubeletplugin::RecordedClaim& claim);
  // Sweep: FM's active partitions become exactly those of the completed
  // claims in `checkpoint`.
  common::Status SyncFabricPartitions(const kubeletplugin::Checkpoint& checkpoint);
  // The full GPUs of `group` that its config asks to time-slice, by device
  // name -> UUID.
  std::map<std::string, std::string> TimeSlicedGpus(const api::ConfiguredResults& group) const;
  // Destroys the dynamic MIG devices at the placements of `claim`'s view
  // that no other claim holds (a PrepareStarted leftover: the checkpoint
  // does not say what was made).
  common::Status DestroyDynamicMigOf(const kubeletplugin::RecordedClaim& claim);
  // The MPS daemon `group` of `claim_uid` runs, when its config asks for MPS.
  std::optional<MpsDaemonSpec> MpsSpecOf(const std::string& claim_uid, const api::ConfiguredResults& group) const;

  NodeInventory inventory_;
  const GpuCdi& cdi_;
  ComputePolicy& compute_policy_;
  const bool shares_devices_;
  MpsDaemons* const mps_;
  const DynamicMig* const dynamic_mig_;
  VfioPassthrough* const vfio_;
  FabricPartitions* const fabric_;
  const bool exact_set_partitions_;
  const std::function<void(const kubeletplugin::ClaimRef&, const std::string&)> on_fabric_note_;
  const std::map<std::string, nlohmann::json> device_metadata_;
  const std::function<void(const std::set<std::string>&)> on_withdrawn_changed_;
  std::map<std::string, StateDeviceKind> devices_;  // refers into inventory_ and vfio_'s functions
  // Devices of prepared claims, by claim UID (PassthroughSupport only):
  // what Withdrawn() and the conflict check look at.
  std::map<std::string, std::set<std::string>> held_;
};

}  // namespace nvdra::gpu
