#include "mig_state.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "common/unique_fd.h"

namespace nvdra::mocknvml {
namespace {

using json = nlohmann::json;
using common::UniqueFd;

bool Overlaps(unsigned a_start, unsigned a_size, unsigned b_start, unsigned b_size) {
  return a_start < b_start + b_size && b_start < a_start + a_size;
}

bool IsPowerOfTwo(unsigned v) { return v != 0 && (v & (v - 1)) == 0; }

// GI ids as the driver numbers its memory partitions: the whole GPU is 0, its
// halves 1-2, quarters 3-6, eighths 7-14 (so on an 8-slice A100/H100 a 3g
// at 4:4 is GI 2 and a 1g at 0:1 is GI 7, as nvidia-smi mig -lgi shows).
// Other layouts fall back to the lowest free id.
unsigned ChooseGpuInstanceId(const MigSpec& spec, const GpuMigState& gpu,
                             const abi::nvmlGpuInstancePlacement_t& placement) {
  if (IsPowerOfTwo(spec.memory_slices) && IsPowerOfTwo(placement.size) &&
      placement.size <= spec.memory_slices && placement.start % placement.size == 0) {
    const unsigned id = spec.memory_slices / placement.size - 1 + placement.start / placement.size;
    if (gpu.FindGpuInstance(id) == nullptr) return id;
  }
  unsigned id = 0;
  while (gpu.FindGpuInstance(id) != nullptr) ++id;
  return id;
}

const ComputeInstanceProfile* FindComputeProfile(const GpuInstanceProfile& gi_profile,
                                                 unsigned ci_profile_id) {
  for (const ComputeInstanceProfile& ci : gi_profile.compute_profiles) {
    if (ci.index == ci_profile_id) return &ci;
  }
  return nullptr;
}

json ToJson(const MigState& state) {
  json gpus = json::object();
  for (const auto& [uuid, gpu] : state.gpus) {
    json gis = json::array();
    for (const GpuInstanceState& gi : gpu.gpu_instances) {
      json cis = json::array();
      for (const ComputeInstanceState& ci : gi.compute_instances) {
        cis.push_back({{"id", ci.id}, {"profileId", ci.profile_id}, {"start", ci.start},
                       {"size", ci.size}});
      }
      gis.push_back({{"id", gi.id}, {"profileId", gi.profile_id}, {"start", gi.start},
                     {"size", gi.size}, {"computeInstances", std::move(cis)}});
    }
    gpus[uuid] = {{"migMode", {{"current", gpu.current_mode}, {"pending", gpu.pending_mode}}},
                  {"gpuInstances", std::move(gis)}};
  }
  json root = {{"version", 1}, {"gpus", std::move(gpus)}};
  if (!state.fabric.empty()) {
    json fabric = json::object();
    static constexpr const char* kStates[] = {"not_supported", "not_started", "in_progress",
                                              "completed"};
    for (const auto& [uuid, o] : state.fabric) {
      json entry = json::object();
      if (o.state && *o.state < 4) entry["state"] = kStates[*o.state];
      if (o.status) entry["status"] = *o.status;
      if (o.health_mask) entry["healthMask"] = *o.health_mask;
      if (o.health_summary) entry["healthSummary"] = *o.health_summary;
      fabric[uuid] = std::move(entry);
    }
    root["fabric"] = std::move(fabric);
  }
  if (!state.compute_policy.empty()) {
    json policies = json::object();
    for (const auto& [uuid, policy] : state.compute_policy) {
      policies[uuid] = {{"computeMode", policy.compute_mode}, {"timeSlice", policy.time_slice}};
    }
    root["computePolicy"] = std::move(policies);
  }
  return root;
}

// Throws nlohmann exceptions on a wrong shape; the caller turns them into a Status.
MigState FromJson(const json& root) {
  MigState state;
  for (const auto& [uuid, gpu_json] : root.at("gpus").items()) {
    GpuMigState gpu;
    gpu.current_mode = gpu_json.at("migMode").at("current").get<unsigned>();
    gpu.pending_mode = gpu_json.at("migMode").at("pending").get<unsigned>();
    for (const json& gi_json : gpu_json.at("gpuInstances")) {
      GpuInstanceState gi;
      gi.id = gi_json.at("id").get<unsigned>();
      gi.profile_id = gi_json.at("profileId").get<unsigned>();
      gi.start = gi_json.at("start").get<unsigned>();
      gi.size = gi_json.at("size").get<unsigned>();
      for (const json& ci_json : gi_json.at("computeInstances")) {
        gi.compute_instances.push_back({ci_json.at("id").get<unsigned>(),
                                        ci_json.at("profileId").get<unsigned>(),
                                        ci_json.at("start").get<unsigned>(),
                                        ci_json.at("size").get<unsigned>()});
      }
      gpu.gpu_instances.push_back(std::move(gi));
    }
    state.gpus.emplace(uuid, std::move(gpu));
  }
  if (root.contains("fabric")) {
    for (const auto& [uuid, entry] : root.at("fabric").items()) {
      FabricOverride o;
      if (entry.contains("state")) {
        o.state = ParseFabricState(entry.at("state").get<std::string>());
        if (!o.state) throw std::invalid_argument("fabric." + uuid + ".state: unknown state");
      }
      if (entry.contains("status")) o.status = entry.at("status").get<int>();
      if (entry.contains("healthMask")) o.health_mask = entry.at("healthMask").get<unsigned>();
      if (entry.contains("healthSummary")) {
        const json& summary = entry.at("healthSummary");
        if (summary.is_string()) {
          o.health_summary = ParseFabricHealthSummary(summary.get<std::string>());
        } else if (const unsigned number = summary.get<unsigned>(); number <= 3) {
          o.health_summary = static_cast<unsigned char>(number);
        }
        if (!o.health_summary) {
          throw std::invalid_argument("fabric." + uuid + ".healthSummary: expected 0..3 or "
                                      "not_supported|healthy|unhealthy|limited_capacity");
        }
      }
      state.fabric.emplace(uuid, o);
    }
  }
  if (root.contains("computePolicy")) {
    for (const auto& [uuid, entry] : root.at("computePolicy").items()) {
      state.compute_policy.emplace(uuid, ComputePolicyState{entry.value("computeMode", 0), entry.value("timeSlice", 0)});
    }
  }
  return state;
}

Status FlockExclusive(int fd, const std::filesystem::path& path) {
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) return common::ErrnoToStatus(errno, "flock " + path.string());
  }
  return common::OkStatus();
}

}  // namespace

