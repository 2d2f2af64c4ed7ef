#pragma once

// The CDI edits of the NVIDIA driver installation that both kubelet plugins
// inject: the edits every claim gets (driver files, control device nodes,
// hooks; what nvidia-container-toolkit's nvcdi GetCommonEdits gives in "nvml"
// mode with nvsandboxutils off), the edits of one full GPU or MIG device,
// the nvidia-caps capability files and /proc/devices majors they are built
// from, and the per-claim spec that combines them with host paths
// (upstream's transform-root step).
//
// All functions are pure functions of their arguments and the file system
// below the roots they are given; nothing here reads the environment except
// ProcPathsFromEnvironment, which main() calls. Thread-safety: stateless
// functions, safe to call concurrently.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "kubeletplugin/cdi_spec.h"

namespace nvdra::drivercdi {

// How the driver installation is seen from this process and from the host.
struct DriverRoots {
  // Where this process sees the driver root (--container-driver-root).
  std::filesystem::path container_driver_root = "/driver-root";
  // Where the host (the container runtime) sees it (--nvidia-driver-root).
  std::filesystem::path host_driver_root = "/";
  // Where device nodes are looked up, in this process's view. Empty:
  // DevRootFor(container_driver_root).
  std::filesystem::path dev_root;
};

// The driver root when it has a dev/ folder (a containerized driver ships its
// own /dev view), "/" otherwise; upstream's getDevRoot.
std::filesystem::path DevRootFor(const std::filesystem::path& container_driver_root);

struct CommonEditsOptions {
  DriverRoots roots;
  // The driver version as NVML reports it ("550.163.01"); picks the
  // libraries `*.so.<version>` and the firmware folder nvidia/<version>.
  std::string driver_version;
  // The nvidia-cdi-hook binary as the host sees it (--nvidia-cdi-hook-path, or
  // the copy under the kubelet plugins folder). Required.
  std::string hook_path;
};

// The spec-level edits of every GPU claim, with paths as this process sees
// them (before ToHostPaths):
//   env NVIDIA_VISIBLE_DEVICES=void and NVIDIA_CTK_LIBCUDA_DIR=<driver lib folder>;
//   device nodes /dev/nvidia-modeset, nvidia-uvm-tools, nvidia-uvm, nvidiactl
//     (those present under the dev root);
//   read-only bind mounts of the driver libraries `*.so.<version>` of the
//     folder holding libcuda.so.<version> or libnvidia-ml.so.<version> (and
//     its vdpau/ folder), symlinks resolved; the IPC sockets of
//     nvidia-persistenced and nvidia-fabricmanager (/run or /var/run) and
//     /tmp/nvidia-mps; GSP firmware lib/firmware[/updates]/nvidia/<version>/gsp*.bin;
//     the binaries nvidia-smi, nvidia-debugdump, nvidia-persistenced,
//     nvidia-cuda-mps-control, nvidia-cuda-mps-server, nvidia-imex,
//     nvidia-imex-ctl (first executable match in the usual bin folders);
//   createContainer hooks: `create-symlinks --link <target>::<link>` for the
//     soname and .so links the host has beside each library (plus
//     libcuda.so.1::libcuda.so), `enable-cuda-compat
//     --host-driver-version=<version>` (the image's CUDA forward-compatibility
//     libraries first when newer), `update-ldcache --folder <dir>` for the
//     library folders, and `disable-device-node-modification` (the
//     container's /proc/driver/nvidia/params says ModifyDeviceFiles: 0), in
//     that order.
// Only what exists is included. kInvalidArgument for an empty driver version
// or hook path; kNotFound when no libcuda.so.<version> or
// libnvidia-ml.so.<version> exists in the library folders.
// Not emitted: the chmod hook nvcdi disables.
[[nodiscard]] common::StatusOr<kubeletplugin::CdiContainerEdits> BuildCommonEdits(
    const CommonEditsOptions& options);

// Where the kernel's files are read: /proc/devices (for the nvidia-caps
// major) and /proc/driver/nvidia/capabilities.
struct ProcPaths {
  std::filesystem::path proc_root = "/proc";
  // Empty: <proc_root>/devices.
  std::filesystem::path proc_devices;

