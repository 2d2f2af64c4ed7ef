#include "common/metrics.h"

#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace nvdra::common {
namespace {

TEST(FormatMetricValueTest, MatchesGoShortestGFormat) {
  // Expected strings from Go's strconv.FormatFloat(v, 'g', -1, 64).
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(1), "1");
  EXPECT_EQ(FormatMetricValue(3), "3");
  EXPECT_EQ(FormatMetricValue(-2), "-2");
  EXPECT_EQ(FormatMetricValue(0.05), "0.05");
  EXPECT_EQ(FormatMetricValue(1.6), "1.6");
  EXPECT_EQ(FormatMetricValue(12.8), "12.8");
  EXPECT_EQ(FormatMetricValue(100000), "100000");
  EXPECT_EQ(FormatMetricValue(123456), "123456");
  EXPECT_EQ(FormatMetricValue(1234567), "1.234567e+06");
  EXPECT_EQ(FormatMetricValue(1e6), "1e+06");
  EXPECT_EQ(FormatMetricValue(1e21), "1e+21");
  EXPECT_EQ(FormatMetricValue(0.0001), "0.0001");
  EXPECT_EQ(FormatMetricValue(0.00001), "1e-05");
  EXPECT_EQ(FormatMetricValue(2.5e-7), "2.5e-07");
  EXPECT_EQ(FormatMetricValue(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::quiet_NaN()), "NaN");
}

TEST(ExponentialBucketsTest, UpstreamRequestDurationBuckets) {
  EXPECT_EQ(ExponentialBuckets(0.05, 2, 9),
            (std::vector<double>{0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8}));
}

TEST(MetricsRegistryTest, EmptyRegistryAndFamiliesWithoutSeriesRenderNothing) {
  MetricsRegistry registry;
  EXPECT_EQ(registry.Render(), "");
  registry.AddCounter("a_total", "A.", {"x"});
  registry.AddGauge("b", "B.", {});
  EXPECT_EQ(registry.Render(), "");
}

TEST(MetricsRegistryTest, CounterRendersHelpTypeAndPrecreatedZeroSeries) {
  MetricsRegistry registry;
  CounterFamily requests = registry.AddCounter("nvidia_dra_requests_total", "Total requests.", {"driver", "operation"});
  requests.WithLabels({"gpu.nvidia.com", "unprepare"});
  Counter prepare = requests.WithLabels({"gpu.nvidia.com", "prepare"});
  prepare.Inc();
  prepare.Inc(2);
  EXPECT_EQ(prepare.Value(), 3);
  EXPECT_EQ(registry.Render(),
            "# HELP nvidia_dra_requests_total Total requests.\n"
            "# TYPE nvidia_dra_requests_total counter\n"
            "nvidia_dra_requests_total{driver=\"gpu.nvidia.com\",operation=\"prepare\"} 3\n"
            "nvidia_dra_requests_total{driver=\"gpu.nvidia.com\",operation=\"unprepare\"} 0\n");
}

TEST(MetricsRegistryTest, FamiliesSortedByNameLabelsByNameSeriesByValues) {
  MetricsRegistry registry;
  GaugeFamily devices = registry.AddGauge("z_prepared_devices", "Z.", {"node", "driver", "device_type"});
  devices.WithLabels({"node-b", "gpu.nvidia.com", "gpu"}).Set(2);
  devices.WithLabels({"node-a", "gpu.nvidia.com", "mig"}).Set(1);
  devices.WithLabels({"node-a", "gpu.nvidia.com", "gpu"}).Set(0);
  registry.AddGauge("a_plain", "A.", {}).WithLabels({}).Set(-1.5);
  EXPECT_EQ(registry.Render(),
            "# HELP a_plain A.\n"
            "# TYPE a_plain gauge\n"
            "a_plain -1.5\n"
            "# HELP z_prepared_devices Z.\n"
            "# TYPE z_prepared_devices gauge\n"
            "z_prepared_devices{device_type=\"gpu\",driver=\"gpu.nvidia.com\",node=\"node-a\"} 0\n"
            "z_prepared_devices{device_type=\"gpu\",driver=\"gpu.nvidia.com\",node=\"node-b\"} 2\n"
            "z_prepared_devices{device_type=\"mig\",driver=\"gpu.nvidia.com\",node=\"node-a\"} 1\n");
}

TEST(MetricsRegistryTest, GaugeSetAddIncDec) {
  MetricsRegistry registry;
  Gauge inflight = registry.AddGauge("inflight", "In flight.", {"op"}).WithLabels({"prepare"});
  inflight.Inc();
  inflight.Inc();
  inflight.Dec();
  EXPECT_EQ(inflight.Value(), 1);
  inflight.Add(2.5);
  EXPECT_EQ(inflight.Value(), 3.5);
  inflight.Set(0);
  EXPECT_EQ(inflight.Value(), 0);
}

