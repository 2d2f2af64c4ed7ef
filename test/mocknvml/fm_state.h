#pragma once

// The mock Fabric Manager daemon's state, shared by every process of a node
// through one JSON file: whether FM runs, where it listens, how slow it is,
// its restart generation, the active partitions and the GPUs whose NVLinks
// failed.
//
// Defines: FmListen, FmState, ParseFmState, FmStateToJson, FmStateStore.
//
// File (default <profile folder>/fabric-manager.json, or $MOCK_NVFM_STATE;
// every key optional, an absent file is all defaults; README.md has the
// contract):
//   {"version": 1, "running": true, "generation": 1, "delayMs": 0,
//    "listen": {"bindInterface": "127.0.0.1", "port": 6666, "unixSocketPath": ""},
//    "activePartitions": [1, 7],
//    "nvlinkFailedGpus": {"GPU-...": [0, 1]}}
// Unknown keys are refused, so a misspelt fault fails loudly.
//
// Sharing: readers read the whole file on every call (writers replace it by
// rename, so a reader sees one version or the next, never a mix). Mutations
// take an exclusive flock on "<file>.lock", re-read, change, write a temp
// file, fsync it and rename it over the file.
//
// Ownership: FmStateStore holds the paths only; the lock fd lives for one
// mutation. Thread-safety: FmStateStore is thread-safe (no mutable members;
// the flock serialises writers across threads and processes alike).

#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "fabricmanager/fm_abi.h"

namespace nvdra::mocknvml {

using common::Status;
using common::StatusOr;

// FM's command interface, as its config file names the settings:
// FM_CMD_BIND_INTERFACE, FM_CMD_PORT_NUMBER, FM_CMD_UNIX_SOCKET_PATH. A
// non-empty unix_socket_path means FM listens there instead of on TCP.
struct FmListen {
  std::string bind_interface = "127.0.0.1";
  unsigned port = nvdra::fabricmanager::abi::FM_CMD_PORT_NUMBER;
  std::string unix_socket_path;
};

struct FmState {
  bool running = true;
  unsigned long long generation = 1;  // one more after each FM restart
  unsigned delay_ms = 0;              // each call to FM takes this long
  FmListen listen;
  std::set<unsigned> active_partitions;
  std::map<std::string, std::vector<unsigned>, std::less<>> nvlink_failed_gpus;  // UUID -> ports
};

// kInvalidArgument naming the field ("fabric-manager.json: delayMs: ...").
StatusOr<FmState> ParseFmState(std::string_view text);
std::string FmStateToJson(const FmState& state);

class FmStateStore {
 public:
  explicit FmStateStore(std::filesystem::path path);

  const std::filesystem::path& path() const { return path_; }

  // The current state; the defaults when the file does not exist.
  StatusOr<FmState> Read() const;

  // Read-modify-write under the lock. `mutate` returns an FM code; the file is
  // written only on FM_ST_SUCCESS. The result is that code.
  StatusOr<nvdra::fabricmanager::abi::fmReturn_t> Update(
      const std::function<nvdra::fabricmanager::abi::fmReturn_t(FmState&)>& mutate) const;

 private:
  std::filesystem::path path_;
  std::filesystem::path lock_path_;
};

}  // namespace nvdra::mocknvml
