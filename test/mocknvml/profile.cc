#include "profile.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/file_io.h"

namespace nvdra::mocknvml {
namespace {

using json = nlohmann::json;

// Library folders stripped from this library's location to find the driver
// root; longest first so "usr/lib64" wins over "lib64".
constexpr std::array<std::string_view, 6> kLibraryFolders = {
    "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib", "lib64",
    "lib"};

// CI profile index for a CI slice count (NVML_COMPUTE_INSTANCE_PROFILE_*).
std::optional<unsigned> ComputeProfileIndexForSlices(unsigned slices) {
  switch (slices) {
    case 1: return 0;
    case 2: return 1;
    case 3: return 2;
    case 4: return 3;
    case 7: return 4;
    case 8: return 5;
    case 6: return 6;
    default: return std::nullopt;
  }
}

// A JSON object together with its path in the profile, so every error names
// the field ("devices[3].memory.total: expected an unsigned integer").
class Field {
 public:
  Field(const json& value, std::string path) : value_(value), path_(std::move(path)) {}

  const json& value() const { return value_; }
  const std::string& path() const { return path_; }
  bool Has(std::string_view key) const {
    return value_.is_object() && value_.contains(key) && !value_.at(std::string(key)).is_null();
  }
  // Present and explicitly null.
  bool IsNull(std::string_view key) const {
    return value_.is_object() && value_.contains(key) && value_.at(std::string(key)).is_null();
  }
  Field Child(std::string_view key) const {
    return Field(value_.at(std::string(key)), Join(key));
  }
  std::string Join(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  Status Error(std::string_view key, std::string_view what) const {
    return common::InvalidArgumentError(Join(key) + ": " + std::string(what));
  }

  StatusOr<unsigned long long> U64(std::string_view key) const {
    if (!Has(key)) return Error(key, "missing");
    const json& v = value_.at(std::string(key));
    if (!v.is_number_unsigned()) return Error(key, "expected an unsigned integer");
    return v.get<unsigned long long>();
  }
  StatusOr<unsigned> U32(std::string_view key) const {
    ASSIGN_OR_RETURN(unsigned long long v, U64(key));
    if (v > std::numeric_limits<unsigned>::max()) return Error(key, "out of range");
    return static_cast<unsigned>(v);
  }
  StatusOr<unsigned> U32Or(std::string_view key, unsigned fallback) const {
    if (!Has(key)) return fallback;
    return U32(key);
  }
  StatusOr<int> I32(std::string_view key) const {
    if (!Has(key)) return Error(key, "missing");
    const json& v = value_.at(std::string(key));
    if (!v.is_number_integer()) return Error(key, "expected an integer");
    const auto wide = v.get<long long>();
    if (wide < std::numeric_limits<int>::min() || wide > std::numeric_limits<int>::max()) {
      return Error(key, "out of range");
    }
    return static_cast<int>(wide);
  }
  StatusOr<std::string> Str(std::string_view key) const {
    if (!Has(key)) return Error(key, "missing");
    const json& v = value_.at(std::string(key));
    if (!v.is_string()) return Error(key, "expected a string");
    return v.get<std::string>();
  }
  StatusOr<std::optional<unsigned>> OptionalU32(std::string_view key) const {
    if (!Has(key)) return std::optional<unsigned>();
    ASSIGN_OR_RETURN(unsigned v, U32(key));
    return std::optional<unsigned>(v);
  }
  Status RequireArray(std::string_view key) const {
    if (!Has(key) || !value_.at(std::string(key)).is_array()) return Error(key, "expected an array");
    return common::OkStatus();
  }
  Status RequireObject(std::string_view key) const {
    if (!Has(key) || !value_.at(std::string(key)).is_object()) {
      return Error(key, "expected an object");
    }
    return common::OkStatus();
  }

 private:
  const json& value_;
  std::string path_;
};

std::string Indexed(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

// Parses "00000000:18:00.0" (or "0000:18:00.0") into the NVML PCI struct,
// writing busId in NVML's spelling: 8-digit domain, uppercase hex.
Status FillPci(const Field& pci, abi::nvmlPciInfo_t& out) {
  ASSIGN_OR_RETURN(std::string bus_id, pci.Str("busId"));
  unsigned domain = 0;
  unsigned bus = 0;
  unsigned device = 0;
  unsigned function = 0;
  if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4 ||
      bus > 0xff || device > 0x1f || function > 7) {
    return pci.Error("busId", "expected DDDDDDDD:BB:DD.F");
  }
  out.domain = domain;
  out.bus = bus;
  out.device = device;
  std::snprintf(out.busId, sizeof(out.busId), "%08X:%02X:%02X.%X", domain, bus, device, function);
  std::snprintf(out.busIdLegacy, sizeof(out.busIdLegacy), "%04X:%02X:%02X.%X", domain & 0xffffU,
                bus, device, function);
  ASSIGN_OR_RETURN(out.pciDeviceId, pci.U32("pciDeviceId"));
  ASSIGN_OR_RETURN(out.pciSubSystemId, pci.U32("pciSubSystemId"));
  return common::OkStatus();
}

StatusOr<GpuInstanceProfile> ParseGpuInstanceProfile(const Field& f) {
  GpuInstanceProfile p;
  ASSIGN_OR_RETURN(p.index, f.U32("profile"));
  if (p.index >= abi::NVML_GPU_INSTANCE_PROFILE_COUNT) return f.Error("profile", "out of range");
  ASSIGN_OR_RETURN(p.id, f.U32("id"));
  ASSIGN_OR_RETURN(p.name, f.Str("name"));
  ASSIGN_OR_RETURN(p.is_p2p_supported, f.U32Or("isP2pSupported", 0));
  ASSIGN_OR_RETURN(p.slice_count, f.U32("sliceCount"));
  ASSIGN_OR_RETURN(p.instance_count, f.U32("instanceCount"));
  ASSIGN_OR_RETURN(p.multiprocessor_count, f.U32("multiprocessorCount"));
  ASSIGN_OR_RETURN(p.copy_engine_count, f.U32("copyEngineCount"));
  ASSIGN_OR_RETURN(p.decoder_count, f.U32("decoderCount"));
  ASSIGN_OR_RETURN(p.encoder_count, f.U32("encoderCount"));
  ASSIGN_OR_RETURN(p.jpeg_count, f.U32("jpegCount"));
  ASSIGN_OR_RETURN(p.ofa_count, f.U32("ofaCount"));
  ASSIGN_OR_RETURN(p.memory_size_mb, f.U64("memorySizeMB"));
  if (p.slice_count == 0) return f.Error("sliceCount", "must be positive");
  RETURN_IF_ERROR(f.RequireArray("placements"));
  const Field placements = f.Child("placements");
  for (std::size_t i = 0; i < placements.value().size(); ++i) {
    const json& pair = placements.value()[i];
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_unsigned() ||
        !pair[1].is_number_unsigned()) {
      return common::InvalidArgumentError(Indexed(placements.path(), i) +
                                          ": expected [start, size]");
    }
    p.placements.push_back({pair[0].get<unsigned>(), pair[1].get<unsigned>()});
  }
  // The GI's name without "MIG ": "7g.40gb", used to name its CI profiles.
  std::string short_name = p.name;
  if (short_name.starts_with("MIG ")) short_name = short_name.substr(4);
  std::vector<unsigned> ci_slices = {p.slice_count};
  if (f.Has("computeInstanceSlices")) {
    RETURN_IF_ERROR(f.RequireArray("computeInstanceSlices"));
    ci_slices.clear();
    for (const json& s : f.value().at("computeInstanceSlices")) {
      if (!s.is_number_unsigned()) return f.Error("computeInstanceSlices", "expected unsigned");
      ci_slices.push_back(s.get<unsigned>());
    }
  }
  for (unsigned slices : ci_slices) {
    const std::optional<unsigned> index = ComputeProfileIndexForSlices(slices);
    if (!index || slices > p.slice_count) {
      return f.Error("computeInstanceSlices", "no CI profile with " + std::to_string(slices) +
                                                 " slices fits this GI");
    }
    ComputeInstanceProfile ci;
    ci.index = *index;
    ci.slice_count = slices;
    ci.instance_count = p.slice_count / slices;
    ci.multiprocessor_count = p.multiprocessor_count / p.slice_count * slices;
    if (slices == p.slice_count) ci.multiprocessor_count = p.multiprocessor_count;
    ci.name = slices == p.slice_count ? short_name : std::to_string(slices) + "c." + short_name;
    p.compute_profiles.push_back(std::move(ci));
  }
  return p;
}

StatusOr<MigSpec> ParseMig(const Field& f) {
  MigSpec mig;
  if (f.Has("mode")) {
    const Field mode = f.Child("mode");
    ASSIGN_OR_RETURN(mig.current_mode, mode.U32("current"));
    ASSIGN_OR_RETURN(mig.pending_mode, mode.U32("pending"));
  }
  ASSIGN_OR_RETURN(mig.max_mig_device_count, f.U32("maxMigDeviceCount"));
  ASSIGN_OR_RETURN(mig.memory_slices, f.U32Or("memorySlices", 8));
  if (f.Has("gpuInstanceProfiles")) {
    RETURN_IF_ERROR(f.RequireArray("gpuInstanceProfiles"));
    const Field list = f.Child("gpuInstanceProfiles");
    for (std::size_t i = 0; i < list.value().size(); ++i) {
      ASSIGN_OR_RETURN(GpuInstanceProfile p,
                       ParseGpuInstanceProfile(Field(list.value()[i], Indexed(list.path(), i))));
      mig.profiles.push_back(std::move(p));
    }
  }
  if (f.Has("gpuInstances")) {
    RETURN_IF_ERROR(f.RequireArray("gpuInstances"));
    const Field list = f.Child("gpuInstances");
    for (std::size_t i = 0; i < list.value().size(); ++i) {
      const Field gi(list.value()[i], Indexed(list.path(), i));
      StaticGpuInstance s;
      ASSIGN_OR_RETURN(s.profile_id, gi.U32("profileId"));
      ASSIGN_OR_RETURN(s.start, gi.U32("start"));
      if (mig.ProfileById(s.profile_id) == nullptr) {
        return gi.Error("profileId", "not among gpuInstanceProfiles");
      }
      if (gi.Has("computeInstances")) {
        RETURN_IF_ERROR(gi.RequireArray("computeInstances"));
        const Field cis = gi.Child("computeInstances");
        for (std::size_t j = 0; j < cis.value().size(); ++j) {
          ASSIGN_OR_RETURN(unsigned id,
                           Field(cis.value()[j], Indexed(cis.path(), j)).U32("profileId"));
          s.compute_profile_ids.push_back(id);
        }
      }
      mig.static_instances.push_back(std::move(s));
    }
  }
  return mig;
}

StatusOr<FabricSpec> ParseFabric(const Field& f) {
  FabricSpec fabric;
  ASSIGN_OR_RETURN(std::string uuid, f.Str("clusterUuid"));
  const auto bytes = ParseUuidBytes(uuid);
  if (!bytes) return f.Error("clusterUuid", "expected a UUID");
  fabric.cluster_uuid = *bytes;
  ASSIGN_OR_RETURN(fabric.clique_id, f.U32Or("cliqueId", 0));
  ASSIGN_OR_RETURN(std::string state, f.Str("state"));
  const auto parsed = ParseFabricState(state);
  if (!parsed) {
    return f.Error("state", "expected not_supported|not_started|in_progress|completed");
  }
  fabric.state = *parsed;
  if (f.Has("status")) {
    ASSIGN_OR_RETURN(fabric.status, f.I32("status"));
  }
  ASSIGN_OR_RETURN(fabric.health_mask, f.U32Or("healthMask", 0));
  ASSIGN_OR_RETURN(unsigned summary, f.U32Or("healthSummary", 0));
  if (summary > 3) return f.Error("healthSummary", "expected 0..3");
  fabric.health_summary = static_cast<unsigned char>(summary);
  return fabric;
}

StatusOr<GpuSpec> ParseGpu(const Field& f) {
  GpuSpec gpu;
  ASSIGN_OR_RETURN(gpu.uuid, f.Str("uuid"));
  if (!gpu.uuid.starts_with("GPU-")) return f.Error("uuid", "expected GPU-<uuid>");
  ASSIGN_OR_RETURN(gpu.name, f.Str("name"));
  ASSIGN_OR_RETURN(gpu.brand, f.I32("brand"));
  ASSIGN_OR_RETURN(gpu.architecture, f.U32("architecture"));
  const json& cc = f.Has("cudaComputeCapability") ? f.value().at("cudaComputeCapability") : json();
  if (!cc.is_array() || cc.size() != 2 || !cc[0].is_number_integer() ||
      !cc[1].is_number_integer()) {
    return f.Error("cudaComputeCapability", "expected [major, minor]");
  }
  gpu.cuda_cc_major = cc[0].get<int>();
  gpu.cuda_cc_minor = cc[1].get<int>();
  RETURN_IF_ERROR(f.RequireObject("memory"));
  const Field memory = f.Child("memory");
  ASSIGN_OR_RETURN(gpu.memory.total, memory.U64("total"));
  ASSIGN_OR_RETURN(gpu.memory.free, memory.U64("free"));
  ASSIGN_OR_RETURN(gpu.memory.used, memory.U64("used"));
  RETURN_IF_ERROR(f.RequireObject("pci"));
  RETURN_IF_ERROR(FillPci(f.Child("pci"), gpu.pci));
  ASSIGN_OR_RETURN(gpu.minor, f.U32("minor"));
  ASSIGN_OR_RETURN(gpu.numa_node, f.OptionalU32("numaNode"));
  ASSIGN_OR_RETURN(gpu.addressing_mode, f.OptionalU32("addressingMode"));
  ASSIGN_OR_RETURN(gpu.module_id, f.OptionalU32("moduleId"));
  ASSIGN_OR_RETURN(gpu.supported_event_types, f.U64("supportedEventTypes"));
  if (f.Has("mig")) {
    RETURN_IF_ERROR(f.RequireObject("mig"));
    ASSIGN_OR_RETURN(gpu.mig, ParseMig(f.Child("mig")));
  } else if (!f.IsNull("mig")) {
    return f.Error("mig", "missing (null for a GPU without MIG)");
  }
  if (f.Has("fabric")) {
    RETURN_IF_ERROR(f.RequireObject("fabric"));
    ASSIGN_OR_RETURN(gpu.fabric, ParseFabric(f.Child("fabric")));
  } else if (!f.IsNull("fabric")) {
    return f.Error("fabric", "missing (null for a GPU without fabric support)");
  }
  return gpu;
}

StatusOr<Profile> ParseProfile(const json& root) {
  const Field top(root, "");
  if (!root.is_object()) return common::InvalidArgumentError("profile: expected a JSON object");
  Profile profile;
  ASSIGN_OR_RETURN(profile.driver_version, top.Str("driverVersion"));
  ASSIGN_OR_RETURN(profile.nvml_version, top.Str("nvmlVersion"));
  ASSIGN_OR_RETURN(profile.cuda_driver_version, top.I32("cudaDriverVersion"));
  if (top.Has("missingFunctions")) {
    RETURN_IF_ERROR(top.RequireArray("missingFunctions"));
    for (const json& name : root.at("missingFunctions")) {
      if (!name.is_string()) return top.Error("missingFunctions", "expected strings");
      profile.missing_functions.insert(name.get<std::string>());
    }
  }
  json defaults = json::object();
  if (top.Has("deviceDefaults")) {
    RETURN_IF_ERROR(top.RequireObject("deviceDefaults"));
    defaults = root.at("deviceDefaults");
  }
  RETURN_IF_ERROR(top.RequireArray("devices"));
  const json& devices = root.at("devices");
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (!devices[i].is_object()) {
      return common::InvalidArgumentError(Indexed("devices", i) + ": expected an object");
    }
    json merged = defaults;
    merged.merge_patch(devices[i]);
    // merge_patch drops keys patched to null; a device saying "fabric": null
    // means "no fabric", so put the explicit nulls back.
    for (const auto& [key, value] : devices[i].items()) {
      if (value.is_null()) merged[key] = nullptr;
    }
    ASSIGN_OR_RETURN(GpuSpec gpu, ParseGpu(Field(merged, Indexed("devices", i))));
    profile.gpus.push_back(std::move(gpu));
  }
  for (std::size_t i = 0; i < profile.gpus.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (profile.gpus[i].uuid == profile.gpus[j].uuid) {
        return common::InvalidArgumentError(Indexed("devices", i) + ".uuid: duplicate");
      }
    }
  }
  return profile;
}

}  // namespace

