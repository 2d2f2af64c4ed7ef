#include "cdihook/cuda_compat.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <charconv>
#include <memory>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "cdihook/in_root.h"
#include "cdihook/ldcache.h"
#include "common/log.h"
#include "common/unique_fd.h"

namespace nvdra::cdihook {

using common::StatusOr;
using common::UniqueFd;

namespace {

constexpr std::string_view kLibcudaPrefix = "libcuda.so.";

// The leading number of a driver version ("550" of "550.163.01").
StatusOr<int> MajorOf(std::string_view version, std::string_view what) {
  const std::string_view major = version.substr(0, version.find('.'));
  int value = 0;
  const auto [end, error] = std::from_chars(major.data(), major.data() + major.size(), value);
  if (major.empty() || error != std::errc() || end != major.data() + major.size()) {
    return common::InvalidArgumentError(
        fmt::format("{} \"{}\": its major version (before the first '.') is not a number", what, version));
  }
  return value;
}

bool IsNotFound(const common::Status& status) { return status.code() == common::StatusCode::kNotFound; }

}  // namespace

StatusOr<std::optional<std::string>> CompatLibcudaVersion(int root_fd) {
  StatusOr<UniqueFd> dir = OpenInRoot(root_fd, kCudaCompatFolder, O_RDONLY | O_DIRECTORY);
  if (!dir.ok()) {
    if (IsNotFound(dir.status())) return std::optional<std::string>();
    return dir.status();
  }
  // fdopendir takes the descriptor over; closedir closes it.
  std::unique_ptr<DIR, int (*)(DIR*)> listing(::fdopendir(dir->Release()), &::closedir);
  if (!listing) return common::ErrnoToStatus(errno, fmt::format("list {}", kCudaCompatFolder));
  std::vector<std::string> versions;
  while (const dirent* entry = ::readdir(listing.get())) {
    const std::string_view name(entry->d_name);
    if (!name.starts_with(kLibcudaPrefix)) continue;
    const std::string_view version = name.substr(kLibcudaPrefix.size());
    if (version.find('.') == std::string_view::npos) continue;  // libcuda.so.1, the soname link
    struct stat st {};
    if (::fstatat(::dirfd(listing.get()), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
      continue;
    }
    versions.emplace_back(version);
  }
  if (versions.size() > 1) {
    LOG_WARNING("more than one CUDA compat libcuda; leaving the container's ldcache alone",
                {{"folder", kCudaCompatFolder}, {"versions", fmt::format("{}", fmt::join(versions, ","))}});
  }
  if (versions.size() != 1) return std::optional<std::string>();
  return std::optional<std::string>(versions.front());
}

StatusOr<std::optional<std::string>> EnableCudaCompat(const CudaCompatOptions& options) {
  if (options.host_driver_version.empty()) {
    LOG_INFO(2, "no --host-driver-version; CUDA compat not considered");
    return std::optional<std::string>();
  }
  ASSIGN_OR_RETURN(const int host_major, MajorOf(options.host_driver_version, "--host-driver-version"));
  ASSIGN_OR_RETURN(UniqueFd root, OpenRoot(options.container_root));
  // An image without the cache does not use ldconfig's search list.
  StatusOr<UniqueFd> cache = OpenInRoot(root.get(), "/etc/ld.so.cache", O_RDONLY);
  if (!cache.ok()) {
    if (IsNotFound(cache.status())) return std::optional<std::string>();
    return cache.status();
  }
  ASSIGN_OR_RETURN(const std::optional<std::string> compat, CompatLibcudaVersion(root.get()));
  if (!compat) return std::optional<std::string>();
  ASSIGN_OR_RETURN(const int compat_major, MajorOf(*compat, fmt::format("{}/libcuda.so.<version>", kCudaCompatFolder)));
  if (compat_major <= host_major) {
    LOG_INFO(2, "the CUDA compat libraries are not newer than the host driver; not used",
             {{"compat", *compat}, {"host", options.host_driver_version}});
    return std::optional<std::string>();
  }
  const std::string folder(kCudaCompatFolder);
  ASSIGN_OR_RETURN(std::optional<std::string> written,
                   WriteLdSoConfFile(root.get(), std::span<const std::string>(&folder, 1), kCudaCompatLdSoConfDPrefix));
  LOG_INFO(2, "CUDA forward compatibility enabled", {{"compat", *compat}, {"host", options.host_driver_version},
                                                     {"file", written.value_or("")}});
  return written;
}

}  // namespace nvdra::cdihook
