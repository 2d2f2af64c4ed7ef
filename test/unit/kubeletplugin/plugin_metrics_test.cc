#include "kubeletplugin/plugin_metrics.h"

#include <chrono>
#include <string>
#include <utility>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace nvdra::kubeletplugin {
namespace {

using nlohmann::ordered_json;

bool Contains(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

class PluginMetricsTest : public ::testing::Test {
 protected:
  common::MetricsRegistry registry_;
  PluginMetrics metrics_{registry_, "gpu.nvidia.com", "node-1", {"gpu", "mig", "vfio"}};
};

TEST_F(PluginMetricsTest, RequestAndDeviceSeriesExistAtZeroBeforeAnyRequest) {
  const std::string text = registry_.Render();
  for (const char* operation : {"prepare", "unprepare"}) {
    const std::string labels = std::string("{driver=\"gpu.nvidia.com\",operation=\"") + operation + "\"";
    EXPECT_TRUE(Contains(text, "nvidia_dra_requests_total" + labels + "} 0")) << text;
    EXPECT_TRUE(Contains(text, "nvidia_dra_requests_inflight" + labels + "} 0")) << text;
    EXPECT_TRUE(Contains(text, "nvidia_dra_request_duration_seconds_count" + labels + "} 0")) << text;
    EXPECT_TRUE(Contains(text, "nvidia_dra_request_duration_seconds_bucket" + labels + ",le=\"12.8\"} 0")) << text;
  }
  for (const char* type : {"gpu", "mig", "vfio", "unknown"}) {
    EXPECT_TRUE(Contains(text, std::string("nvidia_dra_prepared_devices{device_type=\"") + type +
                                   "\",driver=\"gpu.nvidia.com\",node=\"node-1\"} 0"))
        << text;
  }
  // Error counters appear with their first error, as upstream's.
  EXPECT_EQ(text.find("nvidia_dra_node_prepare_errors_total"), std::string::npos);
  EXPECT_TRUE(Contains(text, "# HELP nvidia_dra_requests_total [ALPHA] Total number of DRA prepare and unprepare "
                             "requests."));
  EXPECT_TRUE(Contains(text, "# TYPE nvidia_dra_request_duration_seconds histogram"));
}

TEST_F(PluginMetricsTest, SuccessCountsAndObservesDuration) {
  metrics_.ObserveSuccess(ClaimOperation::kPrepare, std::chrono::milliseconds(70));
  metrics_.ObserveSuccess(ClaimOperation::kPrepare, std::chrono::milliseconds(30));
  const std::string text = registry_.Render();
  EXPECT_TRUE(Contains(text, "nvidia_dra_requests_total{driver=\"gpu.nvidia.com\",operation=\"prepare\"} 2"));
  EXPECT_TRUE(Contains(text, "nvidia_dra_requests_total{driver=\"gpu.nvidia.com\",operation=\"unprepare\"} 0"));
  EXPECT_TRUE(Contains(
      text, "nvidia_dra_request_duration_seconds_bucket{driver=\"gpu.nvidia.com\",operation=\"prepare\",le=\"0.05\"} 1"));
  EXPECT_TRUE(Contains(
      text, "nvidia_dra_request_duration_seconds_bucket{driver=\"gpu.nvidia.com\",operation=\"prepare\",le=\"0.1\"} 2"));
  const double sum = std::chrono::duration<double>(std::chrono::milliseconds(70)).count() +
                    std::chrono::duration<double>(std::chrono::milliseconds(30)).count();
  EXPECT_TRUE(Contains(text, "nvidia_dra_request_duration_seconds_sum{driver=\"gpu.nvidia.com\",operation=\"prepare\"} " +
                                 common::FormatMetricValue(sum)));
}

TEST_F(PluginMetricsTest, InFlightIsRaisedForTheGuardsLifetime) {
  auto gauge = registry_.AddGauge("nvidia_dra_requests_inflight",
                                  "[ALPHA] Number of in-flight DRA prepare and unprepare requests.",
                                  {"driver", "operation"})
                   .WithLabels({"gpu.nvidia.com", "unprepare"});
  {
    PluginMetrics::InFlight first = metrics_.TrackInFlight(ClaimOperation::kUnprepare);
    EXPECT_EQ(gauge.Value(), 1);
    PluginMetrics::InFlight moved(std::move(first));
    EXPECT_EQ(gauge.Value(), 1);
  }
  EXPECT_EQ(gauge.Value(), 0);
}

TEST_F(PluginMetricsTest, ErrorsByOperationAndType) {
  metrics_.CountError(ClaimOperation::kPrepare, kErrorLockAcquire);
  metrics_.CountError(ClaimOperation::kPrepare, kErrorPrepareDevices);
  metrics_.CountError(ClaimOperation::kPrepare, kErrorPrepareDevices);
  metrics_.CountError(ClaimOperation::kUnprepare, kErrorUnprepareDevices);
  metrics_.CountPublishResourcesError(ClaimOperation::kUnprepare);
  const std::string text = registry_.Render();
  EXPECT_TRUE(Contains(text,
                       "nvidia_dra_node_prepare_errors_total{driver=\"gpu.nvidia.com\",error_type=\"lock_acquire\"} 1"));
  EXPECT_TRUE(Contains(
      text, "nvidia_dra_node_prepare_errors_total{driver=\"gpu.nvidia.com\",error_type=\"prepare_devices\"} 2"));
  EXPECT_TRUE(Contains(
      text, "nvidia_dra_node_unprepare_errors_total{driver=\"gpu.nvidia.com\",error_type=\"unprepare_devices\"} 1"));
  EXPECT_TRUE(Contains(
      text, "nvidia_dra_node_unprepare_errors_total{driver=\"gpu.nvidia.com\",error_type=\"publish_resources\"} 1"));
}

PreparedDeviceGroup Group(std::vector<PreparedDeviceKind> kinds) {
  PreparedDeviceGroup group{.devices = {}, .config_state = GpuConfigState{}};
  for (PreparedDeviceKind& kind : kinds) {
    group.devices.push_back({.kind = std::move(kind), .device = {}});
  }
  return group;
}

CheckpointedClaim Entry(ClaimCheckpointState state, std::vector<PreparedDeviceGroup> groups) {
  CheckpointedClaim entry;
  entry.state = state;
  entry.prepared_devices = std::move(groups);
  return entry;
}

TEST_F(PluginMetricsTest, PreparedDevicesCountsCompletedClaimsByKind) {
  Checkpoint checkpoint;
  checkpoint.claims["a"] = Entry(ClaimCheckpointState::kPrepareCompleted,
                                 {Group({PreparedGpu{}, PreparedMig{}}), Group({PreparedGpu{}})});
  // Kinds this plugin does not publish count as unknown.
  checkpoint.claims["b"] =
      Entry(ClaimCheckpointState::kPrepareCompleted, {Group({PreparedChannel{}, PreparedDaemon{}})});
  // Not completed: not counted.
  checkpoint.claims["c"] = Entry(ClaimCheckpointState::kPrepareStarted, {Group({PreparedVfio{}})});
  metrics_.SetPreparedDevices(checkpoint);
  std::string text = registry_.Render();
  const auto line = [](const char* type, int count) {
    return std::string("nvidia_dra_prepared_devices{device_type=\"") + type +
           "\",driver=\"gpu.nvidia.com\",node=\"node-1\"} " + std::to_string(count);
  };
  EXPECT_TRUE(Contains(text, line("gpu", 2))) << text;
  EXPECT_TRUE(Contains(text, line("mig", 1))) << text;
  EXPECT_TRUE(Contains(text, line("vfio", 0))) << text;
  EXPECT_TRUE(Contains(text, line("unknown", 2))) << text;

  // Recomputed, not accumulated: types gone from the checkpoint fall to 0.
  checkpoint.claims.erase("a");
  checkpoint.claims.erase("b");
  metrics_.SetPreparedDevices(checkpoint);
  text = registry_.Render();
  EXPECT_TRUE(Contains(text, line("gpu", 0))) << text;
  EXPECT_TRUE(Contains(text, line("mig", 0))) << text;
  EXPECT_TRUE(Contains(text, line("unknown", 0))) << text;
}

}  // namespace
}  // namespace nvdra::kubeletplugin
