#pragma once

// ProcessMetrics: the process_* series every Prometheus client library
// exports (client_golang's process collector: CPU seconds, resident and
// virtual memory, start time, open and maximum file descriptors), read from
// /proc/self when Update is called (the start time once, at construction),
// so the usual alerts and dashboards work
// on our binaries as on the Go driver's.
//
// Ownership: registers its families in the registry, which must outlive it.
// Thread-safety: Update may be called from any thread (one at a time is
// enough: the metrics server calls it per scrape under its own request
// handling; concurrent calls are safe, each sets absolute values).

#include <filesystem>

#include "common/metrics.h"
#include "common/mutex.h"

namespace nvdra::common {

class ProcessMetrics {
 public:
  // `proc_self`: /proc/self (tests point it elsewhere).
  explicit ProcessMetrics(MetricsRegistry& registry, std::filesystem::path proc_self = "/proc/self");

  // Reads /proc and sets the series; what cannot be read keeps its last value.
  void Update() EXCLUDES(mu_);

 private:
  const std::filesystem::path proc_self_;
  Counter cpu_seconds_;
  Gauge resident_bytes_;
  Gauge virtual_bytes_;
  Gauge start_time_seconds_;
  Gauge open_fds_;
  Gauge max_fds_;
  Mutex mu_;
  double reported_cpu_seconds_ GUARDED_BY(mu_) = 0;  // what cpu_seconds_ holds
};

}  // namespace nvdra::common
