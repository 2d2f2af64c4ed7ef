#pragma once

// NVML event sets and lost GPUs, fed from a file that tests append to, and
// the record of event registrations that tests wait on.
//
// Defines: EventSet, LostGpus, RegistrationsFile, AppendRegistration.
//
// The events file (default "<state dir>/events.jsonl", or $MOCK_NVML_EVENTS)
// holds one JSON object per line (event_file.h has the fields):
//   {"uuid": "GPU-...", "type": "xid", "data": 79}
//   {"uuid": "GPU-...", "type": "gpu_lost"}
//   {"uuid": "GPU-...", "type": "gpu_recovered"}
//
// Events. As with real NVML, an event set sees only what happens after it
// was made: it starts at the end of the file's last complete line as the
// file is when the set is created (nvmlEventSetCreate), and delivers the
// lines completed after that, in order, each once; a restarted process does
// not see old events again. A line for a GPU or type the set has not
// registered is skipped, a malformed line is skipped with a message on
// stderr, a line without its newline yet waits. Two event sets (two
// processes) each see every later line. A file replaced (another inode) or
// truncated is read again from its beginning: all of it is new.
//
// Lost GPUs. A "gpu_lost" line makes the Wait of a set that registered that
// GPU (any types) return NVML_ERROR_GPU_IS_LOST, once per line, without
// filling the event data (real NVML names no GPU either). The GPU stays lost
// until a "gpu_recovered" line for it (which no set delivers). Lost is node
// state, not a process's: LostGpus folds the whole events file, so every
// process, including one started later, sees the same set; replacing or
// truncating the file forgets lost GPUs.
//
// Wait sleeps on inotify (the file's folder) until the events file changes
// or the timeout passes; it never spins and never waits past the timeout.
// Without inotify it falls back to 10 ms naps.
//
// Registrations. Each successful nvmlDeviceRegisterEvents appends
//   {"pid": 1234, "uuid": "GPU-...", "types": 8}
// to "event-registrations.jsonl" beside the events file (one write with
// O_APPEND per line, so concurrent processes never interleave), so that a
// test injects an event only once some process listens.
//
// Ownership: EventSet owns its inotify descriptor and follower; LostGpus its
// follower. Thread-safety: EventSet is thread-safe (Register and Wait
// serialise on the set's own mutex; a Wait holds it while it sleeps, as one
// NVML event set serves one waiting thread). LostGpus is thread-compatible
// (the context's lock serialises it).

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/unique_fd.h"
#include "event_file.h"
#include "nvml/nvml_abi.h"

namespace nvdra::mocknvml {

class EventSet {
 public:
  // Starts at the end of `events_file` as it is now.
  explicit EventSet(std::filesystem::path events_file);

  // Adds `types` for `device` (a GPU handle, stable for the process), known by `uuid`.
  void Register(abi::nvmlDevice_t device, const std::string& uuid, unsigned long long types);

  // The next registered event within `timeout`: NVML_SUCCESS and `out`
  // filled; NVML_ERROR_GPU_IS_LOST for a gpu_lost line of a registered GPU
  // (`out` untouched); or NVML_ERROR_TIMEOUT.
  abi::nvmlReturn_t Wait(std::chrono::milliseconds timeout, abi::nvmlEventData_t* out);

 private:
  struct Registration {
    abi::nvmlDevice_t device = nullptr;
    unsigned long long types = 0;
  };

  // Consumes the complete lines there are until one is for this set: its
  // result (SUCCESS or GPU_IS_LOST), or TIMEOUT when none is.
  abi::nvmlReturn_t ScanLocked(abi::nvmlEventData_t* out);
  void EnsureWatchLocked();
  // Empties the inotify queue; true if it named the events file (or
  // overflowed), i.e. the file may have changed.
  bool DrainWatchLocked() const;

  std::mutex mu_;
  std::map<std::string, Registration, std::less<>> registered_;  // guarded by mu_, by UUID
  LineFollower events_;                                          // guarded by mu_
  common::UniqueFd inotify_;                                     // guarded by mu_
  bool watch_tried_ = false;                                     // guarded by mu_
};

// The GPUs the events file says are lost now (gpu_lost not followed by
// gpu_recovered), read from the file's beginning and followed as it grows.
class LostGpus {
 public:
  explicit LostGpus(std::filesystem::path events_file);

  // Catches up with the file first: one stat when it has not changed.
  bool IsLost(std::string_view uuid);

 private:
  LineFollower events_;
  std::set<std::string, std::less<>> lost_;
};

// "event-registrations.jsonl" beside `events_file`.
std::filesystem::path RegistrationsFile(const std::filesystem::path& events_file);

// Appends {"pid":..,"uuid":..,"types":..} and its newline to `file` in one
// O_APPEND write (created 0666 when missing). Errno-mapped errors.
common::Status AppendRegistration(const std::filesystem::path& file, long pid,
                                  std::string_view uuid, unsigned long long types);

}  // namespace nvdra::mocknvml
