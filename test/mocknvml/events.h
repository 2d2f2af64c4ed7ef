#pragma once

// NVML event sets fed from a file that tests append to.
//
// Defines: EventSet, ParseEventType.
//
// The events file (default "<state dir>/events.jsonl", or $MOCK_NVML_EVENTS)
// holds one JSON object per line:
//   {"uuid": "GPU-...", "type": "xid", "data": 79}
//   {"uuid": "GPU-...", "type": "double_bit_ecc", "data": 0,
//    "gpuInstanceId": 2, "computeInstanceId": 0}
// "type" is xid | single_bit_ecc | double_bit_ecc | pstate | clock or the
// nvmlEventType* bit as a number. Each event set reads the file from its
// beginning, in order, and consumes every complete line it reads: a line for
// a GPU or type it has not registered is skipped, a malformed line is skipped
// with a message on stderr, a line without its newline yet waits. So an event
// written before the driver registered is still delivered, and two event sets
// (two processes) each see every event. A file shorter than what a set has
// read was replaced or truncated: the set starts again at its beginning.
//
// Wait sleeps on inotify (the file's folder) until a line arrives or the
// timeout passes; it never spins and never waits past the timeout. Without
// inotify it falls back to 10 ms naps.
//
// Ownership: owns its inotify descriptor. Thread-safety: thread-safe
// (Register and Wait serialise on the set's own mutex; a Wait holds it while
// it sleeps, as one NVML event set serves one waiting thread).

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>

#include "common/unique_fd.h"
#include "nvml/nvml_abi.h"

namespace nvdra::mocknvml {

namespace abi = nvdra::nvml::abi;

// "xid" to nvmlEventTypeXidCriticalError and so on; nullopt if unknown.
std::optional<unsigned long long> ParseEventType(std::string_view name);

class EventSet {
 public:
  explicit EventSet(std::filesystem::path events_file);

  // Adds `types` for `device` (a GPU handle, stable for the process), known by `uuid`.
  void Register(abi::nvmlDevice_t device, const std::string& uuid, unsigned long long types);

  // The next registered event within `timeout`: NVML_SUCCESS and `out`
  // filled, or NVML_ERROR_TIMEOUT.
  abi::nvmlReturn_t Wait(std::chrono::milliseconds timeout, abi::nvmlEventData_t* out);

 private:
  struct Registration {
    abi::nvmlDevice_t device = nullptr;
    unsigned long long types = 0;
  };

  // Consumes complete lines after offset_ until one matches. True if found.
  bool ScanLocked(abi::nvmlEventData_t* out);
  void EnsureWatchLocked();
  void DrainWatchLocked() const;

  std::mutex mu_;
  const std::filesystem::path events_file_;
  std::map<std::string, Registration, std::less<>> registered_;  // guarded by mu_, by UUID
  off_t offset_ = 0;                                             // guarded by mu_
  common::UniqueFd inotify_;                                     // guarded by mu_
  bool watch_tried_ = false;                                     // guarded by mu_
};

}  // namespace nvdra::mocknvml
