#include "gpu/device_state.h"

#include <utility>

#include <fmt/format.h>

#include "api/opaque_config.h"
#include "common/crash_point.h"
#include "common/log.h"
#include "gpu/mig_profile.h"

namespace nvdra::gpu {

using common::Status;
using common::StatusOr;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

std::string StringAt(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The "device" object of a checkpoint entry: kubeletplugin.Device with
// upstream's capitalised keys (ShareID and Metadata are omitted when empty).
ordered_json CheckpointedDevice(const json& result, const std::string& cdi_id) {
  ordered_json device = ordered_json::object();
  device["Requests"] = ordered_json::array({StringAt(result, "request")});
  device["PoolName"] = StringAt(result, "pool");
  device["DeviceName"] = StringAt(result, "device");
  device["CDIDeviceIDs"] = ordered_json::array({cdi_id});
  return device;
}

}  // namespace

GpuDeviceState::GpuDeviceState(NodeInventory inventory, const GpuCdi& cdi)
    : inventory_(std::move(inventory)), cdi_(cdi) {
  for (const GpuInfo& gpu : inventory_.gpus) {
    if (!gpu.mig_enabled) {
      const std::string name = GpuDeviceName(gpu.minor);
      devices_[name] = AllocatableDevice{name, &gpu, nullptr};
      continue;
    }
    for (const MigDeviceInfo& mig : gpu.mig_devices) {
      const std::string name = MigDeviceName(gpu.minor, mig.profile, mig.gi.id, mig.placement.start);
      devices_[name] = AllocatableDevice{name, &gpu, &mig};
    }
  }
}

StatusOr<ordered_json> GpuDeviceState::PrepareDevices(const ordered_json& claim) {
  const std::string uid = claim["metadata"].value("uid", "");
  // The config logic works on plain JSON; order only matters for the
  // checkpoint's copy of the status, which the ClaimPreparer keeps.
  const json allocation_devices = json::parse(claim["status"]["allocation"]["devices"].dump());
  auto kind_of_device = [this](const std::string& name) -> StatusOr<api::ConfigKind> {
    auto it = devices_.find(name);
    if (it == devices_.end()) {
      return common::NotFoundError(fmt::format(
          "device {} is not on this node (it may have disappeared since it was published)", name));
    }
    return it->second.mig != nullptr ? api::ConfigKind::kMigDeviceConfig : api::ConfigKind::kGpuConfig;
  };
  ASSIGN_OR_RETURN(std::vector<api::ConfiguredResults> groups,
                   api::ResolveDeviceConfigs(allocation_devices, kDriverName,
                                             {api::ConfigKind::kGpuConfig, api::ConfigKind::kMigDeviceConfig},
                                             kind_of_device));

  ordered_json checkpoint_groups = ordered_json::array();
  std::vector<ClaimDevice> spec_devices;
  for (const api::ConfiguredResults& group : groups) {
    RETURN_IF_ERROR(api::ValidateConfig(group.config, group.source));
    ordered_json entries = ordered_json::array();
    for (const json& result : group.results) {
      const AllocatableDevice& device = devices_.at(StringAt(result, "device"));
      const std::string cdi_id = GpuCdi::ClaimDeviceId(uid, device.name);
      ordered_json entry = ordered_json::object();
      if (device.mig == nullptr) {
        ordered_json gpu = ordered_json::object();
        gpu["info"] = ordered_json{{"uuid", device.gpu->uuid}};
        gpu["device"] = CheckpointedDevice(result, cdi_id);
        entry["gpu"] = std::move(gpu);
        entry["mig"] = nullptr;
      } else {
        ordered_json concrete = ordered_json::object();
        concrete["parentMinor"] = device.gpu->minor;
        concrete["giId"] = device.mig->gi_id;
        concrete["ciId"] = device.mig->ci_id;
        concrete["migUUID"] = device.mig->uuid;
        concrete["parentUUID"] = device.gpu->uuid;
        if (!device.gpu->pci.bus_id.empty()) concrete["parentPCIBusID"] = device.gpu->pci.bus_id;
        ordered_json mig = ordered_json::object();
        mig["concrete"] = std::move(concrete);
        mig["device"] = CheckpointedDevice(result, cdi_id);
        entry["gpu"] = nullptr;
        entry["mig"] = std::move(mig);
      }
      entries.push_back(std::move(entry));
      spec_devices.push_back(ClaimDevice{device.name, device.gpu, device.mig});
    }
    ordered_json checkpoint_group = ordered_json::object();
    checkpoint_group["devices"] = std::move(entries);
    checkpoint_group["configState"] = ordered_json::object();  // exclusive use: nothing applied
    checkpoint_groups.push_back(std::move(checkpoint_group));
  }
  common::CrashPoint("prepare-before-cdi-write");
  RETURN_IF_ERROR(cdi_.WriteClaimSpec(uid, spec_devices));
  common::CrashPoint("prepare-after-cdi-write");
  return checkpoint_groups;
}

Status GpuDeviceState::UnprepareDevices(const std::string& claim_uid, const kubeletplugin::CheckpointedClaim&) {
  // Full GPUs and static MIG devices keep no state beyond the CDI spec.
  return cdi_.RemoveClaimSpec(claim_uid);
}

}  // namespace nvdra::gpu
