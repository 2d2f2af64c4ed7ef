#include "gpu/device_state.h"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/crash_point.h"
#include "common/log.h"
#include "common/overloaded.h"
#include "gpu/mig_profile.h"
#include "gpu/published_devices.h"

namespace nvdra::gpu {

using common::Status;
using common::StatusOr;
using kubeletplugin::PreparedDeviceGroup;

namespace {

// The checkpoint's record of one allocated device.
// `attributes`: the device's published attributes, for DeviceMetadata.
kubeletplugin::PreparedDeviceEntry Entry(const NodeDeviceKind& kind, const api::AllocatedDevice& allocated,
                                         const std::string& cdi_id, const nlohmann::json* attributes) {
  kubeletplugin::CheckpointedDevice device{
      .device = {.requests = {allocated.request},
                 .pool_name = allocated.pool,
                 .device_name = allocated.device,
                 .cdi_device_ids = {cdi_id}},
      .share_id = allocated.share_id,
      .metadata = nullptr,
  };
  if (attributes != nullptr) device.metadata = {{"Attributes", *attributes}, {"NetworkData", nullptr}};
  kubeletplugin::PreparedDeviceKind recorded = std::visit(
      common::Overloaded{
          [](const FullGpuDevice& gpu) -> kubeletplugin::PreparedDeviceKind {
            return kubeletplugin::PreparedGpu{.uuid = gpu.gpu.uuid};
          },
          [](const VfioPassthroughDevice& vfio) -> kubeletplugin::PreparedDeviceKind {
            return kubeletplugin::PreparedVfio{.uuid = vfio.uuid, .pci_bus_id = vfio.bus_id};
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

GpuDeviceState::GpuDeviceState(NodeInventory inventory, const GpuCdi& cdi, ComputePolicy& compute_policy,
                               GpuDeviceStateOptions options)
    : inventory_(std::move(inventory)),
      cdi_(cdi),
      compute_policy_(compute_policy),
      shares_devices_(options.shares_devices),
      mps_(options.mps),
      dynamic_mig_(options.dynamic_mig),
      vfio_(options.vfio),
      fabric_(options.fabric),
      exact_set_partitions_(options.exact_set_partitions),
      on_fabric_note_(std::move(options.on_fabric_note)),
      device_metadata_(std::move(options.device_metadata)),
      on_withdrawn_changed_(std::move(options.on_withdrawn_changed)) {
  for (const GpuInfo& gpu : inventory_.gpus) {
    if (dynamic_mig_ != nullptr && DynamicMigCapable(gpu)) {
      // What BuildPublishedResources publishes for DynamicMIG.
      if (!gpu.mig_enabled || gpu.architecture != "Ampere") {
        devices_.emplace(GpuDeviceName(gpu.minor), FullGpuDevice{gpu});
      }
      for (const MigProfileInfo& profile : gpu.mig_profiles) {
        if (profile.ci_profile_index == kMigRev1ComputeProfileIndex) continue;
        for (const nvml::GpuInstancePlacement& placement : profile.placements) {
          devices_.emplace(MigDeviceName(gpu.minor, profile.name.ToString(), profile.gi.id, placement.start),
                           DynamicMigSlot{gpu, profile, placement});
        }
      }
      continue;
    }
    if (!gpu.mig_enabled) {
      devices_.emplace(GpuDeviceName(gpu.minor), FullGpuDevice{gpu});
      continue;
    }
    for (const MigDeviceInfo& mig : gpu.mig_devices) {
      devices_.emplace(MigDeviceName(gpu.minor, mig.profile, mig.gi.id, mig.placement.start),
                       MigSliceDevice{gpu, mig});
    }
  }
  if (vfio_ != nullptr) {
    // What BuildPublishedResources publishes with PassthroughSupport.
    for (std::size_t i = 0; i < vfio_->functions().size(); ++i) {
      const PciGpuFunction& function = vfio_->functions()[i];
      const GpuInfo* parent = nullptr;
      for (const GpuInfo& gpu : inventory_.gpus) {
        if (gpu.pci.bus_id == function.bus_id) parent = &gpu;
      }
      devices_.emplace(VfioDeviceName(i), VfioSlot{function, parent});
    }
  }
}

std::vector<api::ConfigKind> GpuDeviceState::DefaultConfigKinds() const {
  if (vfio_ != nullptr) {
    return {api::ConfigKind::kGpuConfig, api::ConfigKind::kMigDeviceConfig, api::ConfigKind::kVfioDeviceConfig};
  }
  return {api::ConfigKind::kGpuConfig, api::ConfigKind::kMigDeviceConfig};
}

std::string GpuDeviceState::BusIdOf(const std::string& device) const {
  auto it = devices_.find(device);
  if (it == devices_.end()) return "";
  return std::visit(common::Overloaded{
                        [](const FullGpuDevice& gpu) { return gpu.gpu.pci.bus_id; },
                        [](const MigSliceDevice& slice) { return slice.parent.pci.bus_id; },
                        [](const DynamicMigSlot& slot) { return slot.parent.pci.bus_id; },
                        [](const VfioSlot& vfio) { return vfio.function.bus_id; },
                    },
                    it->second);
}

const GpuInfo* GpuDeviceState::WholeGpuOf(const std::string& device) const {
  auto it = devices_.find(device);
  if (it == devices_.end()) return nullptr;
  if (const auto* gpu = std::get_if<FullGpuDevice>(&it->second)) return &gpu->gpu;
  if (const auto* vfio = std::get_if<VfioSlot>(&it->second)) return vfio->parent;
  return nullptr;
}

StatusOr<std::set<std::uint32_t>> GpuDeviceState::ModulesOf(const std::vector<std::string>& devices) const {
  std::set<std::uint32_t> modules;
  for (const std::string& device : devices) {
    const GpuInfo* gpu = WholeGpuOf(device);
    if (gpu == nullptr) continue;
    if (!gpu->module_id || *gpu->module_id == 0) {
      return common::FailedPreconditionError(fmt::format(
          "Fabric Manager: GPU {} ({}) has no module id (it was on vfio-pci when the plugin started); its "
          "partition cannot be found until the plugin restarts with the GPU on nvidia",
          device, gpu->pci.bus_id));
    }
    modules.insert(*gpu->module_id);
  }
  return modules;
}

StatusOr<std::optional<std::uint32_t>> GpuDeviceState::FabricPartitionOf(const std::vector<std::string>& devices) const {
  ASSIGN_OR_RETURN(const std::set<std::uint32_t> modules, ModulesOf(devices));
  if (modules.empty()) return std::optional<std::uint32_t>();
  if (std::optional<std::uint32_t> id = fabric_->table().Exactly(modules)) return id;
  return common::FailedPreconditionError(fmt::format(
      "Fabric Manager: the claim's GPUs (module ids {}) are not exactly one fabric partition; ask the scheduler for "
      "GPUs of one partition with a constraint matchAttribute: gpu.nvidia.com/partition{}",
      fmt::join(modules, ","), modules.size()));
}

StatusOr<GpuDeviceState::ClaimFabricPlan> GpuDeviceState::PlanClaimFabric(const kubeletplugin::ClaimView& claim,
                                                                           bool check_figures) {
  ClaimFabricPlan plan;
  plan.per_group.resize(claim.groups.size());
  std::optional<std::vector<fabricmanager::Partition>> live;
  std::vector<std::string> rest;  // whole GPUs under no fabricTopologyConfig
  std::optional<std::size_t> rest_group;
  for (std::size_t i = 0; i < claim.groups.size(); ++i) {
    const api::ConfiguredResults& group = claim.groups[i];
    std::vector<std::string> names;
    for (const api::AllocatedDevice& allocated : group.results) {
      if (WholeGpuOf(allocated.device) != nullptr) names.push_back(allocated.device);
    }
    const bool takes_fabric = group.config.kind == api::ConfigKind::kGpuConfig ||
                              group.config.kind == api::ConfigKind::kVfioDeviceConfig;
    const std::optional<api::FabricTopology> topology =
        takes_fabric ? api::FabricTopologyOf(group.config.object, group.source) : std::nullopt;
    if (!topology) {
      if (!names.empty() && !rest_group) rest_group = i;
      rest.insert(rest.end(), names.begin(), names.end());
      continue;
    }
    ASSIGN_OR_RETURN(const std::set<std::uint32_t> modules, ModulesOf(names));
    const bool acts = topology->strategy != api::FabricStrategy::kDisabled &&
                      topology->model != api::VirtualizationModel::kVGPU;
    if (fabric_ == nullptr && acts) {
      return common::FailedPreconditionError(fmt::format(
          "{}: this node has no NVSwitch fabric that Fabric Manager manages (no NVSwitch under "
          "/proc/driver/nvidia-nvswitch/devices, or FM unreachable at start-up: see the plugin's log); ask for GPUs "
          "with a constraint matchAttribute: gpu.nvidia.com/partition<count>, which only such nodes publish, or use "
          "strategy Disabled",
          topology->field));
    }
    const std::vector<fabricmanager::Partition> none;
    const std::vector<fabricmanager::Partition>* partitions = &none;
    if (fabric_ != nullptr && acts) {
      if (!check_figures) {
        partitions = &fabric_->table().partitions();
      } else {
        if (!live) {
          ASSIGN_OR_RETURN(live, fabric_->ListNow());
        }
        partitions = &*live;
      }
    }
    ASSIGN_OR_RETURN(FabricPlan group_plan, PlanFabricTopology(*topology, modules, *partitions, check_figures));
    if (!group_plan.note.empty()) plan.notes.push_back(std::move(group_plan.note));
    plan.per_group[i] = std::move(group_plan.activate);
  }
  if (fabric_ != nullptr && exact_set_partitions_ && rest_group) {
    ASSIGN_OR_RETURN(const std::optional<std::uint32_t> partition, FabricPartitionOf(rest));
    if (partition) plan.per_group[*rest_group].push_back(*partition);
  }
  return plan;
}

std::optional<std::set<std::uint32_t>> GpuDeviceState::RecordedPartitions(
    const kubeletplugin::CheckpointedClaim& entry) const {
  std::set<std::uint32_t> ids;
  bool recorded = false;
  std::vector<std::string> names;
  for (const PreparedDeviceGroup& group : entry.prepared_devices) {
    for (const kubeletplugin::PreparedDeviceEntry& device : group.devices) names.push_back(device.device.device.device_name);
    const auto* state = std::get_if<kubeletplugin::GpuConfigState>(&group.config_state);
    if (state == nullptr || !state->fabric_partition_ids) continue;
    recorded = true;
    ids.insert(state->fabric_partition_ids->begin(), state->fabric_partition_ids->end());
  }
  if (recorded) return ids;
  // An entry an older plugin wrote: FabricManagerPartitioning's rule.
  if (fabric_ == nullptr || !exact_set_partitions_) return std::nullopt;
  StatusOr<std::optional<std::uint32_t>> partition = FabricPartitionOf(names);
  if (partition.ok() && *partition) ids.insert(**partition);
  return ids;
}

std::set<std::string> GpuDeviceState::Withdrawn() const {
  std::set<std::string> withdrawn;
  if (vfio_ == nullptr) return withdrawn;
  // Bus id -> whether a VFIO device / another device of it is held.
  std::set<std::string> passed_through;
  std::set<std::string> in_use;
  for (const auto& [uid, devices] : held_) {
    for (const std::string& device : devices) {
      auto it = devices_.find(device);
      if (it == devices_.end()) continue;
      (std::holds_alternative<VfioSlot>(it->second) ? passed_through : in_use).insert(BusIdOf(device));
    }
  }
  for (const auto& [name, kind] : devices_) {
    const bool is_vfio = std::holds_alternative<VfioSlot>(kind);
    if ((is_vfio ? in_use : passed_through).contains(BusIdOf(name))) withdrawn.insert(name);
  }
  return withdrawn;
}

void GpuDeviceState::NoteHeld(const std::string& claim_uid, std::set<std::string> devices) {
  if (vfio_ == nullptr) return;
  const std::set<std::string> before = Withdrawn();
  if (devices.empty()) {
    held_.erase(claim_uid);
  } else {
    held_[claim_uid] = std::move(devices);
  }
  std::set<std::string> after = Withdrawn();
  if (after != before && on_withdrawn_changed_) on_withdrawn_changed_(after);
}

Status GpuDeviceState::CheckPassthroughConflicts(const kubeletplugin::ClaimView& claim) const {
  if (vfio_ == nullptr) return common::OkStatus();
  // Bus id -> (device, holder) of what is prepared, this claim's included.
  std::map<std::string, std::pair<std::string, std::string>> vfio_on, other_on;
  for (const auto& [uid, devices] : held_) {
    if (uid == claim.ref.uid) continue;
    for (const std::string& device : devices) {
      auto it = devices_.find(device);
      if (it == devices_.end()) continue;
      auto& on = std::holds_alternative<VfioSlot>(it->second) ? vfio_on : other_on;
      on.emplace(BusIdOf(device), std::pair{device, "claim " + uid});
    }
  }
  for (const api::ConfiguredResults& group : claim.groups) {
    for (const api::AllocatedDevice& allocated : group.results) {
      auto it = devices_.find(allocated.device);
      if (it == devices_.end()) continue;
      const bool is_vfio = std::holds_alternative<VfioSlot>(it->second);
      const std::string bus_id = BusIdOf(allocated.device);
      const auto& siblings = is_vfio ? other_on : vfio_on;
      if (auto found = siblings.find(bus_id); found != siblings.end()) {
        return common::FailedPreconditionError(fmt::format(
            "{} and {} are the same GPU ({}), which {} holds as {}: a GPU is either passed through with vfio-pci "
            "or used with the NVIDIA driver; it becomes available when that claim is released",
            allocated.device, found->second.first, bus_id, found->second.second, found->second.first));
      }
      (is_vfio ? vfio_on : other_on).emplace(bus_id, std::pair{allocated.device, "this claim"});
    }
  }
  return common::OkStatus();
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
                        [](const DynamicMigSlot&) { return api::ConfigKind::kMigDeviceConfig; },
                        [](const VfioSlot&) { return api::ConfigKind::kVfioDeviceConfig; },
                    },
                    it->second);
}

StatusOr<std::vector<PreparedDeviceGroup>> GpuDeviceState::PrepareDevices(const kubeletplugin::ClaimView& claim) {
  std::vector<PreparedDeviceGroup> groups;
  std::vector<ClaimDevice> spec_devices;
  std::vector<std::string> daemons_not_ready;
  std::deque<MigDeviceInfo> created;  // dynamic MIG devices made here; the spec refers to them
  RETURN_IF_ERROR(CheckPassthroughConflicts(claim));
  const auto vfio_groups = std::count_if(claim.groups.begin(), claim.groups.end(), [](const auto& group) {
    return group.config.kind == api::ConfigKind::kVfioDeviceConfig;
  });
  if (vfio_groups > 1) {
    return common::InvalidArgumentError(fmt::format(
        "claim {} has {} VFIO device groups (devices under different VfioDeviceConfigs), but at most one is "
        "supported per claim: use one VfioDeviceConfig for all its VFIO requests",
        claim.ref.uid, vfio_groups));
  }
  // Fabric Manager before the GPUs are touched (upstream's order: VFIO binds
  // come after).
  ASSIGN_OR_RETURN(const ClaimFabricPlan fabric_plan, PlanClaimFabric(claim, /*check_figures=*/true));
  for (const std::vector<std::uint32_t>& ids : fabric_plan.per_group) {
    for (std::uint32_t id : ids) {
      RETURN_IF_ERROR(fabric_->Activate(id));
      common::CrashPoint("prepare-after-fabric-activate");
    }
  }
  for (const std::string& note : fabric_plan.notes) {
    LOG_INFO(1, "fabricTopologyConfig: no fabric action", {{"claim", claim.ref.uid}, {"note", note}});
    if (on_fabric_note_) on_fabric_note_(claim.ref, note);
  }
  std::set<std::string> held;
  for (std::size_t group_index = 0; group_index < claim.groups.size(); ++group_index) {
    const api::ConfiguredResults& configured = claim.groups[group_index];
    PreparedDeviceGroup group{.devices = {}, .config_state = kubeletplugin::GpuConfigState{}};
    auto& config_state = std::get<kubeletplugin::GpuConfigState>(group.config_state);
    if (fabric_ != nullptr) config_state.fabric_partition_ids = fabric_plan.per_group[group_index];
    // MPS first: its daemon's edits go to every device of the group.
    kubeletplugin::CdiContainerEdits group_edits;
    if (std::optional<MpsDaemonSpec> mps = MpsSpecOf(claim.ref.uid, configured)) {
      if (shares_devices_) {
        return common::FailedPreconditionError(
            "sharing.strategy MPS is not supported while consumable shares are on (--consumable-shares, chart "
            "value resources.gpus.consumableShares); use TimeSlicing, or request the GPU without sharing");
      }
      if (mps_ == nullptr) {
        return common::FailedPreconditionError(
            "sharing.strategy MPS needs the feature gate MPSSupport on the plugin (chart value "
            "featureGates.MPSSupport=true)");
      }
      ASSIGN_OR_RETURN(const std::string id, mps_->Start(*mps));
      if (!mps_->Ready(id)) daemons_not_ready.push_back(MpsDaemons::DeploymentName(id));
      config_state.mps_control_daemon_id = id;
      group_edits = mps_->CdiEdits(id);
    }
    for (const api::AllocatedDevice& allocated : configured.results) {
      // ConfigKindOf found every device when the view was resolved.
      const StateDeviceKind& state_kind = devices_.at(allocated.device);
      // A dynamic MIG slot becomes the MIG device made for it now.
      kubeletplugin::CdiContainerEdits device_edits = group_edits;
      auto made = [&]() -> StatusOr<NodeDeviceKind> {
        if (const auto* gpu = std::get_if<FullGpuDevice>(&state_kind)) return NodeDeviceKind(*gpu);
        if (const auto* slice = std::get_if<MigSliceDevice>(&state_kind)) return NodeDeviceKind(*slice);
        if (const auto* vfio = std::get_if<VfioSlot>(&state_kind)) {
          const std::string& bus_id = vfio->function.bus_id;
          RETURN_IF_ERROR(vfio_->Bind(bus_id));
          common::CrashPoint("prepare-after-vfio-bind");
          const api::VfioSettings settings = api::VfioSettingsOf(configured.config);
          ASSIGN_OR_RETURN(std::string node, vfio_->DeviceNode(bus_id, settings));
          if (settings.enable_api_device && &allocated == &configured.results.front()) {
            kubeletplugin::CdiDeviceNode api_device;
            api_device.path = vfio_->ApiDeviceNode(settings);
            device_edits.device_nodes.push_back(std::move(api_device));
          }
          return NodeDeviceKind(
              VfioPassthroughDevice{.bus_id = bus_id, .uuid = VfioDeviceUuid(bus_id), .device_node = std::move(node)});
        }
        const auto& slot = std::get<DynamicMigSlot>(state_kind);
        ASSIGN_OR_RETURN(const LiveMig live, dynamic_mig_->Create(slot.parent, slot.profile, slot.placement));
        MigDeviceInfo& info = created.emplace_back();
        info.uuid = live.uuid;
        info.profile = slot.profile.name.ToString();
        info.gi = slot.profile.gi;
        info.gi_id = live.gi_id;
        info.ci_id = live.ci_id;
        info.placement = live.placement;
        return NodeDeviceKind(MigSliceDevice{slot.parent, info});
      };
      ASSIGN_OR_RETURN(const NodeDeviceKind kind, made());
      auto attributes = device_metadata_.find(allocated.device);
      group.devices.push_back(Entry(kind, allocated, GpuCdi::ClaimDeviceId(claim.ref.uid, allocated.device),
                                    attributes == device_metadata_.end() ? nullptr : &attributes->second));
      spec_devices.push_back(ClaimDevice{.name = allocated.device, .kind = kind, .extra_edits = device_edits});
      held.insert(allocated.device);
    }
    // Exclusive use applies nothing: the config state stays empty.
    const std::optional<api::Sharing> sharing = api::SharingOf(configured.config);
    if (const auto* time_slicing = sharing ? std::get_if<api::TimeSlicing>(&*sharing) : nullptr) {
      const std::map<std::string, std::string> gpus = TimeSlicedGpus(configured);
      for (const auto& [name, uuid] : gpus) {
        RETURN_IF_ERROR(compute_policy_.SetComputeMode(uuid, ComputeMode::kDefault));
        common::CrashPoint("prepare-after-compute-mode");
        RETURN_IF_ERROR(compute_policy_.SetTimeSlice(uuid, time_slicing->interval));
        common::CrashPoint("prepare-after-time-slice");
      }
      // MIG devices only: accepted, nothing applied (upstream's no-op).
      if (!gpus.empty()) config_state.time_slice_applied = true;
    }
    groups.push_back(std::move(group));
  }
  if (!daemons_not_ready.empty()) {
    return common::UnavailableError(fmt::format("waiting for the MPS control daemon Deployment {} to be Ready",
                                                fmt::join(daemons_not_ready, ", ")));
  }
  common::CrashPoint("prepare-before-cdi-write");
  RETURN_IF_ERROR(cdi_.WriteClaimSpec(claim.ref.uid, spec_devices));
  common::CrashPoint("prepare-after-cdi-write");
  NoteHeld(claim.ref.uid, std::move(held));
  return groups;
}

std::optional<MpsDaemonSpec> GpuDeviceState::MpsSpecOf(const std::string& claim_uid,
                                                       const api::ConfiguredResults& group) const {
  const std::optional<api::Sharing> sharing = api::SharingOf(group.config);
  const auto* mps = sharing ? std::get_if<api::MpsSharing>(&*sharing) : nullptr;
  if (mps == nullptr) return std::nullopt;
  MpsDaemonSpec spec{.claim_uid = claim_uid, .device_uuids = {}, .gpu_uuids = {}, .gpus_without_volta = {},
                     .settings = *mps};
  auto add_gpu = [&spec](const GpuInfo& gpu) {
    if (std::find(spec.gpu_uuids.begin(), spec.gpu_uuids.end(), gpu.uuid) != spec.gpu_uuids.end()) return;
    spec.gpu_uuids.push_back(gpu.uuid);
    // Compute capability "major.minor": Volta is 7.0.
    if (std::atoi(gpu.cuda_compute_capability.c_str()) < 7) spec.gpus_without_volta.push_back(gpu.uuid);
  };
  for (const api::AllocatedDevice& allocated : group.results) {
    auto it = devices_.find(allocated.device);
    if (it == devices_.end()) continue;
    std::visit(common::Overloaded{
                   [&](const FullGpuDevice& gpu) {
                     spec.device_uuids.push_back(gpu.gpu.uuid);
                     add_gpu(gpu.gpu);
                   },
                   [&](const MigSliceDevice& slice) {
                     spec.device_uuids.push_back(slice.mig.uuid);
                     add_gpu(slice.parent);
                   },
                   // MPSSupport and DynamicMIG exclude each other (feature gates).
                   [&](const DynamicMigSlot& slot) { add_gpu(slot.parent); },
                   // A VfioDeviceConfig's group never asks for MPS.
                   [](const VfioSlot&) {},
               },
               it->second);
  }
  return spec;
}

Status GpuDeviceState::RollBackLeftover(const kubeletplugin::RecordedClaim& claim) {
  // Dynamic MIG devices are destroyed (the next attempt makes them again;
  // a placement someone else holds is then an error, not taken over). The
  // rest is kept: PrepareDevices redoes each step idempotently (same claim
  // UID, same allocation), and undoing would delete the MPS daemon the claim
  // waits for.
  return DestroyDynamicMigOf(claim);
}

Status GpuDeviceState::DestroyDynamicMigOf(const kubeletplugin::RecordedClaim& claim) {
  if (dynamic_mig_ == nullptr || !claim.view.ok()) return common::OkStatus();
  for (const api::ConfiguredResults& group : claim.view->groups) {
    for (const api::AllocatedDevice& allocated : group.results) {
      auto it = devices_.find(allocated.device);
      const auto* slot = it == devices_.end() ? nullptr : std::get_if<DynamicMigSlot>(&it->second);
      if (slot == nullptr || claim.held_by_other_claims.contains(allocated.device)) continue;
      ASSIGN_OR_RETURN(const std::optional<LiveMig> live, dynamic_mig_->FindAt(slot->parent, slot->profile, slot->placement));
      if (live) RETURN_IF_ERROR(dynamic_mig_->Destroy(slot->parent, live->gi_id));
    }
  }
  return common::OkStatus();
}

bool GpuDeviceState::AwaitRetry(const kubeletplugin::ClaimView& claim, const Status& failure,
                                std::chrono::steady_clock::time_point deadline) {
  (void)failure;
  if (mps_ == nullptr) return false;
  std::vector<std::string> ids;
  for (const api::ConfiguredResults& group : claim.groups) {
    if (std::optional<MpsDaemonSpec> spec = MpsSpecOf(claim.ref.uid, group)) {
      ids.push_back(MpsDaemons::DaemonId(spec->claim_uid, spec->device_uuids));
    }
  }
  return !ids.empty() && mps_->WaitReady(ids, deadline);
}

Status GpuDeviceState::SweepLeftovers(const kubeletplugin::Checkpoint& checkpoint) {
  Status first_error = common::OkStatus();
  if (mps_ != nullptr) {
    std::set<std::string> uids;
    for (const auto& [uid, entry] : checkpoint.claims) uids.insert(uid);
    StatusOr<int> removed = mps_->Sweep(uids);
    if (!removed.ok()) {
      first_error = removed.status();
    } else if (*removed > 0) {
      LOG_INFO(0, "removed MPS control daemons of claims not in the checkpoint", {{"count", *removed}});
    }
  }
  if (vfio_ != nullptr) {
    // What completed claims hold (withdrawn siblings included); GPUs the
    // plugin bound for anything else go back to nvidia.
    held_.clear();
    std::set<std::string> passed_through;
    for (const auto& [uid, entry] : checkpoint.claims) {
      if (entry.state != kubeletplugin::ClaimCheckpointState::kPrepareCompleted) continue;
      std::set<std::string>& devices = held_[uid];
      for (const PreparedDeviceGroup& group : entry.prepared_devices) {
        for (const kubeletplugin::PreparedDeviceEntry& device : group.devices) {
          devices.insert(device.device.device.device_name);
          if (const auto* vfio = std::get_if<kubeletplugin::PreparedVfio>(&device.kind)) {
            passed_through.insert(vfio->pci_bus_id.empty() ? BusIdOf(device.device.device.device_name) : vfio->pci_bus_id);
          }
        }
      }
    }
    StatusOr<int> released = vfio_->ReleaseAllBut(passed_through);
    if (!released.ok()) {
      if (first_error.ok()) first_error = released.status();
    } else if (*released > 0) {
      LOG_INFO(0, "gave GPUs that no prepared claim passes through back to nvidia", {{"count", *released}});
    }
    if (on_withdrawn_changed_) on_withdrawn_changed_(Withdrawn());
  }
  if (fabric_ != nullptr) {
    if (Status synced = SyncFabricPartitions(checkpoint); !synced.ok() && first_error.ok()) first_error = synced;
  }
  if (dynamic_mig_ != nullptr) {
    // Instances completed claims hold stay; anything else (a leftover of a
    // failed or crashed Prepare, or made by hand) goes, as upstream.
    std::set<std::pair<std::string, std::uint32_t>> keep;
    for (const auto& [uid, entry] : checkpoint.claims) {
      if (entry.state != kubeletplugin::ClaimCheckpointState::kPrepareCompleted) continue;
      for (const PreparedDeviceGroup& group : entry.prepared_devices) {
        for (const kubeletplugin::PreparedDeviceEntry& device : group.devices) {
          if (const auto* mig = std::get_if<kubeletplugin::PreparedMig>(&device.kind)) {
            keep.insert({mig->parent_uuid, static_cast<std::uint32_t>(mig->gi_id)});
          }
        }
      }
    }
    StatusOr<int> destroyed = dynamic_mig_->Sweep(inventory_.gpus, keep);
    if (!destroyed.ok()) {
      if (first_error.ok()) first_error = destroyed.status();
    } else if (*destroyed > 0) {
      LOG_INFO(0, "destroyed MIG devices no completed claim holds", {{"count", *destroyed}});
    }
  }
  return first_error;
}

std::map<std::string, std::string> GpuDeviceState::TimeSlicedGpus(const api::ConfiguredResults& group) const {
  std::map<std::string, std::string> uuids;
  const std::optional<api::Sharing> sharing = api::SharingOf(group.config);
  if (!sharing || !std::holds_alternative<api::TimeSlicing>(*sharing)) return uuids;
  for (const api::AllocatedDevice& allocated : group.results) {
    auto it = devices_.find(allocated.device);
    if (it == devices_.end()) continue;
    if (const auto* gpu = std::get_if<FullGpuDevice>(&it->second)) uuids.emplace(allocated.device, gpu->gpu.uuid);
  }
  return uuids;
}

Status GpuDeviceState::SyncFabricPartitions(const kubeletplugin::Checkpoint& checkpoint) {
  std::set<std::uint32_t> needed;
  for (const auto& [uid, entry] : checkpoint.claims) {
    if (entry.state != kubeletplugin::ClaimCheckpointState::kPrepareCompleted) continue;
    if (std::optional<std::set<std::uint32_t>> ids = RecordedPartitions(entry)) needed.merge(*ids);
  }
  ASSIGN_OR_RETURN(const std::set<std::uint32_t> active, fabric_->ActiveNow());
  // Deactivations first: a needed partition may share GPUs with a leftover.
  for (std::uint32_t id : active) {
    if (needed.contains(id)) continue;
    LOG_INFO(0, "Fabric Manager: deactivating a partition no prepared claim holds", {{"partition", id}});
    RETURN_IF_ERROR(fabric_->Deactivate(id));
  }
  for (std::uint32_t id : needed) {
    if (active.contains(id)) continue;
    LOG_WARNING("Fabric Manager: a prepared claim's partition is not active (Fabric Manager restarted?); activating it",
                {{"partition", id}});
    RETURN_IF_ERROR(fabric_->Activate(id));
  }
  return common::OkStatus();
}

Status GpuDeviceState::DeactivateFabricPartitionOf(const kubeletplugin::RecordedClaim& claim) {
  std::set<std::uint32_t> ids = RecordedPartitions(claim.entry).value_or(std::set<std::uint32_t>());
  // A PrepareStarted leftover: what its allocation may have activated (a
  // crash may have come after the activation).
  if (claim.entry.state == kubeletplugin::ClaimCheckpointState::kPrepareStarted && claim.view.ok()) {
    StatusOr<ClaimFabricPlan> plan = PlanClaimFabric(*claim.view, /*check_figures=*/false);
    if (!plan.ok()) {
      // Nothing this claim could have activated.
      LOG_WARNING("Fabric Manager: no partition to deactivate for the claim",
                  {{"claim", claim.ref.uid}, {"reason", plan.status().message()}});
    } else {
      for (const std::vector<std::uint32_t>& group_ids : plan->per_group) ids.insert(group_ids.begin(), group_ids.end());
    }
  }
  if (ids.empty()) return common::OkStatus();
  std::vector<std::string> names;
  for (const PreparedDeviceGroup& group : claim.entry.prepared_devices) {
    for (const kubeletplugin::PreparedDeviceEntry& entry : group.devices) names.push_back(entry.device.device.device_name);
  }
  if (claim.view.ok()) {
    for (const api::ConfiguredResults& group : claim.view->groups) {
      for (const api::AllocatedDevice& allocated : group.results) names.push_back(allocated.device);
    }
  }
  for (const std::string& name : names) {
    // Shared under consumable shares: the partition stays for the other claim.
    if (WholeGpuOf(name) != nullptr && claim.held_by_other_claims.contains(name)) return common::OkStatus();
  }
  for (std::uint32_t id : ids) RETURN_IF_ERROR(fabric_->Deactivate(id));
  return common::OkStatus();
}

Status GpuDeviceState::UnprepareDevices(const kubeletplugin::RecordedClaim& claim) {
  // The GPUs whose time slice this claim changed, or may have changed, by
  // device name.
  std::map<std::string, std::string> time_sliced;
  for (const PreparedDeviceGroup& group : claim.entry.prepared_devices) {
    const auto* state = std::get_if<kubeletplugin::GpuConfigState>(&group.config_state);
    if (state == nullptr || state->time_slice_applied != true) continue;
    for (const kubeletplugin::PreparedDeviceEntry& entry : group.devices) {
      if (const auto* gpu = std::get_if<kubeletplugin::PreparedGpu>(&entry.kind)) {
        time_sliced.emplace(entry.device.device.device_name, gpu->uuid);
      }
    }
  }
  if (claim.entry.state == kubeletplugin::ClaimCheckpointState::kPrepareStarted && claim.view.ok()) {
    for (const api::ConfiguredResults& group : claim.view->groups) time_sliced.merge(TimeSlicedGpus(group));
  }
  // MPS daemons: those the entry records, and for a PrepareStarted leftover
  // those its allocation may have started.
  std::set<std::string> daemons;
  for (const PreparedDeviceGroup& group : claim.entry.prepared_devices) {
    const auto* state = std::get_if<kubeletplugin::GpuConfigState>(&group.config_state);
    if (state != nullptr && !state->mps_control_daemon_id.empty()) daemons.insert(state->mps_control_daemon_id);
  }
  if (claim.entry.state == kubeletplugin::ClaimCheckpointState::kPrepareStarted && claim.view.ok()) {
    for (const api::ConfiguredResults& group : claim.view->groups) {
      if (std::optional<MpsDaemonSpec> spec = MpsSpecOf(claim.ref.uid, group)) {
        daemons.insert(MpsDaemons::DaemonId(spec->claim_uid, spec->device_uuids));
      }
    }
  }
  // Dynamic MIG devices: those the entry records, or for a PrepareStarted
  // leftover those at its allocation's placements.
  if (dynamic_mig_ != nullptr) {
    for (const PreparedDeviceGroup& group : claim.entry.prepared_devices) {
      for (const kubeletplugin::PreparedDeviceEntry& entry : group.devices) {
        const auto* mig = std::get_if<kubeletplugin::PreparedMig>(&entry.kind);
        auto it = devices_.find(entry.device.device.device_name);
        const auto* slot = it == devices_.end() ? nullptr : std::get_if<DynamicMigSlot>(&it->second);
        if (mig == nullptr || slot == nullptr || claim.held_by_other_claims.contains(it->first)) continue;
        RETURN_IF_ERROR(dynamic_mig_->Destroy(slot->parent, static_cast<std::uint32_t>(mig->gi_id)));
      }
    }
    if (claim.entry.state == kubeletplugin::ClaimCheckpointState::kPrepareStarted) {
      RETURN_IF_ERROR(DestroyDynamicMigOf(claim));
    }
  }
  // GPUs passed through: the entry's, or a PrepareStarted leftover's
  // allocation (a crash may have come after the bind).
  if (vfio_ != nullptr) {
    std::set<std::string> passed_through;
    for (const PreparedDeviceGroup& group : claim.entry.prepared_devices) {
      for (const kubeletplugin::PreparedDeviceEntry& entry : group.devices) {
        if (const auto* vfio = std::get_if<kubeletplugin::PreparedVfio>(&entry.kind)) {
          passed_through.insert(vfio->pci_bus_id.empty() ? BusIdOf(entry.device.device.device_name) : vfio->pci_bus_id);
        }
      }
    }
    if (claim.entry.state == kubeletplugin::ClaimCheckpointState::kPrepareStarted && claim.view.ok()) {
      for (const api::ConfiguredResults& group : claim.view->groups) {
        for (const api::AllocatedDevice& allocated : group.results) {
          auto it = devices_.find(allocated.device);
          if (it != devices_.end() && std::holds_alternative<VfioSlot>(it->second)) {
            passed_through.insert(BusIdOf(allocated.device));
          }
        }
      }
    }
    for (const std::string& bus_id : passed_through) {
      if (!bus_id.empty()) RETURN_IF_ERROR(vfio_->Release(bus_id));
    }
  }
  if (fabric_ != nullptr) RETURN_IF_ERROR(DeactivateFabricPartitionOf(claim));
  for (const std::string& id : daemons) {
    if (mps_ == nullptr) {
      LOG_ERROR("cannot stop an MPS control daemon: MPSSupport is off on this plugin; delete its Deployment by hand",
                {{"deployment", MpsDaemons::DeploymentName(id)}});
      continue;
    }
    RETURN_IF_ERROR(mps_->Stop(id));
  }
  // The interval goes back to the default unless another prepared claim
  // still holds the GPU (shared under consumable shares, with the same
  // config: its interval stays).
  for (const auto& [name, uuid] : time_sliced) {
    if (claim.held_by_other_claims.contains(name)) continue;
    RETURN_IF_ERROR(compute_policy_.SetTimeSlice(uuid, api::TimeSliceInterval::kDefault));
  }
  RETURN_IF_ERROR(cdi_.RemoveClaimSpec(claim.ref.uid));
  NoteHeld(claim.ref.uid, {});
  return common::OkStatus();
}

}  // namespace nvdra::gpu
