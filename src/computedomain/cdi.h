#pragma once

// The compute-domain plugin's CDI specs (vendor "k8s.compute-domain.nvidia.com"):
//  - the base spec <cdi-root>/k8s.compute-domain.nvidia.com-device_base.yaml,
//    written at start-up: device "all" with every GPU's device node, and as
//    spec-level edits the driver's common edits (NVIDIA_VISIBLE_DEVICES=void,
//    libraries, binaries including nvidia-imex and nvidia-imex-ctl, control
//    nodes, hooks) plus the IMEX channel nodes that exist under the dev root.
//    Daemon claims name it, so the IMEX daemon sees the driver and the GPUs
//    (upstream: nvcdi "management" mode);
//  - one claim spec per claim with edits, ...-claim_<claimUID>.yaml, devices
//    "<claimUID>-<device>": IMEX channel char devices for channel claims; env,
//    the /imexd bind mount and the fabric-imex-mgmt capability for daemon
//    claims. A claim whose devices have no edits gets no spec (upstream).
// The edits are pure functions of their arguments and of /proc/devices and
// the capability files named by ProcPaths.
//
// Ownership: owns the spec writer. Thread-safety: const methods are
// thread-safe (each write is an atomic rename of its own file).

#include <cstdint>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "drivercdi/driver_edits.h"
#include "kubeletplugin/cdi_spec.h"

namespace nvdra::computedomain {

inline constexpr std::string_view kCdCdiVendor = "k8s.compute-domain.nvidia.com";
// The base spec's class ("k8s.compute-domain.nvidia.com/device=all").
inline constexpr std::string_view kDeviceClass = "device";
// The IMEX channels' character device in /proc/devices and its /dev folder.
inline constexpr std::string_view kImexChannelsDevice = "nvidia-caps-imex-channels";
// "k8s.compute-domain.nvidia.com/device=all": the base spec's one device.
std::string BaseSpecDeviceId();

struct CdCdiOptions {
  std::filesystem::path cdi_root;
  drivercdi::DriverRoots roots;      // host and container views of the driver root
  std::string driver_version;  // picks the driver libraries
  std::string hook_path;       // nvidia-cdi-hook as the runtime runs it
  std::vector<unsigned> gpu_minors;  // every GPU of the node
  drivercdi::ProcPaths proc;         // /proc/devices and the capability files
};

// One device of a claim spec.
struct CdClaimDevice {
  std::string name;  // "channel-0", "daemon-0"
  kubeletplugin::CdiContainerEdits edits;
};

class CdCdi {
 public:
  explicit CdCdi(CdCdiOptions options);

  // Writes (replaces) the base spec. Errors of drivercdi::BuildCommonEdits and of
  // the writer.
  [[nodiscard]] common::Status WriteBaseSpec() const;

  // "k8s.compute-domain.nvidia.com/claim=<uid>-<device>".
  static std::string ClaimDeviceId(std::string_view claim_uid, std::string_view device_name);

  // Char device nodes /dev/nvidia-caps-imex-channels/channel<id>, major of
  // "nvidia-caps-imex-channels" in /proc/devices, minor id, mode 0666.
  // kNotFound when the kernel has no such device (no IMEX support).
  [[nodiscard]] common::StatusOr<kubeletplugin::CdiContainerEdits> ChannelEdits(
      const std::vector<int>& channel_ids) const;

  // The fabric-imex-mgmt capability's node /dev/nvidia-caps/nvidia-cap<minor>
  // (major of "nvidia-caps", minor and mode from
  // <capabilities>/fabric-imex-mgmt).
  [[nodiscard]] common::StatusOr<kubeletplugin::CdiContainerEdits> ImexManagementEdits() const;

  // Writes the claim's spec, or removes any old one when no device has edits.
  [[nodiscard]] common::Status WriteClaimSpec(std::string_view claim_uid,
                                              const std::vector<CdClaimDevice>& devices) const;
  // Removes the claim's spec; a missing file is fine.
  [[nodiscard]] common::Status RemoveClaimSpec(std::string_view claim_uid) const;
  // Removes the claim specs of claims not in `keep` (the checkpoint's); how
  // many went.
  [[nodiscard]] common::StatusOr<int> RemoveOrphanedClaimSpecs(const std::set<std::string>& keep) const;

  const std::filesystem::path& cdi_root() const { return writer_.root(); }

 private:
  const CdCdiOptions options_;
  const kubeletplugin::CdiSpecWriter writer_;
};

}  // namespace nvdra::computedomain