  std::filesystem::path devices_file() const;
  std::filesystem::path capabilities_dir() const;
};

// ProcPaths with proc_devices from ALT_PROC_DEVICES_PATH when set (upstream's
// mock-NVML switch); when that file's folder also has
// driver/nvidia/capabilities, the folder is the proc root for the MIG
// capability files too. For main(); code below main receives ProcPaths.
ProcPaths ProcPathsFromEnvironment();

// The major of character device `name` in a /proc/devices file: the
// "Character devices:" section only. kNotFound when absent; I/O errors mapped.
[[nodiscard]] common::StatusOr<std::int64_t> ReadCharDeviceMajor(
    const std::filesystem::path& proc_devices, std::string_view name);

// A capability file, e.g. .../capabilities/gpu0/mig/gi1/access:
// "DeviceFileMinor: N" and "DeviceFileMode: M" (decimal, as the driver prints
// it). kNotFound for a missing file; kInvalidArgument without a minor.
struct NvCapDeviceInfo {
  std::int64_t minor = 0;
  std::uint32_t mode = 0;
};
[[nodiscard]] common::StatusOr<NvCapDeviceInfo> ParseNvCapFile(const std::filesystem::path& file);

// The device node of a capability: /dev/nvidia-caps/nvidia-cap<minor>, type
// "c", the "nvidia-caps" major `caps_major`, the capability's minor and mode.
kubeletplugin::CdiDeviceNode CapDeviceNode(std::int64_t caps_major, const NvCapDeviceInfo& cap);

// The device node of a full GPU, /dev/nvidia<minor>, with hostPath under the
// dev root (type, major and mode filled in when it is a character device).
kubeletplugin::CdiContainerEdits FullGpuEdits(unsigned minor, const DriverRoots& roots);

// A MIG device: its parent's node (FullGpuEdits) plus the GI and CI access
// capability nodes /dev/nvidia-caps/nvidia-cap<minor>, type "c", the major of
// "nvidia-caps", the minor and mode from the capability files. They need not
// exist on the host: the runtime creates them from type/major/minor.
// Errors of ReadCharDeviceMajor and ParseNvCapFile, with the file named.
[[nodiscard]] common::StatusOr<kubeletplugin::CdiContainerEdits> MigDeviceEdits(
    unsigned parent_minor, unsigned gi_id, unsigned ci_id, const DriverRoots& roots,
    const ProcPaths& proc);

// Rewrites paths from this process's view to the host's: a device node
// without hostPath gets its path; then hostPaths of device nodes and mounts,
// and the path of hooks other than startContainer, that lie under
// container_driver_root move under host_driver_root. Hook arguments are left
// alone for createContainer hooks, and rewritten (both sides of "::") for
// the others, as upstream's transform-root does.
void ToHostPaths(kubeletplugin::CdiContainerEdits& edits, const DriverRoots& roots);

// One device of a claim spec: its canonical name ("gpu-0", "gpu-0-mig-1g5gb-0-0")
// and its edits (view of this process).
struct ClaimCdiDevice {
  std::string canonical_name;
  kubeletplugin::CdiContainerEdits edits;
};

// The claim's spec: kind <vendor>/claim, devices "<claimUID>-<name>",
// `common` as the spec-level edits, every path moved to the host's view. The
// version is left empty (the minimum is written).
kubeletplugin::CdiSpec BuildClaimSpec(std::string_view vendor, std::string_view claim_uid,
                                      const kubeletplugin::CdiContainerEdits& common,
                                      const std::vector<ClaimCdiDevice>& devices,
                                      const DriverRoots& roots);

}  // namespace nvdra::drivercdi
