#pragma once

// The GPU plugin's per-claim CDI specs on disk: one transient spec per claim,
// <cdi-root>/k8s.gpu.nvidia.com-claim_<claimUID>.yaml, with the driver's
// common edits (libraries, binaries, control nodes, hooks; computed once at
// start-up from the driver root) and each device's nodes. Built from the
// pure functions of drivercdi/driver_edits.h and kubeletplugin/cdi_spec.h.
//
// Ownership: owns the writer and the cached common edits.
// Thread-safety: const methods are thread-safe (each write is an atomic
// rename of its own file).

#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "common/status.h"
#include "drivercdi/driver_edits.h"
#include "gpu/discovery.h"
#include "kubeletplugin/cdi_spec.h"

namespace nvdra::gpu {

// "k8s.gpu.nvidia.com": the vendor of the GPU plugin's claim specs.
inline constexpr std::string_view kGpuCdiVendor = "k8s.gpu.nvidia.com";

struct GpuCdiOptions {
  std::filesystem::path cdi_root;                // --cdi-root
  std::filesystem::path driver_root;             // --nvidia-driver-root: the host's view
  std::filesystem::path container_driver_root;   // --container-driver-root: this process' view
  std::string driver_version;                    // from NVML, picks the libraries
  std::string hook_path;                         // nvidia-cdi-hook as the runtime runs it
  drivercdi::ProcPaths proc = drivercdi::ProcPathsFromEnvironment();   // /proc/devices, MIG capabilities
};

// A full GPU of this node.
struct FullGpuDevice {
  const GpuInfo& gpu;
};

// A static MIG device of this node and the GPU it lives on.
struct MigSliceDevice {
  const GpuInfo& parent;
  const MigDeviceInfo& mig;
};

// A GPU passed through with vfio-pci: the container gets its VFIO device
// node and none of the NVIDIA driver's files.
struct VfioPassthroughDevice {
  std::string bus_id;       // "0000:18:00.0"
  std::string uuid;         // VfioDeviceUuid(bus_id)
  std::string device_node;  // "/dev/vfio/<group>" or "/dev/vfio/devices/vfio<n>" (IOMMUFD)
};

// What a prepared device of this node is. Every std::visit over it fails to
// compile until it handles a new kind.
using NodeDeviceKind = std::variant<FullGpuDevice, MigSliceDevice, VfioPassthroughDevice>;

// A device of a claim.
struct ClaimDevice {
  std::string name;
  NodeDeviceKind kind;
  // Added to the device's own edits (the MPS daemon's pipes, for instance).
  kubeletplugin::CdiContainerEdits extra_edits{};
};

class GpuCdi {
 public:
  // Scans the driver root for the common edits; fails when it cannot be read.
  static common::StatusOr<std::unique_ptr<GpuCdi>> Create(GpuCdiOptions options);

  // "k8s.gpu.nvidia.com/claim=<uid>-<device>".
  static std::string ClaimDeviceId(const std::string& claim_uid, const std::string& device_name);

  // Writes (or replaces) the claim's spec. A claim of VFIO devices only gets
  // NVIDIA_VISIBLE_DEVICES=void instead of the driver's common edits, as
  // upstream's: a passed-through GPU is driven by the guest's own driver.
  common::Status WriteClaimSpec(const std::string& claim_uid, const std::vector<ClaimDevice>& devices) const;
  // Removes the claim's spec; a missing file is fine.
  common::Status RemoveClaimSpec(const std::string& claim_uid) const;

  // Removes the claim specs of claims not in `keep` (the checkpoint's): left
  // behind when the checkpoint was discarded after a reboot with a CDI root
  // on disk (/etc/cdi), or by hand. Returns how many were removed.
  common::StatusOr<int> RemoveOrphanedClaimSpecs(const std::set<std::string>& keep) const;

  const kubeletplugin::CdiContainerEdits& common_edits() const { return common_edits_; }

 private:
  GpuCdi(GpuCdiOptions options, drivercdi::DriverRoots roots, kubeletplugin::CdiContainerEdits common_edits);

  const GpuCdiOptions options_;
  const drivercdi::DriverRoots roots_;
  const kubeletplugin::CdiContainerEdits common_edits_;
  const kubeletplugin::CdiSpecWriter writer_;
};

}  // namespace nvdra::gpu
