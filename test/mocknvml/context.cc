#include "context.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace nvdra::mocknvml {
namespace {

// FNV-1a, 64 bits, with a caller-chosen basis so two runs give 128 bits.
std::uint64_t Fnv1a(std::string_view text, std::uint64_t basis) {
  std::uint64_t hash = basis;
  for (char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

const char* Getenv(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

}  // namespace

Context& Context::Get() {
  static Context context;
  return context;
}

abi::nvmlReturn_t Context::Init() {
  std::lock_guard lock(mu_);
  if (init_count_ > 0) {
    ++init_count_;
    return abi::NVML_SUCCESS;
  }
  StatusOr<std::filesystem::path> path = FindProfilePath();
  if (!path.ok()) {
    std::fprintf(stderr, "mock NVML: no profile: %s\n", path.status().message().c_str());
    return abi::NVML_ERROR_DRIVER_NOT_LOADED;
  }
  StatusOr<Profile> profile = LoadProfile(*path);
  if (!profile.ok()) {
    std::fprintf(stderr, "mock NVML: %s\n", profile.status().message().c_str());
    return profile.status().code() == common::StatusCode::kNotFound
               ? abi::NVML_ERROR_DRIVER_NOT_LOADED
               : abi::NVML_ERROR_UNKNOWN;
  }
  env_fabric_state_.reset();
  env_fabric_status_.reset();
  if (const char* state = Getenv("MOCK_NVML_FABRIC_STATE")) {
    env_fabric_state_ = ParseFabricState(state);
    if (!env_fabric_state_) {
      std::fprintf(stderr,
                   "mock NVML: MOCK_NVML_FABRIC_STATE=%s: expected "
                   "not_supported|not_started|in_progress|completed\n",
                   state);
      return abi::NVML_ERROR_UNKNOWN;
    }
  }
  if (const char* status = Getenv("MOCK_NVML_FABRIC_STATUS")) {
    char* end = nullptr;
    const long value = std::strtol(status, &end, 10);
    if (end == status || *end != '\0') {
      std::fprintf(stderr, "mock NVML: MOCK_NVML_FABRIC_STATUS=%s: expected a number\n", status);
      return abi::NVML_ERROR_UNKNOWN;
    }
    env_fabric_status_ = static_cast<abi::nvmlReturn_t>(value);
  }
  // The store keeps every GPU's MIG state, the other calls see the GPUs on
  // the nvidia driver: state and events name GPUs by UUID, so both agree
  // whatever the indexes.
  all_gpus_profile_ = std::move(*profile);
  profile_ = *all_gpus_profile_;
  profile_->gpus = NvidiaManagedGpus(*all_gpus_profile_);
  const std::filesystem::path state_file =
      Getenv("MOCK_NVML_STATE") != nullptr ? std::filesystem::path(Getenv("MOCK_NVML_STATE"))
                                           : profile_->path.parent_path() / "state.json";
  events_file_ = Getenv("MOCK_NVML_EVENTS") != nullptr
                     ? std::filesystem::path(Getenv("MOCK_NVML_EVENTS"))
                     : state_file.parent_path() / "events.jsonl";
  registrations_file_ = RegistrationsFile(events_file_);
  lost_gpus_.emplace(events_file_);
  store_ = std::make_unique<MigStateStore>(state_file, *all_gpus_profile_);
  // Creates the state file now, so a profile whose static MIG devices do not
  // fit fails here rather than at some later MIG call.
  if (StatusOr<const MigState*> state = store_->Read(); !state.ok()) {
    std::fprintf(stderr, "mock NVML: %s\n", state.status().message().c_str());
    store_.reset();
    profile_.reset();
    all_gpus_profile_.reset();
    return abi::NVML_ERROR_UNKNOWN;
  }
  while (gpu_handles_.size() < profile_->gpus.size()) {
    abi::nvmlDevice_st& handle = gpu_handles_.emplace_back();
    handle.gpu_index = static_cast<unsigned>(gpu_handles_.size() - 1);
    known_handles_.insert(&handle);
  }
  init_count_ = 1;
  return abi::NVML_SUCCESS;
}

abi::nvmlReturn_t Context::Shutdown() {
  std::lock_guard lock(mu_);
  if (init_count_ == 0) return abi::NVML_ERROR_UNINITIALIZED;
  --init_count_;
  return abi::NVML_SUCCESS;
}

Context::Call Context::Begin(std::string_view function) {
  Call call{std::unique_lock(mu_), abi::NVML_SUCCESS};
  if (init_count_ == 0) {
    call.rc = abi::NVML_ERROR_UNINITIALIZED;
  } else if (profile_->missing_functions.contains(function)) {
    call.rc = abi::NVML_ERROR_FUNCTION_NOT_FOUND;
  }
  return call;
}

const MigState* Context::ReadMigState() {
  StatusOr<const MigState*> state = store_->Read();
  if (!state.ok()) {
    std::fprintf(stderr, "mock NVML: %s\n", state.status().message().c_str());
    return nullptr;
  }
  return *state;
}

const GpuMigState* Context::ReadGpuMigState(unsigned gpu_index) {
  const MigState* state = ReadMigState();
  if (state == nullptr) return nullptr;
  auto it = state->gpus.find(profile_->gpus.at(gpu_index).uuid);
  return it == state->gpus.end() ? nullptr : &it->second;
}

abi::nvmlDevice_t Context::GpuHandle(unsigned gpu_index) { return &gpu_handles_.at(gpu_index); }

abi::nvmlDevice_t Context::MigDeviceHandle(unsigned gpu_index, unsigned gi_id, unsigned ci_id) {
  auto [it, added] = mig_handles_.try_emplace({gpu_index, gi_id, ci_id}, nullptr);
  if (added) {
    it->second = &mig_handle_storage_.emplace_back(
        abi::nvmlDevice_st{gpu_index, true, gi_id, ci_id});
    known_handles_.insert(it->second);
  }
  return it->second;
}

abi::nvmlGpuInstance_t Context::GpuInstanceHandle(unsigned gpu_index, unsigned gi_id) {
  auto [it, added] = gi_handles_.try_emplace({gpu_index, gi_id}, nullptr);
  if (added) {
    it->second = &gi_handle_storage_.emplace_back(abi::nvmlGpuInstance_st{gpu_index, gi_id});
    known_handles_.insert(it->second);
  }
  return it->second;
}

abi::nvmlComputeInstance_t Context::ComputeInstanceHandle(unsigned gpu_index, unsigned gi_id,
                                                          unsigned ci_id) {
  auto [it, added] = ci_handles_.try_emplace({gpu_index, gi_id, ci_id}, nullptr);
  if (added) {
    it->second = &ci_handle_storage_.emplace_back(
        abi::nvmlComputeInstance_st{gpu_index, gi_id, ci_id});
    known_handles_.insert(it->second);
  }
  return it->second;
}

bool Context::IsGpuLost(unsigned gpu_index) {
  return lost_gpus_->IsLost(profile_->gpus.at(gpu_index).uuid);
}

abi::nvmlReturn_t Context::Resolve(abi::nvmlDevice_t device, ResolvedDevice* out) {
  if (device == nullptr || !known_handles_.contains(device) ||
      device->gpu_index >= profile_->gpus.size()) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  if (IsGpuLost(device->gpu_index)) return abi::NVML_ERROR_GPU_IS_LOST;
  *out = ResolvedDevice{};
  out->gpu_index = device->gpu_index;
  out->gpu = &profile_->gpus[device->gpu_index];
  out->gpu_handle = GpuHandle(device->gpu_index);
  if (!device->is_mig) return abi::NVML_SUCCESS;
  const GpuMigState* mig = ReadGpuMigState(device->gpu_index);
  if (mig == nullptr || !out->gpu->mig) return abi::NVML_ERROR_UNKNOWN;
  out->gi = mig->FindGpuInstance(device->gi_id);
  if (out->gi == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  out->ci = out->gi->FindComputeInstance(device->ci_id);
  if (out->ci == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  out->gi_profile = out->gpu->mig->ProfileById(out->gi->profile_id);
  if (out->gi_profile == nullptr) return abi::NVML_ERROR_UNKNOWN;
  for (const ComputeInstanceProfile& p : out->gi_profile->compute_profiles) {
    if (p.index == out->ci->profile_id) out->ci_profile = &p;
  }
  return out->ci_profile == nullptr ? abi::NVML_ERROR_UNKNOWN : abi::NVML_SUCCESS;
}

abi::nvmlReturn_t Context::ResolveGpuInstance(abi::nvmlGpuInstance_t handle,
                                              ResolvedDevice* out) {
  if (handle == nullptr || !known_handles_.contains(handle) ||
      handle->gpu_index >= profile_->gpus.size()) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  if (IsGpuLost(handle->gpu_index)) return abi::NVML_ERROR_GPU_IS_LOST;
  *out = ResolvedDevice{};
  out->gpu_index = handle->gpu_index;
  out->gpu = &profile_->gpus[handle->gpu_index];
  out->gpu_handle = GpuHandle(handle->gpu_index);
  const GpuMigState* mig = ReadGpuMigState(handle->gpu_index);
  if (mig == nullptr || !out->gpu->mig) return abi::NVML_ERROR_UNKNOWN;
  out->gi = mig->FindGpuInstance(handle->gi_id);
  if (out->gi == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  out->gi_profile = out->gpu->mig->ProfileById(out->gi->profile_id);
  return out->gi_profile == nullptr ? abi::NVML_ERROR_UNKNOWN : abi::NVML_SUCCESS;
}

abi::nvmlReturn_t Context::ResolveComputeInstance(abi::nvmlComputeInstance_t handle,
                                                  ResolvedDevice* out) {
  if (handle == nullptr || !known_handles_.contains(handle)) {
    return abi::NVML_ERROR_INVALID_ARGUMENT;
  }
  if (const abi::nvmlReturn_t rc = ResolveGpuInstance(
          GpuInstanceHandle(handle->gpu_index, handle->gi_id), out);
      rc != abi::NVML_SUCCESS) {
    return rc;
  }
  out->ci = out->gi->FindComputeInstance(handle->ci_id);
  if (out->ci == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  for (const ComputeInstanceProfile& p : out->gi_profile->compute_profiles) {
    if (p.index == out->ci->profile_id) out->ci_profile = &p;
  }
  return out->ci_profile == nullptr ? abi::NVML_ERROR_UNKNOWN : abi::NVML_SUCCESS;
}

abi::nvmlEventSet_t Context::CreateEventSet() {
  auto set = std::make_unique<abi::nvmlEventSet_st>(events_file_);
  abi::nvmlEventSet_t raw = set.get();
  event_sets_.emplace(raw, std::move(set));
  return raw;
}

bool Context::FreeEventSet(abi::nvmlEventSet_t set) { return event_sets_.erase(set) == 1; }

bool Context::IsEventSet(abi::nvmlEventSet_t set) const { return event_sets_.contains(set); }

abi::nvmlReturn_t CopyString(std::string_view text, char* buffer, unsigned length) {
  if (buffer == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  if (text.size() + 1 > length) return abi::NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buffer, text.data(), text.size());
  buffer[text.size()] = '\0';
  return abi::NVML_SUCCESS;
}

std::string MigDeviceUuid(std::string_view parent_uuid, unsigned gi_id, unsigned ci_id) {
  const std::string key =
      std::string(parent_uuid) + "/" + std::to_string(gi_id) + "/" + std::to_string(ci_id);
  const std::uint64_t hi = Fnv1a(key, 0xcbf29ce484222325ULL);
  const std::uint64_t lo = Fnv1a(key, 0x84222325cbf29ce4ULL);
  char text[64];
  std::snprintf(text, sizeof(text), "MIG-%08x-%04x-%04x-%04x-%012llx",
                static_cast<unsigned>(hi >> 32), static_cast<unsigned>((hi >> 16) & 0xffffU),
                static_cast<unsigned>(hi & 0xffffU), static_cast<unsigned>(lo >> 48),
                static_cast<unsigned long long>(lo & 0xffffffffffffULL));
  return text;
}

}  // namespace nvdra::mocknvml