const GpuInstanceProfile* MigSpec::ProfileById(unsigned id) const {
  for (const GpuInstanceProfile& p : profiles) {
    if (p.id == id) return &p;
  }
  return nullptr;
}

const GpuInstanceProfile* MigSpec::ProfileByIndex(unsigned index) const {
  for (const GpuInstanceProfile& p : profiles) {
    if (p.index == index) return &p;
  }
  return nullptr;
}

std::optional<std::array<unsigned char, 16>> ParseUuidBytes(std::string_view text) {
  std::array<unsigned char, 16> bytes{};
  std::size_t nibbles = 0;
  for (char c : text) {
    if (c == '-') continue;
    int v = -1;
    if (c >= '0' && c <= '9') v = c - '0';
    if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    if (v < 0 || nibbles >= 32) return std::nullopt;
    bytes[nibbles / 2] =
        static_cast<unsigned char>(bytes[nibbles / 2] | (nibbles % 2 == 0 ? v << 4 : v));
    ++nibbles;
  }
  if (nibbles != 32) return std::nullopt;
  return bytes;
}

std::optional<unsigned char> ParseFabricState(std::string_view text) {
  if (text == "not_supported") return abi::NVML_GPU_FABRIC_STATE_NOT_SUPPORTED;
  if (text == "not_started") return abi::NVML_GPU_FABRIC_STATE_NOT_STARTED;
  if (text == "in_progress") return abi::NVML_GPU_FABRIC_STATE_IN_PROGRESS;
  if (text == "completed") return abi::NVML_GPU_FABRIC_STATE_COMPLETED;
  return std::nullopt;
}

