#include "common/process_metrics.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace nvdra::common {

namespace {

// A number from /proc text; 0 for anything else (never throws).
double Number(const std::string& text) { return std::strtod(text.c_str(), nullptr); }

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The fields of /proc/<pid>/stat after the command (which may hold spaces
// and parentheses), so that fields()[0] is field 3, "state".
std::vector<std::string> StatFields(const std::string& stat) {
  std::vector<std::string> fields;
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return fields;
  std::istringstream rest(stat.substr(close + 1));
  for (std::string field; rest >> field;) fields.push_back(field);
  return fields;
}

// btime from /proc/stat: the boot time in seconds since the epoch.
double BootTimeSeconds() {
  std::istringstream in(ReadAll("/proc/stat"));
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("btime ")) return Number(line.substr(6));
  }
  return 0;
}

}  // namespace

ProcessMetrics::ProcessMetrics(MetricsRegistry& registry, std::filesystem::path proc_self)
    : proc_self_(std::move(proc_self)),
      cpu_seconds_(registry.AddCounter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                                       {})
                       .WithLabels({})),
      resident_bytes_(registry.AddGauge("process_resident_memory_bytes", "Resident memory size in bytes.", {})
                          .WithLabels({})),
      virtual_bytes_(registry.AddGauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", {})
                         .WithLabels({})),
      start_time_seconds_(registry
                              .AddGauge("process_start_time_seconds",
                                        "Start time of the process since unix epoch in seconds.", {})
                              .WithLabels({})),
      open_fds_(registry.AddGauge("process_open_fds", "Number of open file descriptors.", {}).WithLabels({})),
      max_fds_(registry.AddGauge("process_max_fds", "Maximum number of open file descriptors.", {}).WithLabels({})) {
  // The start time does not change: read once (field 22, starttime, in
  // clock ticks after boot).
  const std::vector<std::string> fields = StatFields(ReadAll(proc_self_ / "stat"));
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  if (fields.size() > 19 && ticks > 0) start_time_seconds_.Set(BootTimeSeconds() + Number(fields[19]) / ticks);
  Update();
}

void ProcessMetrics::Update() {
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  // stat fields (1-based as proc(5)): 14 utime, 15 stime, 23 vsize,
  // 24 rss; StatFields starts at field 3.
  const std::vector<std::string> fields = StatFields(ReadAll(proc_self_ / "stat"));
  if (fields.size() > 21 && ticks > 0) {
    const double cpu = (Number(fields[11]) + Number(fields[12])) / ticks;
    {
      MutexLock lock(mu_);
      if (cpu > reported_cpu_seconds_) {
        cpu_seconds_.Inc(cpu - reported_cpu_seconds_);
        reported_cpu_seconds_ = cpu;
      }
    }
    virtual_bytes_.Set(Number(fields[20]));
    resident_bytes_.Set(Number(fields[21]) * page);
  }
  std::error_code ec;
  double open = 0;
  for (auto it = std::filesystem::directory_iterator(proc_self_ / "fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++open;
  }
  if (!ec) open_fds_.Set(open);
  std::istringstream limits(ReadAll(proc_self_ / "limits"));
  for (std::string line; std::getline(limits, line);) {
    if (!line.starts_with("Max open files")) continue;
    std::istringstream words(line.substr(std::string("Max open files").size()));
    std::string soft;
    words >> soft;
    if (soft != "unlimited" && !soft.empty()) max_fds_.Set(Number(soft));
  }
}

}  // namespace nvdra::common
