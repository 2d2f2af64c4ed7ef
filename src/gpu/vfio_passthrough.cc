#include "gpu/vfio_passthrough.h"

#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "common/log.h"

namespace nvdra::gpu {

namespace fs = std::filesystem;
using common::Status;
using common::StatusOr;

StatusOr<VfioPassthrough> VfioPassthrough::Open(VfioPassthroughOptions options) {
  PciSysfs sysfs(options.host_root);
  RETURN_IF_ERROR(sysfs.CheckIommuEnabled());
  RETURN_IF_ERROR(sysfs.CheckDriverLoaded(kVfioPciDriver));
  ASSIGN_OR_RETURN(std::vector<PciGpuFunction> functions, sysfs.ListGpus());
  const bool iommufd = sysfs.IommufdAvailable();
  return VfioPassthrough(std::move(options), std::move(sysfs), std::move(functions), iommufd);
}

VfioPassthrough::VfioPassthrough(VfioPassthroughOptions options, PciSysfs sysfs,
                                 std::vector<PciGpuFunction> functions, bool iommufd)
    : options_(std::move(options)), sysfs_(std::move(sysfs)), functions_(std::move(functions)), iommufd_(iommufd) {}

std::set<std::string> VfioPassthrough::Recorded() const {
  StatusOr<std::string> text = common::ReadWholeFile(options_.record_file);
  if (!text.ok()) return {};
  const nlohmann::json record = nlohmann::json::parse(*text, nullptr, false);
  // Bindings of another boot are gone with it.
  if (!record.is_object() || record.value("bootID", "") != options_.boot_id) return {};
  std::set<std::string> out;
  if (auto it = record.find("boundByPlugin"); it != record.end() && it->is_array()) {
    for (const auto& bus_id : *it) {
      if (bus_id.is_string()) out.insert(bus_id.get<std::string>());
    }
  }
  return out;
}

Status VfioPassthrough::Record(const std::set<std::string>& bus_ids) const {
  const nlohmann::json record = {{"bootID", options_.boot_id}, {"boundByPlugin", bus_ids}};
  // Durable: a crash right after the bind must find the record.
  return common::ReplaceFile(options_.record_file, record.dump() + "\n", 0600, /*durable=*/true);
}

Status VfioPassthrough::Bind(const std::string& bus_id) {
  ASSIGN_OR_RETURN(const PciGpuFunction function, sysfs_.Read(bus_id));
  if (function.driver == kVfioPciDriver) return common::OkStatus();
  if (function.driver != kNvidiaPciDriver) {
    return common::FailedPreconditionError(fmt::format(
        "GPU {} is bound to driver \"{}\"; the plugin passes through GPUs on {} or {} only", bus_id,
        function.driver.empty() ? "none" : function.driver, kNvidiaPciDriver, kVfioPciDriver));
  }
  if (function.sriov_vfs > 0) {
    return common::FailedPreconditionError(fmt::format(
        "GPU {} has {} SR-IOV virtual functions and cannot be unbound: set its sriov_numvfs to 0 first", bus_id,
        function.sriov_vfs));
  }
  std::set<std::string> recorded = Recorded();
  recorded.insert(bus_id);
  RETURN_IF_ERROR(Record(recorded));
  RETURN_IF_ERROR(sysfs_.Rebind(bus_id, kVfioPciDriver));
  LOG_INFO(1, "GPU bound to vfio-pci", {{"pciBusID", bus_id}});
  return common::OkStatus();
}

Status VfioPassthrough::Release(const std::string& bus_id) {
  std::set<std::string> recorded = Recorded();
  if (!recorded.contains(bus_id)) {
    LOG_INFO(1, "GPU left on its driver: the plugin did not bind it", {{"pciBusID", bus_id}});
    return common::OkStatus();
  }
  RETURN_IF_ERROR(sysfs_.Rebind(bus_id, kNvidiaPciDriver));
  recorded.erase(bus_id);
  RETURN_IF_ERROR(Record(recorded));
  LOG_INFO(1, "GPU given back to nvidia", {{"pciBusID", bus_id}});
  return common::OkStatus();
}

StatusOr<int> VfioPassthrough::ReleaseAllBut(const std::set<std::string>& held) {
  const std::set<std::string> recorded = Recorded();
  if (recorded.empty()) {
    // Nothing of this boot: a record of an earlier boot goes.
    std::error_code ec;
    fs::remove(options_.record_file, ec);
    return 0;
  }
  int released = 0;
  for (const std::string& bus_id : recorded) {
    if (held.contains(bus_id)) continue;
    RETURN_IF_ERROR(Release(bus_id));
    ++released;
  }
  return released;
}

StatusOr<std::string> VfioPassthrough::DeviceNode(const std::string& bus_id, const api::VfioSettings& settings) const {
  ASSIGN_OR_RETURN(const PciGpuFunction function, sysfs_.Read(bus_id));
  if (settings.prefer_iommufd && iommufd_) {
    if (function.iommufd_device.empty()) {
      return common::FailedPreconditionError(fmt::format(
          "GPU {} has no IOMMUFD device (vfio-dev/vfio<n>) although the host has /dev/iommu; use "
          "iommu.backendPolicy LegacyOnly",
          bus_id));
    }
    return "/dev/vfio/devices/" + function.iommufd_device;
  }
  if (!function.iommu_group) {
    return common::FailedPreconditionError(fmt::format("GPU {} is in no IOMMU group; is the IOMMU on?", bus_id));
  }
  return fmt::format("/dev/vfio/{}", *function.iommu_group);
}

std::string VfioPassthrough::ApiDeviceNode(const api::VfioSettings& settings) const {
  return settings.prefer_iommufd && iommufd_ ? "/dev/iommu" : "/dev/vfio/vfio";
}

}  // namespace nvdra::gpu