std::optional<unsigned char> ParseFabricHealthSummary(std::string_view text) {
  if (text == "not_supported") return 0;
  if (text == "healthy") return 1;
  if (text == "unhealthy") return 2;
  if (text == "limited_capacity") return 3;
  return std::nullopt;
}

const ComputeInstanceState* GpuInstanceState::FindComputeInstance(unsigned ci_id) const {
  for (const ComputeInstanceState& ci : compute_instances) {
    if (ci.id == ci_id) return &ci;
  }
  return nullptr;
}

const GpuInstanceState* GpuMigState::FindGpuInstance(unsigned gi_id) const {
  for (const GpuInstanceState& gi : gpu_instances) {
    if (gi.id == gi_id) return &gi;
  }
  return nullptr;
}

abi::nvmlReturn_t CreateGpuInstance(const MigSpec& spec, GpuMigState& gpu, unsigned profile_id,
                                    const abi::nvmlGpuInstancePlacement_t& placement,
                                    unsigned* new_id) {
  if (gpu.current_mode != abi::NVML_DEVICE_MIG_ENABLE) return abi::NVML_ERROR_NOT_SUPPORTED;
  const GpuInstanceProfile* profile = spec.ProfileById(profile_id);
  if (profile == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  const bool possible =
      std::any_of(profile->placements.begin(), profile->placements.end(), [&](const auto& p) {
        return p.start == placement.start && p.size == placement.size;
      });
  if (!possible) return abi::NVML_ERROR_INVALID_ARGUMENT;
  unsigned same_profile = 0;
  for (const GpuInstanceState& gi : gpu.gpu_instances) {
    if (Overlaps(gi.start, gi.size, placement.start, placement.size)) {
      return abi::NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    if (gi.profile_id == profile_id) ++same_profile;
  }
  if (same_profile >= profile->instance_count) return abi::NVML_ERROR_INSUFFICIENT_RESOURCES;
  GpuInstanceState gi;
  gi.id = ChooseGpuInstanceId(spec, gpu, placement);
  gi.profile_id = profile_id;
  gi.start = placement.start;
  gi.size = placement.size;
  if (new_id != nullptr) *new_id = gi.id;
  gpu.gpu_instances.push_back(std::move(gi));
  std::sort(gpu.gpu_instances.begin(), gpu.gpu_instances.end(),
            [](const auto& a, const auto& b) { return a.id < b.id; });
  return abi::NVML_SUCCESS;
}

abi::nvmlReturn_t DestroyGpuInstance(GpuMigState& gpu, unsigned gi_id) {
  auto it = std::find_if(gpu.gpu_instances.begin(), gpu.gpu_instances.end(),
                         [&](const auto& gi) { return gi.id == gi_id; });
  if (it == gpu.gpu_instances.end()) return abi::NVML_ERROR_INVALID_ARGUMENT;
  if (!it->compute_instances.empty()) return abi::NVML_ERROR_IN_USE;
  gpu.gpu_instances.erase(it);
  return abi::NVML_SUCCESS;
}

abi::nvmlReturn_t CreateComputeInstance(const MigSpec& spec, GpuMigState& gpu, unsigned gi_id,
                                        unsigned ci_profile_id, unsigned* new_id) {
  if (gpu.current_mode != abi::NVML_DEVICE_MIG_ENABLE) return abi::NVML_ERROR_NOT_SUPPORTED;
  auto gi = std::find_if(gpu.gpu_instances.begin(), gpu.gpu_instances.end(),
                         [&](const auto& g) { return g.id == gi_id; });
  if (gi == gpu.gpu_instances.end()) return abi::NVML_ERROR_INVALID_ARGUMENT;
  const GpuInstanceProfile* gi_profile = spec.ProfileById(gi->profile_id);
  if (gi_profile == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  const ComputeInstanceProfile* ci_profile = FindComputeProfile(*gi_profile, ci_profile_id);
  if (ci_profile == nullptr) return abi::NVML_ERROR_INVALID_ARGUMENT;
  unsigned same_profile = 0;
  for (const ComputeInstanceState& ci : gi->compute_instances) {
    if (ci.profile_id == ci_profile_id) ++same_profile;
  }
  if (same_profile >= ci_profile->instance_count) return abi::NVML_ERROR_INSUFFICIENT_RESOURCES;
  const unsigned size = ci_profile->slice_count;
  std::optional<unsigned> start;
  for (unsigned s = 0; s + size <= gi_profile->slice_count; ++s) {
    const bool busy = std::any_of(gi->compute_instances.begin(), gi->compute_instances.end(),
                                  [&](const auto& ci) { return Overlaps(ci.start, ci.size, s, size); });
    if (!busy) {
      start = s;
      break;
    }
  }
  if (!start) return abi::NVML_ERROR_INSUFFICIENT_RESOURCES;
  unsigned id = 0;
  while (gi->FindComputeInstance(id) != nullptr) ++id;
  gi->compute_instances.push_back({id, ci_profile_id, *start, size});
  std::sort(gi->compute_instances.begin(), gi->compute_instances.end(),
            [](const auto& a, const auto& b) { return a.id < b.id; });
  if (new_id != nullptr) *new_id = id;
  return abi::NVML_SUCCESS;
}

abi::nvmlReturn_t DestroyComputeInstance(GpuMigState& gpu, unsigned gi_id, unsigned ci_id) {
  for (GpuInstanceState& gi : gpu.gpu_instances) {
    if (gi.id != gi_id) continue;
    auto it = std::find_if(gi.compute_instances.begin(), gi.compute_instances.end(),
                           [&](const auto& ci) { return ci.id == ci_id; });
    if (it == gi.compute_instances.end()) break;
    gi.compute_instances.erase(it);
    return abi::NVML_SUCCESS;
  }
  return abi::NVML_ERROR_INVALID_ARGUMENT;
}

unsigned RemainingCapacity(const GpuInstanceProfile& profile, const GpuMigState& gpu) {
  unsigned existing = 0;
  for (const GpuInstanceState& gi : gpu.gpu_instances) {
    if (gi.profile_id == profile.id) ++existing;
  }
  if (existing >= profile.instance_count) return 0;
  // Free placements, taken greedily in order so that overlapping candidates
  // (none in NVIDIA's tables, but a profile file may have them) count once.
  std::vector<abi::nvmlGpuInstancePlacement_t> taken;
  for (const GpuInstanceState& gi : gpu.gpu_instances) taken.push_back({gi.start, gi.size});
  unsigned free_placements = 0;
  for (const auto& p : profile.placements) {
    const bool busy = std::any_of(taken.begin(), taken.end(), [&](const auto& t) {
      return Overlaps(t.start, t.size, p.start, p.size);
    });
    if (!busy) {
      ++free_placements;
      taken.push_back(p);
    }
  }
  return std::min(free_placements, profile.instance_count - existing);
}

StatusOr<GpuMigState> InitialMigState(const GpuSpec& gpu) {
  GpuMigState state;
  if (!gpu.mig) return state;
  state.current_mode = gpu.mig->current_mode;
  state.pending_mode = gpu.mig->pending_mode;
  for (std::size_t i = 0; i < gpu.mig->static_instances.size(); ++i) {
    const StaticGpuInstance& s = gpu.mig->static_instances[i];
    const std::string where = gpu.uuid + ": mig.gpuInstances[" + std::to_string(i) + "]";
    const GpuInstanceProfile* profile = gpu.mig->ProfileById(s.profile_id);
    if (profile == nullptr) return common::InvalidArgumentError(where + ": unknown profileId");
    unsigned size = 0;
    for (const auto& p : profile->placements) {
      if (p.start == s.start) size = p.size;
    }
    unsigned gi_id = 0;
    if (CreateGpuInstance(*gpu.mig, state, s.profile_id, {s.start, size}, &gi_id) !=
        abi::NVML_SUCCESS) {
      return common::InvalidArgumentError(
          where + ": does not fit (MIG mode off, start not a possible placement, or overlap)");
    }
    for (unsigned ci_profile : s.compute_profile_ids) {
      if (CreateComputeInstance(*gpu.mig, state, gi_id, ci_profile, nullptr) !=
          abi::NVML_SUCCESS) {
        return common::InvalidArgumentError(where + ": compute instance profile " +
                                            std::to_string(ci_profile) + " does not fit");
      }
    }
  }
  return state;
}

MigStateStore::MigStateStore(std::filesystem::path state_file, const Profile& profile)
    : state_file_(std::move(state_file)),
      lock_file_(state_file_.string() + ".lock"),
      profile_(profile) {}

std::optional<MigStateStore::FileId> MigStateStore::Stat() const {
  struct stat st {};
  if (::stat(state_file_.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino, st.st_size,
                static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec};
}

Status MigStateStore::Load() {
  UniqueFd fd(::open(state_file_.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return common::ErrnoToStatus(errno, "open " + state_file_.string());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return common::ErrnoToStatus(errno, "fstat");
  std::string text;
  char buffer[8192];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return common::ErrnoToStatus(errno, "read " + state_file_.string());
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  MigState state;
  try {
    state = FromJson(json::parse(text));
  } catch (const std::exception& e) {
    return common::InvalidArgumentError("state file " + state_file_.string() + ": " + e.what());
  }
  RETURN_IF_ERROR(FillMissingGpus(state));
  cached_ = std::move(state);
  cached_fd_ = std::move(fd);
  initial_in_memory_ = false;
  cached_id_ = FileId{st.st_dev, st.st_ino, st.st_size,
                      static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL +
                          st.st_mtim.tv_nsec};
  return common::OkStatus();
}

Status MigStateStore::FillMissingGpus(MigState& state) const {
  for (const GpuSpec& gpu : profile_.gpus) {
    if (!gpu.mig || state.gpus.contains(gpu.uuid)) continue;
    ASSIGN_OR_RETURN(GpuMigState initial, InitialMigState(gpu));
    state.gpus.emplace(gpu.uuid, std::move(initial));
  }
  return common::OkStatus();
}

Status MigStateStore::Write(const MigState& state) const {
  const std::filesystem::path temp =
      state_file_.string() + ".tmp." + std::to_string(::getpid());
  const std::string text = ToJson(state).dump(1) + "\n";
  {
    UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd) return common::ErrnoToStatus(errno, "open " + temp.string());
    if (Status written = common::WriteAll(fd.get(), text, temp.string()); !written.ok()) {
      ::unlink(temp.c_str());
      return written;
    }
    // fsync before rename: a reader must never see a renamed but empty file.
    if (::fsync(fd.get()) != 0) return common::ErrnoToStatus(errno, "fsync " + temp.string());
  }
  if (::rename(temp.c_str(), state_file_.c_str()) != 0) {
    const int saved = errno;
    ::unlink(temp.c_str());
    return common::ErrnoToStatus(saved, "rename to " + state_file_.string());
  }
  return common::OkStatus();
}

Status MigStateStore::EnsureExists() {
  UniqueFd lock(::open(lock_file_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock) return common::ErrnoToStatus(errno, "open " + lock_file_.string());
  RETURN_IF_ERROR(FlockExclusive(lock.get(), lock_file_));
  if (Stat()) return common::OkStatus();  // another process created it meanwhile
  MigState initial;
  RETURN_IF_ERROR(FillMissingGpus(initial));
  return Write(initial);
}

StatusOr<const MigState*> MigStateStore::Read() {
  std::optional<FileId> id = Stat();
  if (!id && ::access(state_file_.parent_path().c_str(), W_OK) != 0 && errno == EROFS) {
    // A read-only driver root (the chart mounts it so into the
    // compute-domain plugin, which never changes MIG) cannot get a state
    // file: reads see the profile's initial state until a process with a
    // writable mount creates the file. Update still fails there.
    if (cached_id_ || !initial_in_memory_) {
      MigState initial;
      RETURN_IF_ERROR(FillMissingGpus(initial));
      cached_ = std::move(initial);
      cached_id_.reset();
      cached_fd_ = UniqueFd();
      initial_in_memory_ = true;
    }
    return &cached_;
  }
  if (!id) {
    RETURN_IF_ERROR(EnsureExists());
    id = Stat();
  }
  if (!id || !cached_id_ || !(*id == *cached_id_)) RETURN_IF_ERROR(Load());
  return &cached_;
}

StatusOr<abi::nvmlReturn_t> MigStateStore::Update(
    const std::function<abi::nvmlReturn_t(MigState&)>& mutate) {
  UniqueFd lock(::open(lock_file_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock) return common::ErrnoToStatus(errno, "open " + lock_file_.string());
  RETURN_IF_ERROR(FlockExclusive(lock.get(), lock_file_));
  MigState state;
  if (Stat()) {
    RETURN_IF_ERROR(Load());
    state = cached_;
  } else {
    RETURN_IF_ERROR(FillMissingGpus(state));
  }
  const abi::nvmlReturn_t rc = mutate(state);
  if (rc != abi::NVML_SUCCESS) return rc;
  RETURN_IF_ERROR(Write(state));
  // Still under the lock, so the file is ours: cache what we wrote.
  RETURN_IF_ERROR(Load());
  return rc;
}

}  // namespace nvdra::mocknvml
