#include "gpu/device_state.h"

#include <utility>

#include <fmt/format.h>

#include "common/crash_point.h"
#include "common/overloaded.h"
#include "gpu/mig_profile.h"

namespace nvdra::gpu {

using common::Status;
using common::StatusOr;
using kubeletplugin::PreparedDeviceGroup;

namespace {

// The checkpoint's record of one allocated device.
kubeletplugin::PreparedDeviceEntry Entry(const NodeDeviceKind& kind, const api::AllocatedDevice& allocated,
                                         const std::string& cdi_id) {
  kubeletplugin::CheckpointedDevice device{
      .device = {.requests = {allocated.request},
                 .pool_name = allocated.pool,
                 .device_name = allocated.device,
                 .cdi_device_ids = {cdi_id}},
      .share_id = std::nullopt,
      .metadata = nullptr,
  };
  kubeletplugin::PreparedDeviceKind recorded = std::visit(
      common::Overloaded{
          [](const FullGpuDevice& gpu) -> kubeletplugin::PreparedDeviceKind {
            return kubeletplugin::PreparedGpu{.uuid = gpu.gpu.uuid};
          },
          [](const MigSliceDevice& slice) -> kubeletplugin::PreparedDeviceKind {
            return kubeletplugin::PreparedMig{.parent_minor = static_cast<int>(slice.parent.minor),
                                              .gi_id = static_cast<int>(slice.mig.gi_id),
                                              .ci_id = static_cast<int>(slice.mig.ci_id),
                                              .mig_uuid = slice.mig.uuid,
                                              .parent_uuid = slice.parent.uuid,
                                              .parent_pci_bus_id = slice.parent.pci.bus_id};
          },
      },
      kind);
  return {.kind = std::move(recorded), .device = std::move(device)};
}

}  // namespace

GpuDeviceState::GpuDeviceState(NodeInventory inventory, const GpuCdi& cdi)
    : inventory_(std::move(inventory)), cdi_(cdi) {
  for (const GpuInfo& gpu : inventory_.gpus) {
    if (!gpu.mig_enabled) {
      devices_.emplace(GpuDeviceName(gpu.minor), FullGpuDevice{gpu});
      continue;
    }
    for (const MigDeviceInfo& mig : gpu.mig_devices) {
      devices_.emplace(MigDeviceName(gpu.minor, mig.profile, mig.gi.id, mig.placement.start),
                       MigSliceDevice{gpu, mig});
    }
  }
}

std::vector<api::ConfigKind> GpuDeviceState::DefaultConfigKinds() const {
  return {api::ConfigKind::kGpuConfig, api::ConfigKind::kMigDeviceConfig};
}

StatusOr<api::ConfigKind> GpuDeviceState::ConfigKindOf(const std::string& device) const {
  auto it = devices_.find(device);
  if (it == devices_.end()) {
    return common::NotFoundError(fmt::format(
        "device {} is not on this node (it may have disappeared since it was published)", device));
  }
  return std::visit(common::Overloaded{
                        [](const FullGpuDevice&) { return api::ConfigKind::kGpuConfig; },
                        [](const MigSliceDevice&) { return api::ConfigKind::kMigDeviceConfig; },
                    },
                    it->second);
}

StatusOr<std::vector<PreparedDeviceGroup>> GpuDeviceState::PrepareDevices(const kubeletplugin::ClaimView& claim) {
  std::vector<PreparedDeviceGroup> groups;
  std::vector<ClaimDevice> spec_devices;
  for (const api::ConfiguredResults& configured : claim.groups) {
    PreparedDeviceGroup group{.devices = {}, .config_state = kubeletplugin::GpuConfigState{}};
    for (const api::AllocatedDevice& allocated : configured.results) {
      // ConfigKindOf found every device when the view was resolved.
      const NodeDeviceKind& kind = devices_.at(allocated.device);
      group.devices.push_back(Entry(kind, allocated, GpuCdi::ClaimDeviceId(claim.ref.uid, allocated.device)));
      spec_devices.push_back(ClaimDevice{.name = allocated.device, .kind = kind});
    }
    // Exclusive use: nothing applied, so the config state stays empty.
    groups.push_back(std::move(group));
  }
  common::CrashPoint("prepare-before-cdi-write");
  RETURN_IF_ERROR(cdi_.WriteClaimSpec(claim.ref.uid, spec_devices));
  common::CrashPoint("prepare-after-cdi-write");
  return groups;
}

Status GpuDeviceState::UnprepareDevices(const kubeletplugin::RecordedClaim& claim) {
  // Full GPUs and static MIG devices keep no state beyond the CDI spec.
  return cdi_.RemoveClaimSpec(claim.ref.uid);
}

}  // namespace nvdra::gpu