StatusOr<std::filesystem::path> FindProfilePath() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("MOCK_NVML_PROFILE"); env != nullptr && *env != '\0') {
    std::error_code ec;
    if (fs::is_regular_file(env, ec)) return fs::path(env);
    return common::NotFoundError(std::string("MOCK_NVML_PROFILE=") + env + " is not a file");
  }
  Dl_info info{};
  // Any function of this library locates its file.
  if (dladdr(reinterpret_cast<const void*>(&FindProfilePath), &info) == 0 ||
      info.dli_fname == nullptr) {
    return common::NotFoundError("MOCK_NVML_PROFILE unset and dladdr found no library path");
  }
  std::error_code ec;
  fs::path library_dir = fs::absolute(fs::path(info.dli_fname), ec).parent_path();
  const std::string dir = library_dir.lexically_normal().generic_string();
  std::string tried;
  for (std::string_view folder : kLibraryFolders) {
    const std::string suffix = "/" + std::string(folder);
    if (!dir.ends_with(suffix)) continue;
    fs::path root = dir.substr(0, dir.size() - suffix.size());
    if (root.empty()) root = "/";
    const fs::path candidate = root / "mock-nvml" / "profile.json";
    if (fs::is_regular_file(candidate, ec)) return candidate;
    tried += (tried.empty() ? "" : ", ") + candidate.string();
  }
  if (tried.empty()) {
    return common::NotFoundError("MOCK_NVML_PROFILE unset and the library folder " + dir +
                                 " is not a known library folder under a driver root");
  }
  return common::NotFoundError("MOCK_NVML_PROFILE unset; tried " + tried);
}

