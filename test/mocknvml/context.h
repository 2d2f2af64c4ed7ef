#pragma once

// The mock library's process-wide state: NVML's init count, the loaded
// profile, the MIG state store, and the handles given out.
//
// Defines: the handle structs NVML keeps opaque (nvmlDevice_st, ...; only the
// mock sees these definitions), ResolvedDevice, Context.
//
// Handles are addresses of objects the context never frees, so a handle stays
// valid for the life of the process, across nvmlShutdown and a new nvmlInit
// (GPU handle i then names GPU i of the profile loaded then). A MIG device,
// GPU instance or compute instance handle is made the first time its ids are
// seen and reused when an instance with the same ids comes back; calls
// through a handle whose instance no longer exists return INVALID_ARGUMENT.
//
// A GPU the events file says is lost (events.h) answers
// NVML_ERROR_GPU_IS_LOST through every handle that names it, GPU, MIG device
// or instance (Resolve*), and to nvmlDeviceGetHandleByIndex/ByUUID, as real
// NVML does for a GPU that fell off the bus; nvmlDeviceGetCount still counts
// it.
//
// Ownership: Context owns everything above; a Context lives for the process.
// Thread-safety: thread-safe. Every exported call holds the context's mutex
// for its whole duration (Begin returns the lock), except nvmlEventSetWait_v2,
// which releases it before it sleeps.

#include <cstddef>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <tuple>
#include <unordered_set>

#include "events.h"
#include "mig_state.h"
#include "nvml/nvml_abi.h"
#include "profile.h"

namespace nvdra::nvml::abi {
struct nvmlDevice_st {
  unsigned gpu_index = 0;
  bool is_mig = false;
  unsigned gi_id = 0;  // MIG devices only
  unsigned ci_id = 0;
};
struct nvmlGpuInstance_st {
  unsigned gpu_index = 0;
  unsigned gi_id = 0;
};
struct nvmlComputeInstance_st {
  unsigned gpu_index = 0;
  unsigned gi_id = 0;
  unsigned ci_id = 0;
};
struct nvmlEventSet_st {
  explicit nvmlEventSet_st(std::filesystem::path events_file) : set(std::move(events_file)) {}
  nvdra::mocknvml::EventSet set;
};
}  // namespace nvdra::nvml::abi

namespace nvdra::mocknvml {

// What a device handle names right now.
struct ResolvedDevice {
  unsigned gpu_index = 0;
  const GpuSpec* gpu = nullptr;
  nvml::abi::nvmlDevice_t gpu_handle = nullptr;  // the parent for a MIG device
  // MIG devices only:
  const GpuInstanceState* gi = nullptr;
  const ComputeInstanceState* ci = nullptr;
  const GpuInstanceProfile* gi_profile = nullptr;
  const ComputeInstanceProfile* ci_profile = nullptr;
  bool is_mig() const { return gi != nullptr; }
};

class Context {
 public:
  static Context& Get();

  // nvmlInit_v2 / nvmlInitWithFlags: the first call loads the profile (the
  // GPUs on the nvidia driver, NvidiaManagedGpus), reads the fabric
  // overrides from the environment and creates the state file; later calls
  // only count. DRIVER_NOT_LOADED without a profile, UNKNOWN for a
  // malformed one (both explained on stderr).
  abi::nvmlReturn_t Init();
  // UNINITIALIZED when not initialised.
  abi::nvmlReturn_t Shutdown();

  // A call in progress, holding the context lock. `rc` is NVML_SUCCESS when
  // the call may go on: NVML is initialised and `function` is not in the
  // profile's missingFunctions (then FUNCTION_NOT_FOUND).
  struct Call {
    std::unique_lock<std::mutex> lock;
    abi::nvmlReturn_t rc = abi::NVML_SUCCESS;
  };
  Call Begin(std::string_view function);

  // The members below require the lock of a successful Call.
  const Profile& profile() const { return *profile_; }
  MigStateStore& store() { return *store_; }
  const std::filesystem::path& events_file() const { return events_file_; }
  const std::filesystem::path& registrations_file() const { return registrations_file_; }
  std::optional<unsigned char> env_fabric_state() const { return env_fabric_state_; }
  std::optional<abi::nvmlReturn_t> env_fabric_status() const { return env_fabric_status_; }

  // The MIG state, or nullptr after printing why it could not be read.
  const MigState* ReadMigState();
  const GpuMigState* ReadGpuMigState(unsigned gpu_index);

