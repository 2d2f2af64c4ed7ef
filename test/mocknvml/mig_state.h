#pragma once

// MIG state shared by every process that loads the mock with the same state
// file: MIG mode and the GPU and compute instances of each GPU.
//
// Defines: ComputeInstanceState, GpuInstanceState, GpuMigState, MigState,
// MigStateStore, and the placement rules (CreateGpuInstance, ...), which
// return the nvmlReturn_t the real library gives.
//
// File format (JSON, written by this code, readable by tests):
//   {"version": 1,
//    "gpus": {"GPU-...": {"migMode": {"current": 1, "pending": 1},
//                         "gpuInstances": [{"id": 2, "profileId": 9, "start": 4, "size": 4,
//                            "computeInstances": [{"id": 0, "profileId": 2, "start": 0,
//                                                  "size": 3}]}]}},
//    "fabric": {"GPU-...": {"state": "in_progress", "status": 0,
//                           "healthMask": 16, "healthSummary": "unhealthy"}}}
// "fabric" is optional and only read here (tests write it to change a running
// process's fabric state and health); each of its keys is optional and
// overrides the profile's value. "healthSummary" is an
// NVML_GPU_FABRIC_HEALTH_SUMMARY_* number or its name (not_supported 0,
// healthy 1, unhealthy 2, limited_capacity 3); mutations write it back as a
// number. A GPU missing from "gpus" starts from its profile.
//
// Sharing: readers re-read the file whenever its inode, size or mtime changed
// (writers replace it by rename, so a reader never sees half a file).
// Mutations take an exclusive flock on "<state file>.lock", re-read, change,
// write a temp file, fsync it and rename it over the state file.
//
// Ownership: owns the descriptor of the state file version it cached; the
// lock fd lives for one mutation. Thread-safety: thread-compatible; the mock's context serialises
// calls.

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "nvml/nvml_abi.h"
#include "profile.h"

namespace nvdra::mocknvml {

struct ComputeInstanceState {
  unsigned id = 0;
  unsigned profile_id = 0;  // CI profile index (NVML uses it as the id)
  unsigned start = 0;
  unsigned size = 0;
};

struct GpuInstanceState {
  unsigned id = 0;
  unsigned profile_id = 0;
  unsigned start = 0;  // memory slices
  unsigned size = 0;
  std::vector<ComputeInstanceState> compute_instances;  // sorted by id

  const ComputeInstanceState* FindComputeInstance(unsigned ci_id) const;
};

struct GpuMigState {
  unsigned current_mode = 0;
  unsigned pending_mode = 0;
  std::vector<GpuInstanceState> gpu_instances;  // sorted by id

  const GpuInstanceState* FindGpuInstance(unsigned gi_id) const;
};

// A fabric override from the state file ("fabric" map).
struct FabricOverride {
  std::optional<unsigned char> state;
  std::optional<abi::nvmlReturn_t> status;
  std::optional<unsigned> health_mask;            // nvmlGpuFabricInfo_v3 healthMask
  std::optional<unsigned char> health_summary;  // NVML_GPU_FABRIC_HEALTH_SUMMARY_*
};

// "healthy" to 1 and so on (NVML_GPU_FABRIC_HEALTH_SUMMARY_*); nullopt if unknown.
std::optional<unsigned char> ParseFabricHealthSummary(std::string_view text);

// What nvidia-smi -c and nvidia-smi compute-policy --set-timeslice (and
// nvmlDeviceSetComputeMode) changed on a GPU; a GPU without an entry has the
// defaults.
struct ComputePolicyState {
  int compute_mode = 0;  // NVML_COMPUTEMODE_*
  int time_slice = 0;    // 0 Default, 1 Short, 2 Medium, 3 Long
};

struct MigState {
  std::map<std::string, GpuMigState, std::less<>> gpus;  // by GPU UUID
  std::map<std::string, FabricOverride, std::less<>> fabric;
  std::map<std::string, ComputePolicyState, std::less<>> compute_policy;  // by GPU UUID
};

// The initial MIG state of one GPU: the profile's mode and static instances,
// laid out with the same rules as CreateGpuInstance. kInvalidArgument when a
// static instance does not fit.
StatusOr<GpuMigState> InitialMigState(const GpuSpec& gpu);

// Placement rules. Each returns what the real library returns:
// NOT_SUPPORTED when MIG mode is not enabled; INVALID_ARGUMENT for an unknown
// profile or a placement not among the profile's possible placements;
// INSUFFICIENT_RESOURCES when the placement overlaps an existing GI's memory
// slices or the profile's instance count is used up. GI ids follow the
// driver's partition numbering (see mig_state.cc); `new_id` receives it.
abi::nvmlReturn_t CreateGpuInstance(const MigSpec& spec, GpuMigState& gpu, unsigned profile_id,
                                    const abi::nvmlGpuInstancePlacement_t& placement,
                                    unsigned* new_id);
// IN_USE while compute instances remain; INVALID_ARGUMENT for an unknown id.
abi::nvmlReturn_t DestroyGpuInstance(GpuMigState& gpu, unsigned gi_id);
// CI in the lowest free range of its size among the GI's compute slices;
// the lowest free CI id. INVALID_ARGUMENT for a CI profile the GI does not offer;
// INSUFFICIENT_RESOURCES when no range is free.
abi::nvmlReturn_t CreateComputeInstance(const MigSpec& spec, GpuMigState& gpu, unsigned gi_id,
                                        unsigned ci_profile_id, unsigned* new_id);
abi::nvmlReturn_t DestroyComputeInstance(GpuMigState& gpu, unsigned gi_id, unsigned ci_id);
// How many more GIs of `profile` could be created now.
unsigned RemainingCapacity(const GpuInstanceProfile& profile, const GpuMigState& gpu);

class MigStateStore {
 public:
  // `state_file` need not exist: the first read or mutation creates it from
  // `profile` (on a read-only file system, reads use that state in memory).
  // `profile` must outlive the store.
  MigStateStore(std::filesystem::path state_file, const Profile& profile);

  const std::filesystem::path& path() const { return state_file_; }

  // The current state, re-read when the file changed. kInvalidArgument when
  // the file is malformed; errno-derived codes for I/O failures.
  StatusOr<const MigState*> Read();

  // Read-modify-write under the lock. `mutate` returns an NVML code; the file
  // is written only on NVML_SUCCESS. The result is that code.
  StatusOr<abi::nvmlReturn_t> Update(const std::function<abi::nvmlReturn_t(MigState&)>& mutate);

 private:
  struct FileId {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    long long mtime_ns = 0;
    friend bool operator==(const FileId&, const FileId&) = default;
  };

  // Reads the file (which must exist) into `cached_`.
  Status Load();
  // Creates the file from the profile when it is missing (under the lock).
  Status EnsureExists();
  // Adds profile defaults for GPUs the file does not mention.
  Status FillMissingGpus(MigState& state) const;
  Status Write(const MigState& state) const;
  std::optional<FileId> Stat() const;

  std::filesystem::path state_file_;
  std::filesystem::path lock_file_;
  const Profile& profile_;
  std::optional<FileId> cached_id_;
  // Kept open so the cached inode cannot be freed and its number reused by a
  // later version of the file: equal (dev, ino) then means the same version.
  common::UniqueFd cached_fd_;
  MigState cached_;
  // cached_ is the profile's initial state, kept in memory because the
  // state file's folder is read-only and holds no file yet (see Read).
  bool initial_in_memory_ = false;
};

}  // namespace nvdra::mocknvml
