#include "gpu/pci_sysfs.h"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <utility>

#include <fmt/format.h>
#include <openssl/evp.h>

namespace nvdra::gpu {

namespace fs = std::filesystem;
using common::Status;
using common::StatusOr;

namespace {

constexpr std::uint16_t kNvidiaVendorId = 0x10de;

std::optional<std::string> FirstLine(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ' || line.back() == '\r')) line.pop_back();
  return line;
}

std::optional<std::uint64_t> HexValue(const fs::path& path) {
  std::optional<std::string> line = FirstLine(path);
  if (!line || line->empty()) return std::nullopt;
  try {
    std::size_t used = 0;
    const std::uint64_t value = std::stoull(*line, &used, 16);
    return used == line->size() ? std::optional(value) : std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<int> IntValue(const fs::path& path) {
  std::optional<std::string> line = FirstLine(path);
  if (!line || line->empty()) return std::nullopt;
  try {
    std::size_t used = 0;
    const int value = std::stoi(*line, &used, 10);
    return used == line->size() ? std::optional(value) : std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The last element of a symlink's target ("../../bus/pci/drivers/nvidia" ->
// "nvidia"); "" when there is no link.
std::string LinkName(const fs::path& link) {
  std::error_code ec;
  const fs::path target = fs::read_symlink(link, ec);
  return ec ? std::string() : target.filename().string();
}

// Sorts bus ids as numbers, as upstream (domain, bus, device, function in
// hex), so that "0000:9a:00.0" comes before "0000:a0:00.0" whatever the case.
std::uint64_t BusIdOrder(const std::string& bus_id) {
  std::string digits;
  for (char c : bus_id) {
    if (c != ':' && c != '.') digits.push_back(c);
  }
  try {
    return std::stoull(digits, nullptr, 16);
  } catch (const std::exception&) {
    return UINT64_MAX;
  }
}

Status WriteSysfs(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::out | std::ios::trunc);
  if (!out) return common::UnavailableError(fmt::format("cannot open {}: {}", path.string(), std::strerror(errno)));
  out << text;
  out.flush();
  if (!out) return common::UnavailableError(fmt::format("writing {} failed: {}", path.string(), std::strerror(errno)));
  return common::OkStatus();
}

// Waits until `done()` holds, re-checking whenever `dir` changes (inotify),
// up to `timeout`. The check comes first, so on a real sysfs (which applies a
// bind before the write returns, and sends no inotify events) it returns at
// once.
bool AwaitChange(const fs::path& dir, std::chrono::milliseconds timeout, const std::function<bool()>& done) {
  if (done()) return true;
  const int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd < 0) return done();
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  inotify_add_watch(fd, dir.c_str(), IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_ATTRIB);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) return done();
    std::array<char, 4096> drain{};
    while (read(fd, drain.data(), drain.size()) > 0) {
    }
  }
  return true;
}

}  // namespace

PciSysfs::PciSysfs(fs::path host_root) : host_root_(std::move(host_root)) {}

fs::path PciSysfs::DeviceDir(const std::string& bus_id) const { return host_root_ / "sys/bus/pci/devices" / bus_id; }
fs::path PciSysfs::DriversDir() const { return host_root_ / "sys/bus/pci/drivers"; }

StatusOr<PciGpuFunction> PciSysfs::Read(const std::string& bus_id) const {
  const fs::path dir = DeviceDir(bus_id);
  std::error_code ec;
  if (!fs::exists(dir, ec)) return common::NotFoundError(fmt::format("no PCI function {} in {}", bus_id, dir.parent_path().string()));
  PciGpuFunction function;
  function.bus_id = bus_id;
  function.vendor_id = static_cast<std::uint16_t>(HexValue(dir / "vendor").value_or(0));
  function.device_id = static_cast<std::uint16_t>(HexValue(dir / "device").value_or(0));
  function.driver = LinkName(dir / "driver");
  const std::string group = LinkName(dir / "iommu_group");
  if (!group.empty() && std::all_of(group.begin(), group.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
      group.size() < 9) {
    function.iommu_group = std::stoi(group);
  }
  for (const auto& entry : fs::directory_iterator(dir / "vfio-dev", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("vfio", 0) == 0) {
      function.iommufd_device = name;
      break;
    }
  }
  const fs::path resolved = fs::canonical(dir, ec);
  if (!ec) {
    for (const auto& part : resolved) {
      const std::string name = part.string();
      if (name.rfind("pci", 0) == 0) {
        function.pcie_root = name;
        break;
      }
    }
  }
  if (std::optional<int> numa = IntValue(dir / "numa_node"); numa && *numa >= 0) function.numa_node = numa;
  std::ifstream resource(dir / "resource");
  std::stringstream table;
  table << resource.rdbuf();
  function.addressable_memory_bytes = AddressableMemoryBytes(table.str());
  function.sriov_vfs = IntValue(dir / "sriov_numvfs").value_or(0);
  return function;
}

StatusOr<std::vector<PciGpuFunction>> PciSysfs::ListGpus() const {
  const fs::path devices = host_root_ / "sys/bus/pci/devices";
  std::error_code ec;
  fs::directory_iterator it(devices, ec);
  if (ec) {
    return common::NotFoundError(fmt::format("cannot list PCI devices in {}: {}; is the host's /sys visible under "
                                             "--host-root?",
                                             devices.string(), ec.message()));
  }
  std::vector<PciGpuFunction> gpus;
  for (const auto& entry : it) {
    const fs::path dir = entry.path();
    if (HexValue(dir / "vendor").value_or(0) != kNvidiaVendorId) continue;
    const std::uint64_t pci_class = HexValue(dir / "class").value_or(0);
    if (pci_class != 0x030000 && pci_class != 0x030200) continue;
    if (fs::exists(dir / "physfn", ec)) continue;  // an SR-IOV virtual function
    ASSIGN_OR_RETURN(PciGpuFunction function, Read(dir.filename().string()));
    gpus.push_back(std::move(function));
  }
  std::sort(gpus.begin(), gpus.end(),
            [](const PciGpuFunction& a, const PciGpuFunction& b) { return BusIdOrder(a.bus_id) < BusIdOrder(b.bus_id); });
  return gpus;
}

Status PciSysfs::CheckIommuEnabled() const {
  const fs::path groups = host_root_ / "sys/kernel/iommu_groups";
  std::error_code ec;
  fs::directory_iterator it(groups, ec);
  if (ec || it == fs::directory_iterator()) {
    return common::FailedPreconditionError(fmt::format(
        "PassthroughSupport: the IOMMU is not enabled ({} is {}): turn on VT-d/AMD-Vi in the firmware and boot "
        "with intel_iommu=on or amd_iommu=on, or turn the gate off",
        groups.string(), ec ? "missing" : "empty"));
  }
  return common::OkStatus();
}

bool PciSysfs::IommufdAvailable() const {
  std::error_code ec;
  return fs::exists(host_root_ / "dev/iommu", ec);
}

Status PciSysfs::CheckDriverLoaded(std::string_view driver) const {
  std::error_code ec;
  if (fs::is_directory(DriversDir() / driver, ec)) return common::OkStatus();
  return common::FailedPreconditionError(fmt::format(
      "PassthroughSupport: the {} driver is not loaded ({} is missing): run `modprobe {}` on the host, or list it "
      "in /etc/modules-load.d",
      driver, (DriversDir() / driver).string(), driver));
}

Status PciSysfs::Rebind(const std::string& bus_id, std::string_view driver, std::chrono::milliseconds timeout) const {
  const fs::path dir = DeviceDir(bus_id);
  std::error_code ec;
  if (!fs::exists(dir, ec)) return common::NotFoundError(fmt::format("no PCI function {} at {}", bus_id, dir.string()));
  const std::string current = LinkName(dir / "driver");
  if (current == driver) return common::OkStatus();
  RETURN_IF_ERROR(CheckDriverLoaded(driver));
  // The override makes the driver core bind this function to `driver` only
  // (vfio-pci has no id table of its own).
  RETURN_IF_ERROR(WriteSysfs(dir / "driver_override", driver));
  if (!current.empty()) {
    RETURN_IF_ERROR(WriteSysfs(DriversDir() / current / "unbind", bus_id));
    if (!AwaitChange(dir, timeout, [&] { return LinkName(dir / "driver").empty(); })) {
      return common::DeadlineExceededError(fmt::format(
          "PCI function {} is still bound to {} {} ms after writing {}", bus_id, current, timeout.count(),
          (DriversDir() / current / "unbind").string()));
    }
  }
  RETURN_IF_ERROR(WriteSysfs(DriversDir() / driver / "bind", bus_id));
  if (!AwaitChange(dir, timeout, [&] { return LinkName(dir / "driver") == driver; })) {
    const std::string now = LinkName(dir / "driver");
    return common::DeadlineExceededError(fmt::format(
        "PCI function {} did not bind to {} within {} ms of writing {}; it is on {}", bus_id, driver, timeout.count(),
        (DriversDir() / driver / "bind").string(), now.empty() ? "no driver" : now));
  }
  return common::OkStatus();
}

std::uint64_t AddressableMemoryBytes(std::string_view resource_table) {
  constexpr std::uint64_t kMemoryBar64 = 0x4;  // IORESOURCE_MEM_64 in the BAR type bits
  std::uint64_t total = 0;
  std::istringstream lines{std::string(resource_table)};
  std::string line;
  for (int bar = 0; bar < 6 && std::getline(lines, line); ++bar) {
    std::istringstream fields(line);
    std::string start_text, end_text, flags_text;
    if (!(fields >> start_text >> end_text >> flags_text)) continue;
    try {
      const std::uint64_t start = std::stoull(start_text, nullptr, 16);
      const std::uint64_t end = std::stoull(end_text, nullptr, 16);
      const std::uint64_t flags = std::stoull(flags_text, nullptr, 16);
      // The flags' bits 1-2 are the BAR's memory type in the kernel's
      // resource flags (PCI_BASE_ADDRESS_MEM_TYPE_64 is 0x4).
      if ((flags & 0x6) == kMemoryBar64 && end > start) total += end - start + 1;
    } catch (const std::exception&) {
      continue;
    }
  }
  if (total == 0) return 0;
  std::uint64_t power = 1;
  while (power < total && power != 0) power <<= 1;
  return power == 0 ? total : power;
}

std::string VfioDeviceUuid(std::string_view bus_id) {
  // RFC 4122 section 4.3: SHA-1 over the namespace's bytes and the name.
  constexpr std::array<unsigned char, 16> kDnsNamespace = {0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1,
                                                           0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8};
  std::string input(kDnsNamespace.begin(), kDnsNamespace.end());
  input.append(bus_id);
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  EVP_Digest(input.data(), input.size(), digest.data(), &length, EVP_sha1(), nullptr);
  digest[6] = static_cast<unsigned char>((digest[6] & 0x0f) | 0x50);
  digest[8] = static_cast<unsigned char>((digest[8] & 0x3f) | 0x80);
  std::string out;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    out += fmt::format("{:02x}", digest[static_cast<std::size_t>(i)]);
  }
  return out;
}

}  // namespace nvdra::gpu