std::vector<GpuSpec> NvidiaManagedGpus(const Profile& profile) {
  namespace fs = std::filesystem;
  const fs::path folder = profile.path.parent_path();
  std::error_code ec;
  if (folder.filename() != "mock-nvml") return profile.gpus;
  const fs::path sys = folder.parent_path() / "sys";
  if (!fs::is_directory(sys / "bus/pci/drivers", ec)) return profile.gpus;
  std::vector<GpuSpec> managed;
  for (const GpuSpec& gpu : profile.gpus) {
    // sysfs names "0000:18:00.0": NVML's legacy spelling, lowercase.
    std::string bus_id = gpu.pci.busIdLegacy;
    std::transform(bus_id.begin(), bus_id.end(), bus_id.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const fs::path device = sys / "bus/pci/devices" / bus_id;
    if (!fs::exists(device, ec) || fs::read_symlink(device / "driver", ec).filename() == "nvidia") {
      managed.push_back(gpu);
    }
  }
  return managed;
}

StatusOr<Profile> LoadProfile(const std::filesystem::path& path) {
  StatusOr<std::string> text = common::ReadWholeFile(path);
  if (!text.ok()) return text.status().WithContext("cannot read profile");
  json root;
  try {
    root = json::parse(*text);
  } catch (const json::exception& e) {
    return common::InvalidArgumentError("profile " + path.string() + ": " + e.what());
  }
  StatusOr<Profile> profile = ParseProfile(root);
  if (!profile.ok()) return profile.status().WithContext("profile " + path.string());
  profile->path = path;
  return profile;
}

}  // namespace nvdra::mocknvml