  abi::nvmlDevice_t GpuHandle(unsigned gpu_index);
  abi::nvmlDevice_t MigDeviceHandle(unsigned gpu_index, unsigned gi_id, unsigned ci_id);
  abi::nvmlGpuInstance_t GpuInstanceHandle(unsigned gpu_index, unsigned gi_id);
  abi::nvmlComputeInstance_t ComputeInstanceHandle(unsigned gpu_index, unsigned gi_id,
                                                   unsigned ci_id);

  // Whether GPU `gpu_index` is lost now (re-reads the events file when it
  // changed).
  bool IsGpuLost(unsigned gpu_index);

  // INVALID_ARGUMENT for NULL, a pointer we did not hand out, a GPU beyond the
  // profile, or a MIG device whose instance is gone; GPU_IS_LOST when its GPU
  // is lost; UNKNOWN if the state file cannot be read.
  abi::nvmlReturn_t Resolve(abi::nvmlDevice_t device, ResolvedDevice* out);
  // The same for instance handles; `gi`/`ci` point into the current state.
  abi::nvmlReturn_t ResolveGpuInstance(abi::nvmlGpuInstance_t handle, ResolvedDevice* out);
  abi::nvmlReturn_t ResolveComputeInstance(abi::nvmlComputeInstance_t handle,
                                           ResolvedDevice* out);

  abi::nvmlEventSet_t CreateEventSet();
  // False when `set` is not a live event set.
  bool FreeEventSet(abi::nvmlEventSet_t set);
  bool IsEventSet(abi::nvmlEventSet_t set) const;

 private:
  Context() = default;

  std::mutex mu_;
  unsigned init_count_ = 0;
  // The GPUs NVML manages (on the nvidia driver; NvidiaManagedGpus): what
  // every call sees, indexes included.
  std::optional<Profile> profile_;
  // Every GPU of the profile file, for the MIG state store (it must outlive it).
  std::optional<Profile> all_gpus_profile_;
  std::unique_ptr<MigStateStore> store_;
  std::filesystem::path events_file_;
  std::filesystem::path registrations_file_;
  std::optional<LostGpus> lost_gpus_;
  std::optional<unsigned char> env_fabric_state_;
  std::optional<abi::nvmlReturn_t> env_fabric_status_;

  // Handle storage: deques keep addresses stable as they grow.
  std::deque<abi::nvmlDevice_st> gpu_handles_;
  std::deque<abi::nvmlDevice_st> mig_handle_storage_;
  std::map<std::tuple<unsigned, unsigned, unsigned>, abi::nvmlDevice_t> mig_handles_;
  std::deque<abi::nvmlGpuInstance_st> gi_handle_storage_;
  std::map<std::pair<unsigned, unsigned>, abi::nvmlGpuInstance_t> gi_handles_;
  std::deque<abi::nvmlComputeInstance_st> ci_handle_storage_;
  std::map<std::tuple<unsigned, unsigned, unsigned>, abi::nvmlComputeInstance_t> ci_handles_;
  std::unordered_set<const void*> known_handles_;
  std::map<const void*, std::unique_ptr<abi::nvmlEventSet_st>> event_sets_;
};

// Copies `text` and its NUL into `buffer` of `length` bytes: INVALID_ARGUMENT
// for NULL, INSUFFICIENT_SIZE when it does not fit.
abi::nvmlReturn_t CopyString(std::string_view text, char* buffer, unsigned length);

// "MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", the same for the same parent
// UUID, GI id and CI id in every process.
std::string MigDeviceUuid(std::string_view parent_uuid, unsigned gi_id, unsigned ci_id);

}  // namespace nvdra::mocknvml

// Starts an exported call: returns UNINITIALIZED / FUNCTION_NOT_FOUND early,
// otherwise leaves `call` holding the context lock and `ctx` usable.
#define NVDRA_MOCKNVML_BEGIN()                                  \
  ::nvdra::mocknvml::Context& ctx = ::nvdra::mocknvml::Context::Get(); \
  ::nvdra::mocknvml::Context::Call call = ctx.Begin(__func__);  \
  if (call.rc != ::nvdra::nvml::abi::NVML_SUCCESS) return call.rc

// Resolves `device` into a ResolvedDevice named `resolved` or returns the error.
#define NVDRA_MOCKNVML_RESOLVE(device, resolved)                              \
  ::nvdra::mocknvml::ResolvedDevice resolved;                                 \
  if (const ::nvdra::nvml::abi::nvmlReturn_t rc_ = ctx.Resolve(device, &resolved); \
      rc_ != ::nvdra::nvml::abi::NVML_SUCCESS)                                \
  return rc_
