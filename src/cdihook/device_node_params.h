#pragma once

// The disable-device-node-modification hook (nvidia-container-toolkit's name):
// keeps CUDA inside the container from creating or changing /dev/nvidia*
// device nodes itself. libcuda does so when the driver's
// /proc/driver/nvidia/params says "ModifyDeviceFiles: 1" (the host default);
// in a container the runtime, not CUDA, decides which device nodes exist.
// The hook mounts, read-only, a copy of the host's params file with that line
// turned to "ModifyDeviceFiles: 0" over the container's
// /proc/driver/nvidia/params. When the host's file is missing or already says
// 0, it does nothing.
//
// Where the copy lives: a createContainer hook runs in the container's mount
// namespace before pivot_root. The copy is written on a tmpfs mounted on a
// scratch folder of the container's root (sized to the file), bind-mounted
// onto the params file, remounted read-only, nodev, nosuid, noexec; then the
// tmpfs is detached from the scratch folder and the folder removed, so the
// container sees only the params file (the bind mount keeps the tmpfs alive).
// A file descriptor cannot be the source instead: the kernel refuses to bind
// a memfd (its filesystem is mounted in no namespace).
//
// Defines: ParamsWithDeviceFilesUnmodifiable, DeviceNodeParamsOptions,
// DisableDeviceNodeModification.
//
// Ownership: values. Thread-safety: thread-safe (no shared state); the
// mounts change the calling process's mount namespace.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace nvdra::cdihook {

inline constexpr std::string_view kNvidiaParamsPath = "/proc/driver/nvidia/params";

// `params` (the file's text) with "ModifyDeviceFiles: 1" turned to
// "ModifyDeviceFiles: 0"; nullopt when no line says 1 (already 0, or no such
// line). Every other line is kept as is.
[[nodiscard]] std::optional<std::string> ParamsWithDeviceFilesUnmodifiable(std::string_view params);

struct DeviceNodeParamsOptions {
  std::filesystem::path container_root;  // host path of the container's root
  // The driver's params file as the hook sees it (the host's).
  std::filesystem::path host_params = std::string(kNvidiaParamsPath);
};

// The whole hook. Returns whether it mounted the copy. kNotFound when the
// host has the file but the container has no /proc/driver/nvidia/params
// (its /proc is not the host kernel's procfs, or no driver there); errno
// statuses for failed mounts (the hook needs CAP_SYS_ADMIN in the
// container's mount namespace, which a runtime's hooks have).
[[nodiscard]] common::StatusOr<bool> DisableDeviceNodeModification(const DeviceNodeParamsOptions& options);

}  // namespace nvdra::cdihook
