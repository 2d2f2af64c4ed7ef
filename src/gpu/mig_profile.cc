#include "gpu/mig_profile.h"

#include <charconv>
#include <cmath>
#include <regex>

#include <fmt/format.h>

#include "nvml/nvml_abi.h"

namespace nvdra::gpu {
namespace {

// GPU slices of each NVML_GPU_INSTANCE_PROFILE_* index (0 = unknown).
int GpuSlices(std::uint32_t gi_profile_index) {
  switch (gi_profile_index) {
    case 0x0: case 0x7: case 0x9: case 0xA: case 0xD: case 0xF: return 1;  // 1_SLICE*
    case 0x1: case 0x8: case 0xB: case 0xE: case 0x10: return 2;           // 2_SLICE*
    case 0x2: return 3;
    case 0x3: case 0xC: return 4;
    case 0x6: return 6;
    case 0x4: return 7;
    case 0x5: return 8;
    default: return 0;
  }
}

// Compute slices of each NVML_COMPUTE_INSTANCE_PROFILE_* index (0 = unknown).
int ComputeSlices(std::uint32_t ci_profile_index) {
  switch (ci_profile_index) {
    case 0x0: case 0x7: return 1;  // 1_SLICE, 1_SLICE_REV1
    case 0x1: return 2;
    case 0x2: return 3;
    case 0x3: return 4;
    case 0x6: return 6;
    case 0x4: case 0x8: return 7;  // 7_SLICE, 7_SLICE_NVL
    case 0x5: return 8;
    default: return 0;
  }
}

}  // namespace

std::string MigProfileName::ToString() const {
  std::string suffix;
  if (!attributes.empty()) suffix = "+" + fmt::format("{}", fmt::join(attributes, ","));
  if (!neg_attributes.empty()) suffix = "-" + fmt::format("{}", fmt::join(neg_attributes, ","));
  if (compute_slices == gpu_slices) return fmt::format("{}g.{}gb{}", gpu_slices, memory_gb, suffix);
  return fmt::format("{}c.{}g.{}gb{}", compute_slices, gpu_slices, memory_gb, suffix);
}

int MigMemorySizeGb(std::uint64_t device_memory_bytes, std::uint64_t memory_size_mb) {
  if (device_memory_bytes == 0) return 0;
  constexpr double kEighths = 8.0;
  constexpr std::uint64_t kMiB = 1024ULL * 1024ULL;
  constexpr std::uint64_t kGiB = kMiB * 1024ULL;
  double fraction = static_cast<double>(memory_size_mb * kMiB) /
                    static_cast<double>(device_memory_bytes);
  fraction = std::ceil(fraction * kEighths) / kEighths;
  double total_gb = static_cast<double>((device_memory_bytes + kGiB - 1) / kGiB);
  return static_cast<int>(std::llround(fraction * total_gb));
}

std::optional<MigProfileName> MakeMigProfileName(std::uint32_t gi_profile_index,
                                                 std::uint32_t ci_profile_index,
                                                 std::uint64_t memory_size_mb,
                                                 std::uint64_t device_memory_bytes) {
  MigProfileName name;
  name.gpu_slices = GpuSlices(gi_profile_index);
  name.compute_slices = ComputeSlices(ci_profile_index);
  if (name.gpu_slices == 0 || name.compute_slices == 0) return std::nullopt;
  name.memory_gb = MigMemorySizeGb(device_memory_bytes, memory_size_mb);
  switch (gi_profile_index) {
    case 0x7: case 0x8: name.attributes = {"me"}; break;         // *_REV1
    case 0xF: case 0x10: name.attributes = {"me.all"}; break;    // *_ALL_ME
    case 0xA: case 0xB: case 0xC: name.attributes = {"gfx"}; break;  // *_GFX
    case 0xD: case 0xE: name.neg_attributes = {"me"}; break;     // *_NO_ME
    default: break;
  }
  return name;
}

std::string ToRfc1123(std::string name) {
  for (char& c : name) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u >= 'A' && u <= 'Z') c = static_cast<char>(u - 'A' + 'a');
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
    if (!ok) c = '-';
  }
  std::size_t begin = name.find_first_not_of('-');
  if (begin == std::string::npos) return std::string();
  std::size_t end = name.find_last_not_of('-');
  name = name.substr(begin, end - begin + 1);
  if (!name.empty() && name.back() == '.') name.pop_back();
  if (name.size() > 253) name.resize(253);
  return name;
}

std::string MigDeviceName(std::uint32_t parent_minor, const std::string& profile_name,
                          std::uint32_t gi_profile_id, std::uint32_t placement_start) {
  std::string profile;
  for (char c : profile_name) {
    if (c != '.') profile.push_back(c);
  }
  return fmt::format("gpu-{}-mig-{}-{}-{}", parent_minor, ToRfc1123(profile), gi_profile_id,
                     placement_start);
}

common::StatusOr<MigDeviceNameParts> ParseMigDeviceName(const std::string& name) {
  static const std::regex kPattern(R"(^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$)");
  std::smatch match;
  if (!std::regex_match(name, match, kPattern)) {
    return common::InvalidArgumentError(fmt::format(
        "device name \"{}\" is not a MIG device name (gpu-<minor>-mig-<profile>-<profile id>-"
        "<placement start>)",
        name));
  }
  std::uint32_t numbers[3] = {};
  const std::size_t groups[3] = {1, 3, 4};
  for (std::size_t i = 0; i < 3; ++i) {
    const std::string text = match[groups[i]].str();
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), numbers[i]);
    if (ec != std::errc() || end != text.data() + text.size()) {
      return common::InvalidArgumentError(
          fmt::format("device name \"{}\": {} is out of range", name, text));
    }
  }
  MigDeviceNameParts parts;
  parts.parent_minor = numbers[0];
  parts.profile = match[2].str();
  parts.gi_profile_id = numbers[1];
  parts.placement_start = numbers[2];
  return parts;
}

std::string GpuDeviceName(std::uint32_t minor) { return fmt::format("gpu-{}", minor); }

}  // namespace nvdra::gpu
