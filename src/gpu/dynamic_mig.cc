#include "gpu/dynamic_mig.h"

#include <fmt/format.h>

#include "common/crash_point.h"
#include "common/log.h"

namespace nvdra::gpu {

using common::Status;
using common::StatusOr;
namespace abi = nvml::abi;

namespace {

// GPUs that switch MIG mode without a reset (upstream's rule for DynamicMIG).
bool SwitchesMigWithoutReset(const GpuInfo& gpu) {
  return gpu.architecture == "Hopper" || gpu.architecture == "Blackwell" || gpu.architecture == "Rubin";
}

// The GPU-instance profile ids of a GPU, once each (a profile can be listed
// with several compute-instance variants).
std::set<std::uint32_t> GiProfileIds(const GpuInfo& gpu) {
  std::set<std::uint32_t> ids;
  for (const MigProfileInfo& profile : gpu.mig_profiles) ids.insert(profile.gi.id);
  return ids;
}

// Every GPU instance of `device`, with its info.
StatusOr<std::vector<abi::nvmlGpuInstanceInfo_t>> GpuInstancesOf(const GpuInfo& gpu, const nvml::Device& device) {
  std::vector<abi::nvmlGpuInstanceInfo_t> out;
  for (std::uint32_t profile_id : GiProfileIds(gpu)) {
    ASSIGN_OR_RETURN(std::vector<nvml::GpuInstance> instances, device.GpuInstances(profile_id));
    for (const nvml::GpuInstance& instance : instances) {
      ASSIGN_OR_RETURN(abi::nvmlGpuInstanceInfo_t info, instance.Info());
      out.push_back(info);
    }
  }
  return out;
}

// The UUID of the MIG device of GI `gi_id` / CI `ci_id`.
StatusOr<std::string> MigUuid(const nvml::Device& device, std::uint32_t gi_id, std::uint32_t ci_id) {
  ASSIGN_OR_RETURN(std::uint32_t count, device.MaxMigDeviceCount());
  for (std::uint32_t i = 0; i < count; ++i) {
    StatusOr<nvml::Device> mig = device.MigDeviceByIndex(i);
    if (!mig.ok()) {
      if (mig.status().code() == common::StatusCode::kNotFound) continue;
      return mig.status();
    }
    ASSIGN_OR_RETURN(std::uint32_t gi, mig->GpuInstanceId());
    ASSIGN_OR_RETURN(std::uint32_t ci, mig->ComputeInstanceId());
    if (gi == gi_id && ci == ci_id) return mig->Uuid();
  }
  return common::NotFoundError(fmt::format("no MIG device for GPU instance {} / compute instance {}", gi_id, ci_id));
}

}  // namespace

StatusOr<std::optional<LiveMig>> DynamicMig::FindAt(const GpuInfo& parent, const MigProfileInfo& profile,
                                                    nvml::GpuInstancePlacement placement) const {
  ASSIGN_OR_RETURN(nvml::Device device, nvml_.DeviceByUuid(parent.uuid));
  ASSIGN_OR_RETURN(nvml::MigMode mode, device.GetMigMode());
  if (!mode.current) return std::optional<LiveMig>();
  ASSIGN_OR_RETURN(std::vector<nvml::GpuInstance> instances, device.GpuInstances(profile.gi.id));
  for (const nvml::GpuInstance& instance : instances) {
    ASSIGN_OR_RETURN(abi::nvmlGpuInstanceInfo_t info, instance.Info());
    if (info.placement.start != placement.start) continue;
    LiveMig live{.parent_uuid = parent.uuid,
                 .gi_id = info.id,
                 .ci_id = 0,
                 .gi_profile_id = info.profileId,
                 .placement = {info.placement.start, info.placement.size},
                 .uuid = ""};
    return std::optional<LiveMig>(live);
  }
  return std::optional<LiveMig>();
}

StatusOr<LiveMig> DynamicMig::Create(const GpuInfo& parent, const MigProfileInfo& profile,
                                     nvml::GpuInstancePlacement placement) const {
  ASSIGN_OR_RETURN(nvml::Device device, nvml_.DeviceByUuid(parent.uuid));
  ASSIGN_OR_RETURN(nvml::MigMode mode, device.GetMigMode());
  if (!mode.current) {
    LOG_INFO(2, "enabling MIG mode for a dynamic MIG device", {{"gpu", parent.uuid}});
    RETURN_IF_ERROR(device.SetMigMode(true).WithContext(fmt::format("enabling MIG mode on {}", parent.uuid)));
  }
  // Another instance on these memory slices: not ours to take or destroy.
  ASSIGN_OR_RETURN(std::vector<abi::nvmlGpuInstanceInfo_t> existing, GpuInstancesOf(parent, device));
  for (const abi::nvmlGpuInstanceInfo_t& info : existing) {
    const std::uint32_t end = placement.start + placement.size;
    const std::uint32_t other_end = info.placement.start + info.placement.size;
    if (info.placement.start < end && placement.start < other_end) {
      return common::FailedPreconditionError(fmt::format(
          "GPU {}: memory slices {}..{} are held by GPU instance {} (profile {}, slices {}..{}) that no prepared "
          "claim of this node made; destroy it (nvidia-smi mig -dci -gi {} -i {}; nvidia-smi mig -dgi -gi {} -i "
          "{}) or let the plugin's start-up clean-up remove it",
          parent.uuid, placement.start, end - 1, info.id, info.profileId, info.placement.start, other_end - 1,
          info.id, parent.index, info.id, parent.index));
    }
  }
  ASSIGN_OR_RETURN(nvml::GpuInstance gi, device.CreateGpuInstance(profile.gi.id, placement));
  ASSIGN_OR_RETURN(abi::nvmlGpuInstanceInfo_t gi_info, gi.Info());
  common::CrashPoint("mig-after-gi");
  StatusOr<nvml::ComputeInstanceProfile> ci_profile = gi.GetComputeInstanceProfile(profile.ci_profile_index);
  StatusOr<nvml::ComputeInstance> ci =
      ci_profile.ok() ? gi.CreateComputeInstance(ci_profile->id) : StatusOr<nvml::ComputeInstance>(ci_profile.status());
  if (!ci.ok()) {
    (void)gi.Destroy();  // nothing half-made stays
    return ci.status().WithContext(fmt::format("creating the compute instance on GPU instance {} of {}", gi_info.id,
                                               parent.uuid));
  }
  common::CrashPoint("mig-after-ci");
  ASSIGN_OR_RETURN(abi::nvmlComputeInstanceInfo_t ci_info, ci->Info());
  ASSIGN_OR_RETURN(std::string uuid, MigUuid(device, gi_info.id, ci_info.id));
  LOG_INFO(2, "created a MIG device",
           {{"gpu", parent.uuid}, {"profile", profile.name.ToString()}, {"placement", placement.start},
            {"gi", gi_info.id}, {"ci", ci_info.id}, {"uuid", uuid}});
  return LiveMig{.parent_uuid = parent.uuid,
                 .gi_id = gi_info.id,
                 .ci_id = ci_info.id,
                 .gi_profile_id = gi_info.profileId,
                 .placement = {gi_info.placement.start, gi_info.placement.size},
                 .uuid = uuid};
}

Status DynamicMig::Destroy(const GpuInfo& parent, std::uint32_t gi_id) const {
  ASSIGN_OR_RETURN(nvml::Device device, nvml_.DeviceByUuid(parent.uuid));
  StatusOr<nvml::GpuInstance> gi = device.GpuInstanceById(gi_id);
  if (!gi.ok()) {
    // Gone already (a retried Unprepare), or MIG mode is off again.
    if (gi.status().code() != common::StatusCode::kNotFound && !nvml::IsNotSupported(gi.status()) &&
        gi.status().code() != common::StatusCode::kInvalidArgument) {
      return gi.status();
    }
  } else {
    for (const MigProfileInfo& profile : parent.mig_profiles) {
      StatusOr<nvml::ComputeInstanceProfile> ci_profile = gi->GetComputeInstanceProfile(profile.ci_profile_index);
      if (!ci_profile.ok()) continue;
      StatusOr<std::vector<nvml::ComputeInstance>> cis = gi->ComputeInstances(ci_profile->id);
      if (!cis.ok()) continue;
      for (const nvml::ComputeInstance& ci : *cis) RETURN_IF_ERROR(ci.Destroy());
    }
    RETURN_IF_ERROR(gi->Destroy().WithContext(fmt::format("destroying GPU instance {} of {}", gi_id, parent.uuid)));
    LOG_INFO(2, "destroyed a MIG device", {{"gpu", parent.uuid}, {"gi", gi_id}});
  }
  return DisableMigWhenEmpty(parent, device);
}

Status DynamicMig::DisableMigWhenEmpty(const GpuInfo& parent, const nvml::Device& device) const {
  if (!SwitchesMigWithoutReset(parent)) return common::OkStatus();
  ASSIGN_OR_RETURN(nvml::MigMode mode, device.GetMigMode());
  if (!mode.current) return common::OkStatus();
  ASSIGN_OR_RETURN(std::vector<abi::nvmlGpuInstanceInfo_t> left, GpuInstancesOf(parent, device));
  if (!left.empty()) return common::OkStatus();
  LOG_INFO(2, "disabling MIG mode: no MIG device left", {{"gpu", parent.uuid}});
  return device.SetMigMode(false).WithContext(fmt::format("disabling MIG mode on {}", parent.uuid));
}

StatusOr<int> DynamicMig::Sweep(const std::vector<GpuInfo>& gpus,
                                const std::set<std::pair<std::string, std::uint32_t>>& keep) const {
  int destroyed = 0;
  Status first_error = common::OkStatus();
  for (const GpuInfo& gpu : gpus) {
    if (!gpu.mig_capable) continue;
    StatusOr<nvml::Device> device = nvml_.DeviceByUuid(gpu.uuid);
    if (!device.ok()) {
      if (first_error.ok()) first_error = device.status();
      continue;
    }
    StatusOr<nvml::MigMode> mode = device->GetMigMode();
    if (!mode.ok() || !mode->current) continue;
    StatusOr<std::vector<abi::nvmlGpuInstanceInfo_t>> instances = GpuInstancesOf(gpu, *device);
    if (!instances.ok()) {
      if (first_error.ok()) first_error = instances.status();
      continue;
    }
    for (const abi::nvmlGpuInstanceInfo_t& info : *instances) {
      if (keep.contains({gpu.uuid, info.id})) continue;
      LOG_INFO(0, "destroying a MIG device no prepared claim holds",
               {{"gpu", gpu.uuid}, {"gi", info.id}, {"profile", info.profileId}, {"start", info.placement.start}});
      if (Status s = Destroy(gpu, info.id); !s.ok()) {
        if (first_error.ok()) first_error = s;
        continue;
      }
      ++destroyed;
    }
  }
  if (!first_error.ok()) return first_error;
  return destroyed;
}

}  // namespace nvdra::gpu
