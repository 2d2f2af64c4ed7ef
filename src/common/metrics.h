#pragma once

// A small Prometheus metrics registry: counters, gauges and histograms with
// label sets, rendered in the text exposition format 0.0.4 (what upstream's
// promhttp handler serves to a scraper that does not ask for protobuf or
// OpenMetrics). Debian bookworm ships no C++ Prometheus client, hence ours.
//
// Defines: MetricsRegistry, CounterFamily/Counter, GaugeFamily/Gauge,
// HistogramFamily/Histogram, ExponentialBuckets, FormatMetricValue,
// kMetricsContentType.
//
// Rendering follows client_golang's text encoder, so a scrape of ours reads
// like a scrape of the Go driver: families sorted by name, families without
// series omitted, label pairs sorted by label name (a histogram's "le" last),
// series sorted by their label values, floats in Go's shortest 'g' format
// ("0.05", "1e+06", "+Inf"), HELP text escaping \ and newline, label values
// escaping \, " and newline.
//
// Ownership: the registry owns its families and their series; family
// references and series handles stay valid until the registry is destroyed
// (series are never removed). Thread-safety: thread-safe; every family has
// its own mutex, held only while a value is read or updated.
//
// Misuse is a programmer error and aborts with a message: an invalid metric
// or label name, a name registered twice with a different definition, a
// wrong number of label values, buckets not strictly increasing.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace nvdra::common {

// The Content-Type of Render()'s output.
inline constexpr std::string_view kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

// `count` upper bounds start, start*factor, ..., start*factor^(count-1)
// (client_golang's ExponentialBuckets). Aborts unless start > 0, factor > 1,
// count >= 1.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// A sample value as the Go text encoder writes it: "+Inf", "-Inf", "NaN",
// otherwise strconv.FormatFloat(v, 'g', -1, 64): the shortest digits that
// round-trip, in exponent form when the decimal exponent is < -4 or >= 6
// ("1e+06", "1.234567e+06", "100000", "1e-05").
std::string FormatMetricValue(double value);

namespace internal {
enum class MetricType { kCounter, kGauge, kHistogram };

// One series' state; which fields are used depends on the family's type.
struct MetricCell {
  double value = 0;                     // counter, gauge; histogram: sum
  std::uint64_t count = 0;              // histogram: observations
  std::vector<std::uint64_t> buckets;   // histogram: per-bucket (not cumulative) counts
};

class MetricFamily {
 public:
  MetricFamily(std::string name, std::string help, MetricType type, std::vector<std::string> label_names,
               std::vector<double> bounds);
  MetricFamily(const MetricFamily&) = delete;
  MetricFamily& operator=(const MetricFamily&) = delete;

  // The series with these label values (in label_names order), created at
  // zero if new. Aborts on a wrong number of values.
  MetricCell* Series(std::vector<std::string> label_values) EXCLUDES(mu_);
  void Render(std::string& out) const EXCLUDES(mu_);

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  MetricType type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  const std::vector<double>& bounds() const { return bounds_; }
  // Guards the contents of every cell Series returned.
  Mutex& mutex() const RETURN_CAPABILITY(mu_) { return mu_; }

 private:
  const std::string name_;
  const std::string help_;
  const MetricType type_;
  const std::vector<std::string> label_names_;
  const std::vector<double> bounds_;  // histogram upper bounds, without +Inf
  mutable Mutex mu_;  // guards series_ and every cell's contents
  // Keyed by label values; cells are boxed so handles survive rehashing.
  std::map<std::vector<std::string>, std::unique_ptr<MetricCell>> series_ GUARDED_BY(mu_);
};
}  // namespace internal

// A handle to one counter series. Copyable; valid while its registry lives.
class Counter {
 public:
  // Adds `delta`; aborts if it is negative (counters only go up).
  void Inc(double delta = 1);
  double Value() const;

 private:
  friend class CounterFamily;
  Counter(internal::MetricFamily* family, internal::MetricCell* cell) : family_(family), cell_(cell) {}
  internal::MetricFamily* family_;
  internal::MetricCell* cell_ PT_GUARDED_BY(family_->mutex());
};

// A handle to one gauge series. Copyable; valid while its registry lives.
class Gauge {
 public:
  void Set(double value);
  void Add(double delta);
  void Inc() { Add(1); }
  void Dec() { Add(-1); }
  double Value() const;

 private:
  friend class GaugeFamily;
  Gauge(internal::MetricFamily* family, internal::MetricCell* cell) : family_(family), cell_(cell) {}
  internal::MetricFamily* family_;
  internal::MetricCell* cell_ PT_GUARDED_BY(family_->mutex());
};

// A handle to one histogram series. Copyable; valid while its registry lives.
class Histogram {
 public:
  // Counts `value` in the first bucket whose upper bound is >= value (the
  // bounds are inclusive, as in Prometheus), or only in +Inf.
  void Observe(double value);
  std::uint64_t Count() const;
  double Sum() const;
  // Cumulative count of the bucket with this upper bound (+Inf: Count()).
  // Aborts for a bound the family does not have.
  std::uint64_t CumulativeCount(double upper_bound) const;

 private:
  friend class HistogramFamily;
  Histogram(internal::MetricFamily* family, internal::MetricCell* cell) : family_(family), cell_(cell) {}
  internal::MetricFamily* family_;
  internal::MetricCell* cell_ PT_GUARDED_BY(family_->mutex());
};

// Families: WithLabels returns the series with these values, in the order of
// the label names the family was registered with, creating it at zero (so a
// call without an update pre-creates a series for the first scrape).
class CounterFamily {
 public:
  Counter WithLabels(std::vector<std::string> label_values);

 private:
  friend class MetricsRegistry;
  explicit CounterFamily(internal::MetricFamily* family) : family_(family) {}
  internal::MetricFamily* family_;
};

class GaugeFamily {
 public:
  Gauge WithLabels(std::vector<std::string> label_values);

 private:
  friend class MetricsRegistry;
  explicit GaugeFamily(internal::MetricFamily* family) : family_(family) {}
  internal::MetricFamily* family_;
};

class HistogramFamily {
 public:
  Histogram WithLabels(std::vector<std::string> label_values);

 private:
  friend class MetricsRegistry;
  explicit HistogramFamily(internal::MetricFamily* family) : family_(family) {}
  internal::MetricFamily* family_;
};

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Registers a family, or returns the one already registered under `name`
  // when its definition (type, help, label names, buckets) is the same, so
  // two users of one metric may both register it. Names must match
  // [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* without a
  // leading "__"; "le" is reserved for histograms.
  CounterFamily AddCounter(std::string name, std::string help, std::vector<std::string> label_names);
  GaugeFamily AddGauge(std::string name, std::string help, std::vector<std::string> label_names);
  // `buckets`: strictly increasing finite upper bounds; +Inf is implied.
  HistogramFamily AddHistogram(std::string name, std::string help, std::vector<std::string> label_names,
                               std::vector<double> buckets);

  // Every family with at least one series, in text format 0.0.4.
  std::string Render() const EXCLUDES(mu_);

 private:
  internal::MetricFamily* Add(std::string name, std::string help, internal::MetricType type,
                              std::vector<std::string> label_names, std::vector<double> buckets) EXCLUDES(mu_);

  mutable Mutex mu_;  // guards families_ (not their contents)
  std::map<std::string, std::unique_ptr<internal::MetricFamily>, std::less<>> families_ GUARDED_BY(mu_);
};

}  // namespace nvdra::common
