#include "computedomain/cdi.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace nvdra::computedomain {

namespace fs = std::filesystem;
using common::Status;
using common::StatusOr;
using kubeletplugin::CdiContainerEdits;
using kubeletplugin::CdiDeviceNode;

std::string BaseSpecDeviceId() { return kubeletplugin::QualifiedCdiDeviceName(kCdCdiVendor, kDeviceClass, "all"); }

CdCdi::CdCdi(CdCdiOptions options) : options_(std::move(options)), writer_(options_.cdi_root) {}

Status CdCdi::WriteBaseSpec() const {
  drivercdi::CommonEditsOptions common_options;
  common_options.roots = options_.roots;
  common_options.driver_version = options_.driver_version;
  common_options.hook_path = options_.hook_path;
  ASSIGN_OR_RETURN(CdiContainerEdits common, drivercdi::BuildCommonEdits(common_options));

  // Channel nodes the host already has (management mode lists them).
  const fs::path dev_root =
      options_.roots.dev_root.empty() ? drivercdi::DevRootFor(options_.roots.container_driver_root) : options_.roots.dev_root;
  std::error_code ec;
  std::vector<std::string> channels;
  for (const auto& entry : fs::directory_iterator(dev_root / "dev" / kImexChannelsDevice, ec)) {
    channels.push_back(entry.path().filename().string());
  }
  std::sort(channels.begin(), channels.end());
  for (const std::string& name : channels) {
    CdiDeviceNode node;
    node.path = fmt::format("/dev/{}/{}", kImexChannelsDevice, name);
    node.host_path = (dev_root / "dev" / kImexChannelsDevice / name).string();
    common.device_nodes.push_back(std::move(node));
  }

  kubeletplugin::CdiDevice all;
  all.name = "all";
  for (unsigned minor : options_.gpu_minors) all.container_edits.Append(drivercdi::FullGpuEdits(minor, options_.roots));
  drivercdi::ToHostPaths(all.container_edits, options_.roots);
  drivercdi::ToHostPaths(common, options_.roots);

  kubeletplugin::CdiSpec spec;
  spec.kind = kubeletplugin::CdiKind(kCdCdiVendor, kDeviceClass);
  spec.container_edits = std::move(common);
  spec.devices.push_back(std::move(all));
  return writer_.Write(spec, kubeletplugin::TransientCdiSpecFileName(kCdCdiVendor, kDeviceClass, "base"));
}

std::string CdCdi::ClaimDeviceId(std::string_view claim_uid, std::string_view device_name) {
  return kubeletplugin::ClaimCdiDeviceId(kCdCdiVendor, claim_uid, device_name);
}

StatusOr<CdiContainerEdits> CdCdi::ChannelEdits(const std::vector<int>& channel_ids) const {
  ASSIGN_OR_RETURN(const std::int64_t major,
                   drivercdi::ReadCharDeviceMajor(options_.proc.devices_file(), kImexChannelsDevice));
  CdiContainerEdits edits;
  edits.device_nodes.reserve(channel_ids.size());
  for (int id : channel_ids) {
    CdiDeviceNode node;
    node.path = fmt::format("/dev/{}/channel{}", kImexChannelsDevice, id);
    node.type = "c";
    node.major = major;
    node.minor = id;
    node.file_mode = 0666;
    edits.device_nodes.push_back(std::move(node));
  }
  return edits;
}

StatusOr<CdiContainerEdits> CdCdi::ImexManagementEdits() const {
  ASSIGN_OR_RETURN(const std::int64_t major, drivercdi::ReadCharDeviceMajor(options_.proc.devices_file(), "nvidia-caps"));
  ASSIGN_OR_RETURN(const drivercdi::NvCapDeviceInfo cap,
                   drivercdi::ParseNvCapFile(options_.proc.capabilities_dir() / "fabric-imex-mgmt"));
  CdiContainerEdits edits;
  edits.device_nodes.push_back(drivercdi::CapDeviceNode(major, cap));
  return edits;
}

Status CdCdi::WriteClaimSpec(std::string_view claim_uid, const std::vector<CdClaimDevice>& devices) const {
  kubeletplugin::CdiSpec spec;
  spec.kind = kubeletplugin::CdiKind(kCdCdiVendor, kubeletplugin::kCdiClaimClass);
  for (const CdClaimDevice& device : devices) {
    if (device.edits.empty()) continue;
    kubeletplugin::CdiDevice entry;
    entry.name = kubeletplugin::ClaimCdiDeviceName(claim_uid, device.name);
    entry.container_edits = device.edits;
    spec.devices.push_back(std::move(entry));
  }
  if (spec.devices.empty()) return RemoveClaimSpec(claim_uid);
  return writer_.Write(spec, kubeletplugin::ClaimCdiSpecFileName(kCdCdiVendor, claim_uid));
}

Status CdCdi::RemoveClaimSpec(std::string_view claim_uid) const {
  return writer_.Remove(kubeletplugin::ClaimCdiSpecFileName(kCdCdiVendor, claim_uid));
}

common::StatusOr<int> CdCdi::RemoveOrphanedClaimSpecs(const std::set<std::string>& keep) const {
  return writer_.RemoveClaimSpecsExcept(kCdCdiVendor, keep);
}

}  // namespace nvdra::computedomain
