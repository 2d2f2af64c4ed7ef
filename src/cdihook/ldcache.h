#pragma once

// The update-ldcache hook: makes the dynamic linker of a container find the
// driver libraries mounted into it. Writes
// <root>/etc/ld.so.conf.d/00-nvcr-<random>.conf listing the folders the
// container's ld.so.conf does not already name, then runs the host's
// ldconfig as `ldconfig -r <root> -f /etc/ld.so.conf -C /etc/ld.so.cache`.
//
// Why `ldconfig -r` and not the toolkit's pivot_root: glibc's ldconfig with
// -r chroot()s into the root before it reads anything (falling back to
// resolving every path inside the root when chroot is not permitted), so the
// configuration, the library folders and the cache it writes all resolve in
// the container, and the host binary is already loaded. A pivot_root needs a
// re-executed child in a private mount namespace with a fresh /proc: more
// privileged machinery for the same confinement of a trusted host binary.
//
// Defines: LdcacheOptions, kLdSoConfDPrefix, kCudaCompatLdSoConfDPrefix, IsDebianLike,
// ConfiguredLibraryFolders, WriteLdSoConfFile, UpdateLdcache.
//
// Ownership: values; descriptors borrowed. Thread-safety: thread-safe (no
// shared state; UpdateLdcache runs a child process and waits for it).

#include <filesystem>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nvdra::cdihook {

// "00-nvcr": before most other files in ld.so.conf.d, so the mounted driver
// wins over libraries the image ships, but after 00-cuda-compat, which some
// images carry on purpose (the toolkit chose the same name for this reason).
inline constexpr std::string_view kLdSoConfDPrefix = "00-nvcr-";
// The enable-cuda-compat hook's file (cuda_compat.h): "00-compat" sorts
// before "00-nvcr", so forward-compatible libraries beat the mounted driver.
inline constexpr std::string_view kCudaCompatLdSoConfDPrefix = "00-compat-";

struct LdcacheOptions {
  std::filesystem::path container_root;  // host path of the container's root
  std::vector<std::string> folders;      // library folders, container paths
  std::filesystem::path ldconfig_path = "/sbin/ldconfig";  // on the host
  // The host's ldconfig was built for Debian's folder layout; a non-Debian
  // container then needs /lib64 and /usr/lib64 named explicitly.
  bool host_is_debian_like = false;
};

// Whether `root`/etc/debian_version is a regular file (resolved inside the
// root). Errors read as "no".
[[nodiscard]] bool IsDebianLike(const std::filesystem::path& root);

// The folders the dynamic linker of the container at `root_fd` already
// searches: the system folders for its layout plus every folder in
// /etc/ld.so.conf and the files it includes (glob in the last component
// only, as ld.so.conf.d/*.conf is written). A missing ld.so.conf is empty.
[[nodiscard]] common::StatusOr<std::set<std::string>> ConfiguredLibraryFolders(int root_fd,
                                                                               bool debian_like);

// Writes `folders` (duplicates dropped, order kept), one a line, to a new
// /etc/ld.so.conf.d/<prefix><random>.conf in the root, mode 0644 so non-root
// containers can read it, creating the folder if needed. Returns the
// container path of the file, or nullopt (nothing written) for no folders.
[[nodiscard]] common::StatusOr<std::optional<std::string>> WriteLdSoConfFile(
    int root_fd, std::span<const std::string> folders, std::string_view prefix = kLdSoConfDPrefix);

// The whole hook. kNotFound when ldconfig_path is not an executable file
// (checked before the container is changed); kFailedPrecondition for an empty
// ldconfig_path; kInternal when ldconfig fails (its stderr goes to ours).
[[nodiscard]] common::Status UpdateLdcache(const LdcacheOptions& options);

}  // namespace nvdra::cdihook
