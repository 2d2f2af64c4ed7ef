#pragma once

// Device health of the GPU plugin (gate NVMLDeviceHealthCheck): NVML events
// become device taints, kept across plugin restarts, which the plugin puts
// into its ResourceSlices, the kubelet's health stream and Node Events.
//
// Defines: DeviceTaint, TaintEffect, WatchedDevice,
// WatchedDevicesOf, DeviceHealthBook, HealthNote, NvmlHealthMonitor,
// DeviceTaintJson.
//
// Taints, with upstream's keys and effects (upstream-inventory.md 8.1):
//   XID event                 gpu.nvidia.com/xid=<xid>     NoSchedule; None for an
//                             application XID (13, 31, 43, 45, 68, 109 and
//                             --additional-xids-to-ignore)
//   double-bit ECC event      gpu.nvidia.com/xid=48        the XID NVIDIA's driver
//                             logs for it, so one key covers both
//   GPU lost                  gpu.nvidia.com/gpu-lost      NoSchedule
//   events not watchable      gpu.nvidia.com/unmonitored   None
//   NVLink fabric (GB200)     gpu.nvidia.com/nvlink-fabric=unhealthy  NoSchedule, when
//                             the fabric's health summary is UNHEALTHY or its
//                             registration failed; =limited-capacity  None
// A device keeps one taint per key, the latest event winning. An event on a
// whole GPU (no GPU/compute instance in it) taints the GPU and every MIG
// device on it; one naming a GPU and compute instance taints that MIG device.
//
// Recovery (what upstream lacks: its taints stay until the plugin restarts):
//   - gpu-lost goes by itself when the GPU answers NVML again (asked only
//     while a GPU is marked lost, at each turn of the event wait);
//   - an XID taint stays until an operator clears it (DeviceHealthBook::Clear,
//     reached through a Node annotation, docs/device-health.md) or the node
//     reboots: the record is of one boot, and a reboot resets the GPUs.
//   - unmonitored is worked out again at every start;
//   - nvlink-fabric follows the fabric info: NVML has no event for it, so the
//     fabric info of fabric-attached GPUs is read once per wait turn (one
//     cheap call per GPU; nothing on GPUs without a fabric).
//
// Ownership: DeviceHealthBook owns its record file; NvmlHealthMonitor owns its
// event set and thread and borrows the Library and the book, which must
// outlive it. Thread-safety: DeviceHealthBook is thread-safe; the monitor's
// callbacks run on its thread, one at a time.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "gpu/config.h"
#include "gpu/discovery.h"
#include "nvml/library.h"

namespace nvdra::gpu {

inline constexpr std::string_view kTaintKeyXid = "gpu.nvidia.com/xid";
inline constexpr std::string_view kTaintKeyGpuLost = "gpu.nvidia.com/gpu-lost";
inline constexpr std::string_view kTaintKeyUnmonitored = "gpu.nvidia.com/unmonitored";
// Ours (upstream does not watch the fabric): value "unhealthy" (NoSchedule)
// or "limited-capacity" (None).
inline constexpr std::string_view kTaintKeyNvlinkFabric = "gpu.nvidia.com/nvlink-fabric";

// The XID NVIDIA's driver reports for a double-bit ECC error.
inline constexpr std::uint64_t kDoubleBitEccXid = 48;

enum class TaintEffect { kNone, kNoSchedule };

// A device taint as resource.k8s.io/v1 spells it (key, value, effect), and
// when this plugin saw the condition (the kubelet's lastUpdated; the API
// server stamps the taint's own timeAdded).
struct DeviceTaint {
  std::string key;
  std::string value{};
  TaintEffect effect = TaintEffect::kNoSchedule;
  std::chrono::system_clock::time_point since{};

  // "XID 79", "GPU lost", "not monitored".
  [[nodiscard]] std::string Describe() const;
  friend bool operator==(const DeviceTaint&, const DeviceTaint&) = default;
};

// {"key", "value" (when set), "effect"}: an entry of a Device's taints.
nlohmann::json DeviceTaintJson(const DeviceTaint& taint);

// A published device and where NVML events name it.
struct WatchedDevice {
  std::string name;      // "gpu-0", "gpu-0-mig-1g10gb-19-0"
  std::string gpu_uuid;  // the (parent) GPU
  // MIG devices: their GPU and compute instance; empty for a full GPU.
  std::optional<std::uint32_t> gpu_instance_id;
  std::optional<std::uint32_t> compute_instance_id;
};

// The full GPUs (MIG off) and static MIG devices of `inventory`, as the
// plugin publishes them.
std::vector<WatchedDevice> WatchedDevicesOf(const NodeInventory& inventory);

// Taints per device: the health state machine and its record file. A device
// is healthy when it has no taint of effect NoSchedule.
class DeviceHealthBook {
 public:
  // Reads `record_file` ({"bootID", "devices": {name: [taint...]}}); absent
  // means nothing recorded. A record of another boot is dropped, and so are
  // devices not in `devices`. kDataLoss names the file and the fix when it
  // cannot be parsed.
  static common::StatusOr<std::unique_ptr<DeviceHealthBook>> Open(std::filesystem::path record_file,
                                                                 std::string boot_id,
                                                                 std::set<std::string> devices);

