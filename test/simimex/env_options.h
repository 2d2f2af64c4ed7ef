#pragma once

// The simulator's environment knobs, read once in each main and passed down.
// Test infrastructure, not product.
//
//   SIMIMEX_HOSTS_FILE               hosts file for names (default /etc/hosts)
//   SIMIMEX_RESOLVER=system          also ask getaddrinfo (DNS) for names
//   SIMIMEX_READY_DELAY_MS           fault hook: INITIALIZING this long first
//   SIMIMEX_START_DELAY_MS           fault hook: a slow start, this long before signal
//                                    handling is set up (a SIGUSR1 then ends the process,
//                                    its default action, as for any program)
//   SIMIMEX_SIGUSR1_MIN_INTERVAL_MS  window for ignoring repeated SIGUSR1 (5000)
//   SIMIMEX_VERSION                  version reported and compared (!V!)
//
// Thread-safety: reads the environment; call from main before threads start.

#include <chrono>
#include <cstdlib>
#include <string>

#include "protocol.h"

namespace nvdra::simimex {

struct EnvOptions {
  std::string hosts_file = "/etc/hosts";
  bool use_system_resolver = false;
  std::chrono::milliseconds ready_delay{0};
  std::chrono::milliseconds start_delay{0};
  std::chrono::milliseconds sigusr1_min_interval{5000};
  std::string version{kDefaultVersion};
};

inline EnvOptions ReadEnvOptions() {
  EnvOptions out;
  auto get = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v == nullptr ? std::string() : std::string(v);
  };
  auto millis = [&](const char* name, std::chrono::milliseconds fallback) {
    const std::string v = get(name);
    if (v.empty()) return fallback;
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    return (*end == '\0' && n >= 0) ? std::chrono::milliseconds(n) : fallback;
  };
  if (auto v = get("SIMIMEX_HOSTS_FILE"); !v.empty()) out.hosts_file = v;
  out.use_system_resolver = get("SIMIMEX_RESOLVER") == "system";
  out.ready_delay = millis("SIMIMEX_READY_DELAY_MS", out.ready_delay);
  out.start_delay = millis("SIMIMEX_START_DELAY_MS", out.start_delay);
  out.sigusr1_min_interval = millis("SIMIMEX_SIGUSR1_MIN_INTERVAL_MS", out.sigusr1_min_interval);
  if (auto v = get("SIMIMEX_VERSION"); !v.empty()) out.version = v;
  return out;
}

}  // namespace nvdra::simimex