TEST(MetricsRegistryTest, HistogramBucketsAreCumulativeInclusiveWithInfSumAndCount) {
  MetricsRegistry registry;
  HistogramFamily durations =
      registry.AddHistogram("d_seconds", "Durations.", {"op"}, std::vector<double>{0.05, 0.1, 0.2});
  Histogram h = durations.WithLabels({"prepare"});
  h.Observe(0.05);  // on the bound: counted in le="0.05"
  h.Observe(0.07);
  h.Observe(0.5);   // above every bound: only +Inf
  EXPECT_EQ(h.Count(), 3u);
  EXPECT_DOUBLE_EQ(h.Sum(), 0.62);
  EXPECT_EQ(h.CumulativeCount(0.05), 1u);
  EXPECT_EQ(h.CumulativeCount(0.1), 2u);
  EXPECT_EQ(h.CumulativeCount(0.2), 2u);
  EXPECT_EQ(h.CumulativeCount(std::numeric_limits<double>::infinity()), 3u);
  durations.WithLabels({"unprepare"});
  EXPECT_EQ(registry.Render(),
            "# HELP d_seconds Durations.\n"
            "# TYPE d_seconds histogram\n"
            "d_seconds_bucket{op=\"prepare\",le=\"0.05\"} 1\n"
            "d_seconds_bucket{op=\"prepare\",le=\"0.1\"} 2\n"
            "d_seconds_bucket{op=\"prepare\",le=\"0.2\"} 2\n"
            "d_seconds_bucket{op=\"prepare\",le=\"+Inf\"} 3\n"
            "d_seconds_sum{op=\"prepare\"} " + FormatMetricValue(0.05 + 0.07 + 0.5) + "\n"
            "d_seconds_count{op=\"prepare\"} 3\n"
            "d_seconds_bucket{op=\"unprepare\",le=\"0.05\"} 0\n"
            "d_seconds_bucket{op=\"unprepare\",le=\"0.1\"} 0\n"
            "d_seconds_bucket{op=\"unprepare\",le=\"0.2\"} 0\n"
            "d_seconds_bucket{op=\"unprepare\",le=\"+Inf\"} 0\n"
            "d_seconds_sum{op=\"unprepare\"} 0\n"
            "d_seconds_count{op=\"unprepare\"} 0\n");
}

TEST(MetricsRegistryTest, HistogramWithoutLabelsHasOnlyLe) {
  MetricsRegistry registry;
  registry.AddHistogram("h", "H.", {}, {1}).WithLabels({}).Observe(2);
  EXPECT_EQ(registry.Render(),
            "# HELP h H.\n# TYPE h histogram\n"
            "h_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 1\nh_sum 2\nh_count 1\n");
}

TEST(MetricsRegistryTest, EscapesLabelValuesAndHelp) {
  MetricsRegistry registry;
  registry.AddCounter("c_total", "Help with \\ and\nnewline \"kept\".", {"v"})
      .WithLabels({"a\\b\"c\nd"})
      .Inc();
  EXPECT_EQ(registry.Render(),
            "# HELP c_total Help with \\\\ and\\nnewline \"kept\".\n"
            "# TYPE c_total counter\n"
            "c_total{v=\"a\\\\b\\\"c\\nd\"} 1\n");
}

TEST(MetricsRegistryTest, SameDefinitionTwiceSharesTheFamily) {
  MetricsRegistry registry;
  registry.AddCounter("c_total", "C.", {"x"}).WithLabels({"1"}).Inc();
  Counter again = registry.AddCounter("c_total", "C.", {"x"}).WithLabels({"1"});
  EXPECT_EQ(again.Value(), 1);
}

TEST(MetricsRegistryTest, HandlesAreSharedPerSeriesAcrossThreads) {
  MetricsRegistry registry;
  CounterFamily family = registry.AddCounter("c_total", "C.", {"x"});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&family] {
      for (int i = 0; i < 1000; ++i) family.WithLabels({"same"}).Inc();
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(family.WithLabels({"same"}).Value(), 4000);
}

using MetricsRegistryDeathTest = ::testing::Test;

TEST_F(MetricsRegistryDeathTest, MisuseAborts) {
  MetricsRegistry registry;
  EXPECT_DEATH(registry.AddCounter("bad-name", "x", {}), "invalid metric name");
  EXPECT_DEATH(registry.AddCounter("ok_total", "x", {"__reserved"}), "invalid label name");
  EXPECT_DEATH(registry.AddHistogram("h", "x", {"le"}, {1}), "reserved");
  EXPECT_DEATH(registry.AddHistogram("h", "x", {}, {2, 1}), "strictly increasing");
  registry.AddCounter("c_total", "C.", {"x"});
  EXPECT_DEATH(registry.AddGauge("c_total", "C.", {"x"}), "different definitions");
  EXPECT_DEATH(registry.AddCounter("c_total", "C.", {"x"}).WithLabels({"1", "2"}), "2 label values for 1 labels");
  EXPECT_DEATH(registry.AddCounter("c_total", "C.", {"x"}).WithLabels({"1"}).Inc(-1), "cannot decrease");
}

}  // namespace
}  // namespace nvdra::common
