#include "gpu/claim_cdi.h"

#include <algorithm>
#include <utility>

#include "common/overloaded.h"

namespace nvdra::gpu {

using common::Status;
using common::StatusOr;

GpuCdi::GpuCdi(GpuCdiOptions options, drivercdi::DriverRoots roots, kubeletplugin::CdiContainerEdits common_edits)
    : options_(std::move(options)),
      roots_(std::move(roots)),
      common_edits_(std::move(common_edits)),
      writer_(options_.cdi_root) {}

StatusOr<std::unique_ptr<GpuCdi>> GpuCdi::Create(GpuCdiOptions options) {
  drivercdi::DriverRoots roots;
  roots.container_driver_root = options.container_driver_root;
  roots.host_driver_root = options.driver_root;
  drivercdi::CommonEditsOptions common_options;
  common_options.roots = roots;
  common_options.driver_version = options.driver_version;
  common_options.hook_path = options.hook_path;
  ASSIGN_OR_RETURN(kubeletplugin::CdiContainerEdits common_edits, drivercdi::BuildCommonEdits(common_options));
  return std::unique_ptr<GpuCdi>(new GpuCdi(std::move(options), std::move(roots), std::move(common_edits)));
}

std::string GpuCdi::ClaimDeviceId(const std::string& claim_uid, const std::string& device_name) {
  return kubeletplugin::ClaimCdiDeviceId(kGpuCdiVendor, claim_uid, device_name);
}

Status GpuCdi::WriteClaimSpec(const std::string& claim_uid, const std::vector<ClaimDevice>& devices) const {
  std::vector<drivercdi::ClaimCdiDevice> spec_devices;
  for (const ClaimDevice& device : devices) {
    drivercdi::ClaimCdiDevice entry;
    entry.canonical_name = device.name;
    ASSIGN_OR_RETURN(entry.edits,
                     std::visit(common::Overloaded{
                                    [&](const FullGpuDevice& gpu) -> StatusOr<kubeletplugin::CdiContainerEdits> {
                                      return drivercdi::FullGpuEdits(gpu.gpu.minor, roots_);
                                    },
                                    [&](const MigSliceDevice& slice) {
                                      return drivercdi::MigDeviceEdits(slice.parent.minor, slice.mig.gi_id, slice.mig.ci_id,
                                                            roots_, options_.proc);
                                    },
                                    [&](const VfioPassthroughDevice& vfio) -> StatusOr<kubeletplugin::CdiContainerEdits> {
                                      // Path only: the runtime reads type and numbers from the host's node.
                                      kubeletplugin::CdiContainerEdits edits;
                                      kubeletplugin::CdiDeviceNode node;
                                      node.path = vfio.device_node;
                                      edits.device_nodes.push_back(std::move(node));
                                      return edits;
                                    },
                                },
                                device.kind));
    entry.edits.Append(device.extra_edits);
    spec_devices.push_back(std::move(entry));
  }
  const bool vfio_only = !devices.empty() && std::all_of(devices.begin(), devices.end(), [](const ClaimDevice& d) {
    return std::holds_alternative<VfioPassthroughDevice>(d.kind);
  });
  kubeletplugin::CdiContainerEdits vfio_common;
  vfio_common.env.push_back("NVIDIA_VISIBLE_DEVICES=void");
  const kubeletplugin::CdiSpec spec = drivercdi::BuildClaimSpec(
      kGpuCdiVendor, claim_uid, vfio_only ? vfio_common : common_edits_, spec_devices, roots_);
  return writer_.Write(spec, kubeletplugin::ClaimCdiSpecFileName(kGpuCdiVendor, claim_uid));
}

Status GpuCdi::RemoveClaimSpec(const std::string& claim_uid) const {
  return writer_.Remove(kubeletplugin::ClaimCdiSpecFileName(kGpuCdiVendor, claim_uid));
}

StatusOr<int> GpuCdi::RemoveOrphanedClaimSpecs(const std::set<std::string>& keep) const {
  return writer_.RemoveClaimSpecsExcept(kGpuCdiVendor, keep);
}

}  // namespace nvdra::gpu
