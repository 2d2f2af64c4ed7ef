#include "kubeletplugin/plugin_metrics.h"

#include <algorithm>
#include <map>
#include <utility>

namespace nvdra::kubeletplugin {

namespace {

// Upstream registers these through k8s.io/component-base, which prefixes the
// help text with the stability level; ours reads the same.
constexpr const char* kHelpRequests = "[ALPHA] Total number of DRA prepare and unprepare requests.";
constexpr const char* kHelpDuration = "[ALPHA] Duration of DRA prepare and unprepare requests.";
constexpr const char* kHelpInFlight = "[ALPHA] Number of in-flight DRA prepare and unprepare requests.";
constexpr const char* kHelpPrepared = "[ALPHA] Current number of prepared devices by device type.";
constexpr const char* kHelpPrepareErrors = "[ALPHA] Total number of failures during DRA node prepare for kubelet plugins.";
constexpr const char* kHelpUnprepareErrors =
    "[ALPHA] Total number of failures during DRA node unprepare for kubelet plugins.";

std::vector<std::string> WithUnknown(std::vector<std::string> types) {
  if (std::find(types.begin(), types.end(), kUnknownDeviceType) == types.end()) {
    types.emplace_back(kUnknownDeviceType);
  }
  return types;
}

}  // namespace

std::string_view ClaimOperationName(ClaimOperation operation) {
  switch (operation) {
    case ClaimOperation::kPrepare:
      return "prepare";
    case ClaimOperation::kUnprepare:
      return "unprepare";
  }
  return "unknown";
}

PluginMetrics::PluginMetrics(common::MetricsRegistry& registry, std::string driver, std::string node,
                             std::vector<std::string> device_types)
    : driver_(std::move(driver)),
      node_(std::move(node)),
      device_types_(WithUnknown(std::move(device_types))),
      requests_total_(registry.AddCounter("nvidia_dra_requests_total", kHelpRequests, {"driver", "operation"})),
      request_duration_(registry.AddHistogram("nvidia_dra_request_duration_seconds", kHelpDuration,
                                              {"driver", "operation"}, common::ExponentialBuckets(0.05, 2, 9))),
      requests_inflight_(registry.AddGauge("nvidia_dra_requests_inflight", kHelpInFlight, {"driver", "operation"})),
      prepared_devices_(
          registry.AddGauge("nvidia_dra_prepared_devices", kHelpPrepared, {"node", "driver", "device_type"})),
      prepare_errors_(
          registry.AddCounter("nvidia_dra_node_prepare_errors_total", kHelpPrepareErrors, {"driver", "error_type"})),
      unprepare_errors_(registry.AddCounter("nvidia_dra_node_unprepare_errors_total", kHelpUnprepareErrors,
                                            {"driver", "error_type"})) {
  // Upstream's InitializeDRARequestMetrics: request series visible at zero.
  for (ClaimOperation operation : {ClaimOperation::kPrepare, ClaimOperation::kUnprepare}) {
    const std::string name(ClaimOperationName(operation));
    requests_total_.WithLabels({driver_, name});
    request_duration_.WithLabels({driver_, name});
    requests_inflight_.WithLabels({driver_, name});
  }
  for (const std::string& type : device_types_) prepared_devices_.WithLabels({node_, driver_, type});
}

PluginMetrics::InFlight PluginMetrics::TrackInFlight(ClaimOperation operation) {
  return InFlight(requests_inflight_.WithLabels({driver_, std::string(ClaimOperationName(operation))}));
}

void PluginMetrics::ObserveSuccess(ClaimOperation operation, std::chrono::duration<double> elapsed) {
  const std::string name(ClaimOperationName(operation));
  requests_total_.WithLabels({driver_, name}).Inc();
  request_duration_.WithLabels({driver_, name}).Observe(elapsed.count());
}

void PluginMetrics::CountError(ClaimOperation operation, std::string_view error_type) {
  common::CounterFamily& family = operation == ClaimOperation::kPrepare ? prepare_errors_ : unprepare_errors_;
  family.WithLabels({driver_, std::string(error_type)}).Inc();
}

void PluginMetrics::SetPreparedDevices(const Checkpoint& checkpoint) {
  std::map<std::string, int, std::less<>> counts;
  for (const auto& [uid, entry] : checkpoint.claims) {
    if (entry.state != ClaimCheckpointState::kPrepareCompleted) continue;
    for (const PreparedDeviceGroup& group : entry.prepared_devices) {
      for (const PreparedDeviceEntry& device : group.devices) {
        std::string type(PreparedDeviceKindName(device.kind));
        if (std::find(device_types_.begin(), device_types_.end(), type) == device_types_.end()) {
          type = kUnknownDeviceType;
        }
        ++counts[type];
      }
    }
  }
  for (const std::string& type : device_types_) {
    auto it = counts.find(type);
    prepared_devices_.WithLabels({node_, driver_, type}).Set(it == counts.end() ? 0 : it->second);
  }
}

}  // namespace nvdra::kubeletplugin
