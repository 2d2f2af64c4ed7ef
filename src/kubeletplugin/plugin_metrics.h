#pragma once

// The nvidia_dra_* metrics of a kubelet plugin, with upstream's names, labels,
// help texts and buckets (pkg/metrics/dra_requests.go):
//   nvidia_dra_requests_total{driver,operation}             successes only
//   nvidia_dra_request_duration_seconds{driver,operation}   0.05 * 2^k s, k = 0..8
//   nvidia_dra_requests_inflight{driver,operation}
//   nvidia_dra_prepared_devices{node,driver,device_type}    from the checkpoint
//   nvidia_dra_node_prepare_errors_total{driver,error_type}
//   nvidia_dra_node_unprepare_errors_total{driver,error_type}
// operation is "prepare" or "unprepare"; the request series and the
// prepared_devices series of every known device type exist at zero from
// construction, so the first scrape already shows them.
//
// Ownership: borrows the registry, which must outlive this object.
// Thread-safety: thread-safe.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/metrics.h"
#include "kubeletplugin/checkpoint.h"

namespace nvdra::kubeletplugin {

enum class ClaimOperation { kPrepare, kUnprepare };

// "prepare", "unprepare".
std::string_view ClaimOperationName(ClaimOperation operation);

// error_type values of node_(un)prepare_errors_total.
inline constexpr std::string_view kErrorLockAcquire = "lock_acquire";
inline constexpr std::string_view kErrorPrepareDevices = "prepare_devices";
inline constexpr std::string_view kErrorUnprepareDevices = "unprepare_devices";
inline constexpr std::string_view kErrorPublishResources = "publish_resources";

// device_type for a device of a kind the plugin does not list.
inline constexpr std::string_view kUnknownDeviceType = "unknown";

class PluginMetrics {
 public:
  // `device_types`: the kind keys of this plugin's checkpoint device entries
  // (GPU: "gpu", "mig", "vfio"; CD: "channel", "daemon"); "unknown" is added.
  PluginMetrics(common::MetricsRegistry& registry, std::string driver, std::string node,
                std::vector<std::string> device_types);
  PluginMetrics(const PluginMetrics&) = delete;
  PluginMetrics& operator=(const PluginMetrics&) = delete;

  // requests_inflight{operation} is one higher while this lives. Move-only.
  class InFlight {
   public:
    InFlight(InFlight&& other) noexcept : gauge_(std::exchange(other.gauge_, std::nullopt)) {}
    InFlight& operator=(InFlight&&) = delete;
    ~InFlight() {
      if (gauge_) gauge_->Dec();
    }

   private:
    friend class PluginMetrics;
    explicit InFlight(common::Gauge gauge) : gauge_(gauge) { gauge_->Inc(); }
    std::optional<common::Gauge> gauge_;
  };
  [[nodiscard]] InFlight TrackInFlight(ClaimOperation operation);

  // A request that succeeded: requests_total + 1, its duration observed.
  void ObserveSuccess(ClaimOperation operation, std::chrono::duration<double> elapsed);

  // node_prepare_errors_total or node_unprepare_errors_total{error_type} + 1
  // (error_type: one of the kError* constants).
  void CountError(ClaimOperation operation, std::string_view error_type);
  // For the plugin, when re-publishing its ResourceSlices after a claim
  // operation fails.
  void CountPublishResourcesError(ClaimOperation operation) { CountError(operation, kErrorPublishResources); }

  // Sets prepared_devices{device_type} for every known type (absent ones to
  // 0) from the devices of the checkpoint's PrepareCompleted claims. A
  // device's type is the key of its non-null kind entry; a key not listed,
  // or no non-null entry, counts as "unknown".
  void SetPreparedDevices(const Checkpoint& checkpoint);

  const std::string& driver() const { return driver_; }

 private:
  const std::string driver_;
  const std::string node_;
  const std::vector<std::string> device_types_;  // including "unknown"
  common::CounterFamily requests_total_;
  common::HistogramFamily request_duration_;
  common::GaugeFamily requests_inflight_;
  common::GaugeFamily prepared_devices_;
  common::CounterFamily prepare_errors_;
  common::CounterFamily unprepare_errors_;
};

}  // namespace nvdra::kubeletplugin