  // Sets `taint` on each of `devices` (replacing its taint of the same key).
  // True when anything changed. In memory only: Commit writes the record.
  bool Set(const std::vector<std::string>& devices, const DeviceTaint& taint) EXCLUDES(mu_);
  // Removes the taints with `key` (empty: every key) from `devices` (empty:
  // every device). True when anything changed; in memory as Set.
  bool Clear(const std::vector<std::string>& devices, std::string_view key) EXCLUDES(mu_);
  // Writes the record if anything changed since the last write (one write
  // for a batch of changes). On error the changes stay in memory and the
  // next Commit tries again.
  common::Status Commit() EXCLUDES(mu_);

  // Devices with at least one taint, each taint list ordered by key.
  [[nodiscard]] std::map<std::string, std::vector<DeviceTaint>> Taints() const EXCLUDES(mu_);
  [[nodiscard]] const std::set<std::string>& devices() const { return devices_; }
  // Record writes so far (for tests of batching).
  [[nodiscard]] std::uint64_t writes() const EXCLUDES(mu_);

 private:
  DeviceHealthBook(std::filesystem::path record_file, std::string boot_id, std::set<std::string> devices)
      : record_file_(std::move(record_file)), boot_id_(std::move(boot_id)), devices_(std::move(devices)) {}
  common::Status WriteLocked() const REQUIRES(mu_);
  bool ClearLocked(const std::string& device, std::string_view key) REQUIRES(mu_);

  const std::filesystem::path record_file_;
  const std::string boot_id_;
  const std::set<std::string> devices_;
  mutable common::Mutex mu_;
  std::map<std::string, std::map<std::string, DeviceTaint>> taints_ GUARDED_BY(mu_);
  bool dirty_ GUARDED_BY(mu_) = false;
  std::uint64_t writes_ GUARDED_BY(mu_) = 0;
};

// What changed, for people: one per condition seen or gone in a batch. A
// batch keeps one note per devices and taint key (the latest wins), so a
// flood of XIDs on one GPU is one Node Event, not a thousand that use up the
// Node's Event budget.
struct HealthNote {
  bool recovered = false;            // a condition went away
  std::vector<std::string> devices;  // device names
  std::string text;                  // "XID 79 on GPU-... (NoSchedule)"
  std::string key{};                 // the taint key it is about ("" for others)
  std::size_t repeats = 1;           // conditions of this key the batch saw on these devices
};

struct HealthMonitorOptions {
  std::vector<WatchedDevice> devices;
  XidPolicy xids;
  // How long one event wait lasts: how soon a stop is noticed and how often
  // a lost GPU is asked whether it answers again.
  std::chrono::milliseconds wait_turn = std::chrono::seconds(1);
  // Events read in one go before the book is written and the change
  // reported, so a flood costs one write and one publish per batch.
  std::size_t max_batch = 256;
  // After the book changed: the notes of the batch. On the monitor thread.
  std::function<void(const std::vector<HealthNote>& notes)> on_change;
};

// Waits on an NVML event set for XID, double-bit ECC and single-bit ECC
// events (masked by what each GPU supports, as upstream) and turns them into
// taints in the book. A GPU whose events cannot be registered gets the
// unmonitored taint; a GPU that registers clears it.
class NvmlHealthMonitor {
 public:
  // Creates the set, registers every GPU of `options.devices` and starts
  // the thread. kUnavailable when NVML cannot make an event set.
  static common::StatusOr<std::unique_ptr<NvmlHealthMonitor>> Start(const nvml::Library& library,
                                                                     DeviceHealthBook& book,
                                                                     HealthMonitorOptions options);
  ~NvmlHealthMonitor();  // stops and joins the thread (within one wait turn)
  NvmlHealthMonitor(const NvmlHealthMonitor&) = delete;
  NvmlHealthMonitor& operator=(const NvmlHealthMonitor&) = delete;

  // Events taken from the set so far (for logs and tests).
  [[nodiscard]] std::uint64_t events_seen() const { return events_seen_.load(); }

 private:
  NvmlHealthMonitor(const nvml::Library& library, nvml::EventSet set, DeviceHealthBook& book,
                    HealthMonitorOptions options);
  void Run(std::stop_token stop);
  // Notes of registering every GPU (unmonitored set or cleared).
  std::vector<HealthNote> RegisterAll();
  // The taint an event gives, and the devices it lands on; empty devices
  // when it names none of ours or is not a health event.
  void Apply(const nvml::Event& event, std::vector<HealthNote>& notes);
  void ApplyGpuLost(std::vector<HealthNote>& notes);
  void CheckLostGpus(std::vector<HealthNote>& notes);
  void CheckFabric(std::vector<HealthNote>& notes);
  void Commit();
  std::vector<std::string> DevicesOfGpu(const std::string& uuid) const;
  void Record(const std::vector<std::string>& devices, const DeviceTaint& taint, std::string text,
              std::vector<HealthNote>& notes);

  const nvml::Library& library_;
  nvml::EventSet set_;
  DeviceHealthBook& book_;
  const HealthMonitorOptions options_;
  std::set<std::string> lost_gpus_;  // monitor thread only
  std::vector<std::string> fabric_gpus_;  // fabric-attached GPUs; set at Start
  std::chrono::steady_clock::time_point fabric_checked_{};  // monitor thread only
  std::atomic<std::uint64_t> events_seen_{0};
  std::jthread thread_;  // last: joined first
};

}  // namespace nvdra::gpu
