#pragma once

// The enable-cuda-compat hook (nvidia-container-toolkit's name and flags):
// CUDA forward compatibility. An image built for a newer CUDA than the
// host's driver supports can ship that CUDA's user-mode driver in
// /usr/local/cuda/compat (the cuda-compat package). When its major version is
// above the host driver's, the hook lists that folder in
// /etc/ld.so.conf.d/00-compat-<random>.conf, which sorts before the
// update-ldcache hook's 00-nvcr file, so the update-ldcache hook that runs
// after it makes the dynamic linker pick the compat libcuda over the mounted
// host one. Otherwise (no compat folder, no libcuda in it, an older or equal
// major, no ld.so.cache: an image that does not use the cache) the container
// is left alone, as the toolkit does.
//
// Everything is resolved inside the container's root (in_root.h).
//
// Defines: CudaCompatOptions, CompatLibcudaVersion, EnableCudaCompat.
//
// Ownership: values. Thread-safety: thread-safe (no shared state).

#include <filesystem>
#include <optional>
#include <string>

#include "common/status.h"

namespace nvdra::cdihook {

inline constexpr std::string_view kCudaCompatFolder = "/usr/local/cuda/compat";

struct CudaCompatOptions {
  std::filesystem::path container_root;  // host path of the container's root
  std::string host_driver_version;       // e.g. "550.163.01"; empty: no-op
};

// The driver version of the one compat libcuda in `root_fd`'s
// /usr/local/cuda/compat: the "<version>" of its regular file
// libcuda.so.<version>, where the version has at least two parts (so the
// libcuda.so.1 link does not count). nullopt when the folder or the file is
// missing, or when there is more than one (which one would win is unclear;
// the toolkit does nothing then too).
[[nodiscard]] common::StatusOr<std::optional<std::string>> CompatLibcudaVersion(int root_fd);

// The whole hook. Returns the container path of the ld.so.conf.d file it
// wrote, or nullopt when nothing was needed. kInvalidArgument naming the
// version when the host's or the compat library's major version is not a
// number.
[[nodiscard]] common::StatusOr<std::optional<std::string>> EnableCudaCompat(const CudaCompatOptions& options);

}  // namespace nvdra::cdihook
