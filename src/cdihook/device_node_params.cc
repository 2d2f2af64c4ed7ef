#include "cdihook/device_node_params.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <random>

#include <fmt/format.h>

#include "cdihook/in_root.h"
#include "common/file_io.h"
#include "common/log.h"
#include "common/unique_fd.h"

namespace nvdra::cdihook {

using common::StatusOr;
using common::UniqueFd;

namespace {

constexpr std::string_view kModifyOn = "ModifyDeviceFiles: 1";
constexpr std::string_view kModifyOff = "ModifyDeviceFiles: 0";

std::string FdPath(int fd) { return fmt::format("/proc/self/fd/{}", fd); }

// A folder of the container's root with a tmpfs on it, while the copy is
// made; unmounted (detached) and removed on destruction whatever happened.
class ScratchTmpfs {
 public:
  ScratchTmpfs(int root_fd, std::string name) : root_fd_(root_fd), name_(std::move(name)) {}
  ~ScratchTmpfs() {
    if (mounted_ && ::umount2(FdPath(top_.get()).c_str(), MNT_DETACH) != 0) {
      LOG_WARNING("cannot detach the scratch tmpfs", {{"folder", name_}, {"errno", errno}});
    }
    top_ = UniqueFd();
    if (created_ && ::unlinkat(root_fd_, name_.c_str(), AT_REMOVEDIR) != 0) {
      LOG_WARNING("cannot remove the scratch folder", {{"folder", name_}, {"errno", errno}});
    }
  }
  ScratchTmpfs(const ScratchTmpfs&) = delete;
  ScratchTmpfs& operator=(const ScratchTmpfs&) = delete;

  // Creates the folder and mounts a tmpfs of `size` bytes on it; returns the
  // tmpfs's root.
  StatusOr<int> Mount(std::size_t size) {
    if (::mkdirat(root_fd_, name_.c_str(), 0700) != 0) {
      return common::ErrnoToStatus(errno, fmt::format("create the scratch folder /{}", name_));
    }
    created_ = true;
    UniqueFd below(::openat(root_fd_, name_.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!below) return common::ErrnoToStatus(errno, fmt::format("open /{}", name_));
    const std::string options = fmt::format("size={},mode=0755", size);
    if (::mount("tmpfs", FdPath(below.get()).c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options.c_str()) !=
        0) {
      return common::ErrnoToStatus(errno, fmt::format("mount a tmpfs on /{}", name_));
    }
    mounted_ = true;
    // Opened by name again: the walk now crosses into the tmpfs.
    top_ = UniqueFd(::openat(root_fd_, name_.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!top_) return common::ErrnoToStatus(errno, fmt::format("open the tmpfs on /{}", name_));
    if (::mount(nullptr, FdPath(top_.get()).c_str(), nullptr, MS_PRIVATE, nullptr) != 0) {
      return common::ErrnoToStatus(errno, "make the scratch tmpfs private");
    }
    return top_.get();
  }

 private:
  const int root_fd_;
  const std::string name_;
  bool created_ = false;
  bool mounted_ = false;
  UniqueFd top_;
};

}  // namespace

std::optional<std::string> ParamsWithDeviceFilesUnmodifiable(std::string_view params) {
  std::string out;
  out.reserve(params.size());
  bool changed = false;
  std::size_t pos = 0;
  while (pos < params.size()) {
    const std::size_t end = params.find('\n', pos);
    const std::string_view line = params.substr(pos, end == std::string_view::npos ? end : end - pos);
    if (line == kModifyOff) return std::nullopt;
    if (line == kModifyOn) {
      out.append(kModifyOff);
      changed = true;
    } else {
      out.append(line);
    }
    if (end == std::string_view::npos) break;
    out.push_back('\n');
    pos = end + 1;
  }
  if (!changed) return std::nullopt;
  return out;
}

StatusOr<bool> DisableDeviceNodeModification(const DeviceNodeParamsOptions& options) {
  StatusOr<std::string> host = common::ReadWholeFile(options.host_params);
  if (!host.ok()) {
    if (host.status().code() != common::StatusCode::kNotFound) return host.status();
    LOG_INFO(2, "no driver params file on the host; nothing to do", {{"path", options.host_params}});
    return false;
  }
  const std::optional<std::string> copy = ParamsWithDeviceFilesUnmodifiable(*host);
  if (!copy) {
    LOG_INFO(2, "device node modification is already off", {{"path", options.host_params}});
    return false;
  }
  ASSIGN_OR_RETURN(UniqueFd root, OpenRoot(options.container_root));
  StatusOr<UniqueFd> below = OpenInRoot(root.get(), kNvidiaParamsPath, O_PATH);
  if (!below.ok()) return below.status().WithContext(fmt::format("the container's {}", kNvidiaParamsPath));

  static thread_local std::mt19937 engine{std::random_device{}()};
  ScratchTmpfs scratch(root.get(), fmt::format(".nvdra-params-{}", engine()));
  ASSIGN_OR_RETURN(const int tmpfs, scratch.Mount(copy->size()));
  UniqueFd file(::openat(tmpfs, "params", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444));
  if (!file) return common::ErrnoToStatus(errno, "create the params copy");
  RETURN_IF_ERROR(common::WriteAll(file.get(), *copy, "the params copy"));
  if (::fchmod(file.get(), 0444) != 0) return common::ErrnoToStatus(errno, "chmod the params copy");

  if (::mount(FdPath(file.get()).c_str(), FdPath(below->get()).c_str(), nullptr, MS_BIND, nullptr) != 0) {
    return common::ErrnoToStatus(errno, fmt::format("bind the params copy over {}", kNvidiaParamsPath));
  }
  // Flags other than MS_BIND are ignored by the bind itself; they take effect
  // on a remount of the new mount, reached by walking to the file again.
  ASSIGN_OR_RETURN(UniqueFd above, OpenInRoot(root.get(), kNvidiaParamsPath, O_PATH));
  const std::string above_path = FdPath(above.get());
  if (::mount(nullptr, above_path.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
              nullptr) != 0) {
    return common::ErrnoToStatus(errno, fmt::format("remount {} read-only", kNvidiaParamsPath));
  }
  if (::mount(nullptr, above_path.c_str(), nullptr, MS_PRIVATE, nullptr) != 0) {
    return common::ErrnoToStatus(errno, fmt::format("make the {} mount private", kNvidiaParamsPath));
  }
  LOG_INFO(2, "device node modification turned off for the container", {{"root", options.container_root}});
  return true;
}

}  // namespace nvdra::cdihook
