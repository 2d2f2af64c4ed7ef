#include "driver_core.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>

#include <fmt/format.h>

#include "common/unique_fd.h"

namespace nvdra::simsysfs {

namespace fs = std::filesystem;
using common::Status;
using common::StatusOr;

namespace {

constexpr unsigned kNvidiaVendor = 0x10de;
constexpr std::string_view kNoOverride = "(null)";

std::optional<std::string> ReadText(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Replaces the content in place (same inode: inotify watches on the file
// stay).
Status WriteText(const fs::path& path, std::string_view text, mode_t mode = 0644) {
  common::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (!fd) return common::ErrnoToStatus(errno, "open " + path.string());
  if (!text.empty() && ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    return common::ErrnoToStatus(errno, "write " + path.string());
  }
  return common::OkStatus();
}

// The last element of a symlink's target, "" when `link` is no symlink.
std::string LinkName(const fs::path& link) {
  std::error_code ec;
  const fs::path target = fs::read_symlink(link, ec);
  return ec ? std::string() : target.filename().string();
}

// A symlink at `link` to `target`, relative as the kernel's (so the tree
// works wherever it is mounted).
Status RelativeLink(const fs::path& target, const fs::path& link) {
  std::error_code ec;
  const fs::path from = fs::canonical(link.parent_path(), ec);
  if (ec) return common::InternalError(fmt::format("link {}: {}", link.string(), ec.message()));
  const fs::path to = fs::weakly_canonical(target, ec);
  if (ec) return common::InternalError(fmt::format("link {}: {}", link.string(), ec.message()));
  fs::create_symlink(to.lexically_relative(from), link, ec);
  if (ec) return common::InternalError(fmt::format("link {} -> {}: {}", link.string(), to.string(), ec.message()));
  return common::OkStatus();
}

Status Remove(const fs::path& path) {
  std::error_code ec;
  fs::remove(path, ec);
  if (ec) return common::InternalError(fmt::format("remove {}: {}", path.string(), ec.message()));
  return common::OkStatus();
}

std::vector<std::string> Entries(const fs::path& dir, bool links_or_dirs_only) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (links_or_dirs_only && !entry.is_symlink(ec) && !entry.is_directory(ec)) continue;
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A name sysfs could hold in one folder: not empty, no '/', not "." or "..".
bool IsEntryName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos;
}

}  // namespace

std::string Trim(std::string_view text) {
  constexpr std::string_view kSpace = " \t\r\n";
  const std::size_t begin = text.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return "";
  const std::size_t end = text.find_last_not_of(kSpace);
  return std::string(text.substr(begin, end - begin + 1));
}

DriverCore::DriverCore(fs::path driver_root)
    : root_(std::move(driver_root)),
      devices_(root_ / "sys/bus/pci/devices"),
      drivers_(root_ / "sys/bus/pci/drivers"),
      vfio_dev_(root_ / "dev/vfio") {}

std::vector<std::string> DriverCore::Devices() const { return Entries(devices_, true); }

std::vector<std::string> DriverCore::Drivers() const {
  std::vector<std::string> drivers;
  std::error_code ec;
  for (const std::string& name : Entries(drivers_, true)) {
    if (fs::is_directory(drivers_ / name, ec)) drivers.push_back(name);
  }
  return drivers;
}

fs::path DriverCore::BindFile(std::string_view driver) const { return drivers_ / driver / "bind"; }
fs::path DriverCore::UnbindFile(std::string_view driver) const { return drivers_ / driver / "unbind"; }
fs::path DriverCore::OverrideFile(std::string_view bus_id) const { return devices_ / bus_id / "driver_override"; }

StatusOr<fs::path> DriverCore::DeviceDir(std::string_view bus_id) const {
  std::error_code ec;
  if (IsEntryName(bus_id)) {
    fs::path dir = fs::canonical(devices_ / bus_id, ec);
    if (!ec && fs::is_directory(dir, ec)) return dir;
  }
  return common::NotFoundError(fmt::format("ENODEV: no PCI device {:?}", bus_id));
}

std::string DriverCore::DriverOf(std::string_view bus_id) const {
  return IsEntryName(bus_id) ? LinkName(devices_ / bus_id / "driver") : std::string();
}

std::string DriverCore::Override(std::string_view bus_id) const {
  if (!IsEntryName(bus_id)) return "";
  const std::string value = Trim(ReadText(OverrideFile(bus_id)).value_or(""));
  return value == kNoOverride ? std::string() : value;
}

StatusOr<DriverCore::SettledOverride> DriverCore::SettleOverride(std::string_view bus_id) {
  ASSIGN_OR_RETURN(const fs::path device, DeviceDir(bus_id));
  const fs::path file = device / "driver_override";
  const auto shown_for = [](const std::string& written, std::string* value) {
    *value = Trim(written);
    if (*value == kNoOverride) value->clear();
    return value->empty() ? std::string(kNoOverride) + "\n" : *value + "\n";
  };
  SettledOverride settled;
  // One descriptor, opened for writing, for the lease, the read and the
  // write: a second open of our own would break our own lease, and the
  // close of a read-only one (IN_CLOSE_NOWRITE) would wake a deferred
  // rewrite, this one included, over and over while the file stays open
  // elsewhere.
  common::UniqueFd fd(::open(file.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd) return common::ErrnoToStatus(errno, "open " + file.string());
  settled.opened_for_write = true;
  const bool leased = ::fcntl(fd.get(), F_SETLEASE, F_WRLCK) == 0;
  const bool open_elsewhere = !leased && errno == EAGAIN;
  std::string written(4096, '\0');
  const ssize_t n = ::pread(fd.get(), written.data(), written.size(), 0);
  if (n < 0) return common::ErrnoToStatus(errno, "read " + file.string());
  written.resize(static_cast<std::size_t>(n));
  const std::string shown = shown_for(written, &settled.value);
  if (open_elsewhere) {
    settled.deferred = true;
    return settled;
  }
  if (written != shown) {
    if (::ftruncate(fd.get(), 0) != 0 ||
        ::pwrite(fd.get(), shown.data(), shown.size(), 0) != static_cast<ssize_t>(shown.size())) {
      return common::ErrnoToStatus(errno, "write " + file.string());
    }
  }
  // The lease goes with the descriptor's close, not an F_UNLCK before it:
  // the kernel queues the close's IN_CLOSE_WRITE before it drops the file's
  // leases (__fput: fsnotify_close, then locks_remove_file), so a writer
  // waiting on the lease closes after us and its event comes after ours,
  // which is the order in which simsysfs tells its own closes from theirs.
  return settled;
}

Status DriverCore::Bind(std::string_view driver, std::string_view bus_id) {
  ASSIGN_OR_RETURN(const fs::path device, DeviceDir(bus_id));
  const fs::path driver_dir = drivers_ / driver;
  std::error_code ec;
  if (!IsEntryName(driver) || !fs::is_directory(driver_dir, ec)) {
    return common::NotFoundError(fmt::format("ENODEV: no driver {:?}", driver));
  }
  if (const std::string current = LinkName(device / "driver"); !current.empty()) {
    return common::FailedPreconditionError(fmt::format("EBUSY: {} is bound to {}", bus_id, current));
  }
  if (const std::string override = Override(bus_id); !override.empty() && override != driver) {
    return common::NotFoundError(
        fmt::format("ENODEV: {}'s driver_override is {}, not {}", bus_id, override, driver));
  }
  if (driver == kNvidiaDriver) {
    const std::string vendor = Trim(ReadText(device / "vendor").value_or(""));
    unsigned long value = 0;
    try {
      value = std::stoul(vendor, nullptr, 16);
    } catch (const std::exception&) {
      value = 0;
    }
    if (value != kNvidiaVendor) {
      return common::NotFoundError(
          fmt::format("ENODEV: nvidia does not match {} (vendor {:?})", bus_id, vendor));
    }
  }
  if (driver == kVfioPciDriver) {
    const std::string group = LinkName(device / "iommu_group");
    if (group.empty()) {
      return common::InvalidArgumentError(fmt::format("EINVAL: {} has no IOMMU group", bus_id));
    }
    RETURN_IF_ERROR(MakeVfioNodes(device, group));
  }
  RETURN_IF_ERROR(RelativeLink(device, driver_dir / bus_id));
  return RelativeLink(driver_dir, device / "driver");
}

Status DriverCore::Unbind(std::string_view driver, std::string_view bus_id) {
  ASSIGN_OR_RETURN(const fs::path device, DeviceDir(bus_id));
  if (const std::string current = LinkName(device / "driver"); current != driver) {
    return common::NotFoundError(fmt::format("ENODEV: {} is not on {} ({})", bus_id, driver,
                                             current.empty() ? "no driver" : "bound to " + current));
  }
  if (driver == kVfioPciDriver) RETURN_IF_ERROR(RemoveVfioNodes(device, bus_id));
  RETURN_IF_ERROR(Remove(drivers_ / driver / bus_id));
  return Remove(device / "driver");
}

Status DriverCore::MakeVfioNodes(const fs::path& device, const std::string& group) {
  std::error_code ec;
  if (!fs::exists(vfio_dev_ / group, ec)) RETURN_IF_ERROR(WriteText(vfio_dev_ / group, "", 0666));
  // The IOMMUFD cdev: numbered lowest free, as the kernel's ida.
  const fs::path cdevs = vfio_dev_ / "devices";
  fs::create_directories(cdevs, ec);
  if (ec) return common::InternalError(fmt::format("mkdir {}: {}", cdevs.string(), ec.message()));
  int k = 0;
  while (fs::exists(cdevs / fmt::format("vfio{}", k), ec)) ++k;
  const std::string name = fmt::format("vfio{}", k);
  fs::create_directories(device / "vfio-dev" / name, ec);
  if (ec) return common::InternalError(fmt::format("mkdir {}: {}", (device / "vfio-dev" / name).string(), ec.message()));
  return WriteText(cdevs / name, "", 0666);
}

Status DriverCore::RemoveVfioNodes(const fs::path& device, std::string_view bus_id) {
  std::error_code ec;
  const fs::path cdevs = vfio_dev_ / "devices";
  for (const std::string& name : Entries(device / "vfio-dev", false)) {
    RETURN_IF_ERROR(Remove(cdevs / name));
    RETURN_IF_ERROR(Remove(device / "vfio-dev" / name));
  }
  RETURN_IF_ERROR(Remove(device / "vfio-dev"));
  // devtmpfs drops a folder its last node left.
  if (fs::is_empty(cdevs, ec) && !ec) RETURN_IF_ERROR(Remove(cdevs));
  const std::string group = LinkName(device / "iommu_group");
  if (group.empty()) return common::OkStatus();
  const fs::path members = root_ / "sys/kernel/iommu_groups" / group / "devices";
  for (const std::string& other : Entries(members, true)) {
    if (other != bus_id && LinkName(members / other / "driver") == kVfioPciDriver) return common::OkStatus();
  }
  return Remove(vfio_dev_ / group);
}

}  // namespace nvdra::simsysfs
