#pragma once

// The Linux PCI driver core's answers to writes of a mock sysfs's `bind`,
// `unbind` and `driver_override` files, applied to that tree: the links,
// IOMMU group node and IOMMUFD device node a real kernel makes or removes.
// The tree is a mock driver root's sys/ and dev/ as
// test/mocknvml/make-sysfs.py lays them out; simsysfs (simsysfs_main.cc)
// calls this on inotify events, tests may call it directly.
//
// Kernel facts followed (drivers/base/bus.c bind_store/unbind_store,
// drivers/pci/pci-driver.c, drivers/vfio): unbind from a driver the device is
// not on is ENODEV; bind of a device that has a driver is EBUSY; a
// driver_override other than the driver makes the match fail (ENODEV); the
// nvidia driver matches vendor 0x10de only; vfio-pci needs an IOMMU group
// (EINVAL). Binding to vfio-pci makes /dev/vfio/<group> (if no other device
// of the group made it) and the IOMMUFD cdev /dev/vfio/devices/vfio<K> with
// <device>/vfio-dev/vfio<K> (K the lowest free); unbinding removes them, the
// group node once no device of the group is left on vfio-pci.
//
// Ordering: a bind makes the device's `driver` link last and an unbind
// removes it last, so that a writer awaiting that link (the real kernel
// applies a bind before write() returns; this one lags) finds everything
// else in place when it sees the change.
//
// Not simulated: automatic probing (new_id, drivers_probe, hot-plug), driver
// removal, SR-IOV.
//
// Owns: nothing but the root's path; the tree is its state. Thread-compatible:
// one DriverCore per root at a time (simsysfs holds a lock for that).

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nvdra::simsysfs {

inline constexpr std::string_view kNvidiaDriver = "nvidia";
inline constexpr std::string_view kVfioPciDriver = "vfio-pci";

class DriverCore {
 public:
  // `driver_root` holds sys/ and dev/ (a mock driver root).
  explicit DriverCore(std::filesystem::path driver_root);

  // Bus ids under sys/bus/pci/devices and driver names under
  // sys/bus/pci/drivers, sorted; empty when the folder is missing.
  std::vector<std::string> Devices() const;
  std::vector<std::string> Drivers() const;

  std::filesystem::path BindFile(std::string_view driver) const;
  std::filesystem::path UnbindFile(std::string_view driver) const;
  std::filesystem::path OverrideFile(std::string_view bus_id) const;

  // A write of `bus_id` to drivers/<driver>/bind (whitespace already
  // trimmed). Errors, with the errno name the kernel answers first in the
  // message: kNotFound "ENODEV: ..." (no such device, driver_override names
  // another driver, the driver does not match the device), kFailedPrecondition
  // "EBUSY: ..." (the device has a driver), kInvalidArgument "EINVAL: ..."
  // (vfio-pci and no IOMMU group); kInternal when the tree cannot be changed.
  // The tree is unchanged on every error but kInternal.
  common::Status Bind(std::string_view driver, std::string_view bus_id);
  // A write of `bus_id` to drivers/<driver>/unbind. kNotFound "ENODEV: ..."
  // when there is no such device or it is not on `driver`.
  common::Status Unbind(std::string_view driver, std::string_view bus_id);

  // What SettleOverride found and did.
  struct SettledOverride {
    std::string value;              // the override in effect, "" for none
    bool opened_for_write = false;  // its close shows up as IN_CLOSE_WRITE
    bool deferred = false;          // open elsewhere: not rewritten, see below
  };
  // After a write to the device's driver_override: rewrites the file as the
  // kernel shows it ("(null)\n" for an empty or blank write, else the value
  // and a newline) unless it already reads so. kNotFound for no such device.
  //
  // The kernel stores a write and shows its own rendering; a plain file
  // holds what was written, hence the rewrite. It is done under a write
  // lease (fcntl F_SETLEASE), so a writer that opens the file meanwhile
  // waits for it instead of having its value overwritten; when the file is
  // open elsewhere the rewrite is deferred (`deferred`, and `value` is what
  // it reads), to be tried again when that opener closes it. Where leases are unavailable (EINVAL: file system, or
  // fs.leases-enable 0) it rewrites unguarded. The caller must ignore SIGIO,
  // the signal a lease break sends.
  common::StatusOr<SettledOverride> SettleOverride(std::string_view bus_id);
  // The override in effect for `bus_id` now ("" for none, also when the
  // file reads "(null)" or cannot be read).
  std::string Override(std::string_view bus_id) const;
  // The name of the driver the device is bound to, "" for none.
  std::string DriverOf(std::string_view bus_id) const;

 private:
  // The device's real folder (sys/devices/...), kNotFound "ENODEV: ..." when
  // sys/bus/pci/devices has no such entry.
  common::StatusOr<std::filesystem::path> DeviceDir(std::string_view bus_id) const;
  common::Status MakeVfioNodes(const std::filesystem::path& device, const std::string& group);
  common::Status RemoveVfioNodes(const std::filesystem::path& device, std::string_view bus_id);

  std::filesystem::path root_;
  std::filesystem::path devices_;  // sys/bus/pci/devices
  std::filesystem::path drivers_;  // sys/bus/pci/drivers
  std::filesystem::path vfio_dev_;  // dev/vfio
};

// Whitespace (spaces, tabs, newlines) removed at both ends.
std::string Trim(std::string_view text);

}  // namespace nvdra::simsysfs
