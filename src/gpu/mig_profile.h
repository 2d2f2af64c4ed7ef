#pragma once

// MIG profile names and MIG device names, as the upstream driver (through
// NVIDIA's go-nvlib) spells them, because users' CEL selectors and existing
// checkpoints depend on the exact strings.
//
//   profile name:  "<G>g.<GB>gb[+attr|-negattr]", or "<C>c.<G>g.<GB>gb..." when
//                  the compute instance is smaller than the GPU instance
//                  ("1g.10gb", "1g.10gb+me", "7g.80gb", "1c.2g.20gb").
//   device name:   "gpu-<parent minor>-mig-<profile, dots removed, RFC 1123
//                  cleaned>-<GI profile id>-<placement start>"
//                  ("gpu-0-mig-1g10gb-19-0", "gpu-3-mig-1g10gb-me-20-6").
//
// Thread-safety: values and pure functions.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "nvml/library.h"

namespace nvdra::gpu {

struct MigProfileName {
  int compute_slices = 0;  // C
  int gpu_slices = 0;      // G
  int memory_gb = 0;       // GB, rounded the way go-nvlib rounds
  std::vector<std::string> attributes;      // "me", "me.all", "gfx"
  std::vector<std::string> neg_attributes;  // "me" for the NO_ME profiles

  [[nodiscard]] std::string ToString() const;
  friend bool operator==(const MigProfileName&, const MigProfileName&) = default;
};

// Builds the name of GPU-instance profile index `gi_profile_index`
// (NVML_GPU_INSTANCE_PROFILE_*) with compute-instance profile index
// `ci_profile_index`, whose instances have `memory_size_mb` MiB on a GPU of
// `device_memory_bytes`. nullopt for an index this code does not know (a newer
// NVML's profile: callers skip it rather than fail).
std::optional<MigProfileName> MakeMigProfileName(std::uint32_t gi_profile_index,
                                                 std::uint32_t ci_profile_index,
                                                 std::uint64_t memory_size_mb,
                                                 std::uint64_t device_memory_bytes);

// GB as go-nvlib computes it: the instance's fraction of the GPU's memory,
// rounded up to eighths, times the GPU's memory in whole GiB (rounded up),
// rounded to the nearest integer.
int MigMemorySizeGb(std::uint64_t device_memory_bytes, std::uint64_t memory_size_mb);

// Lowercase; characters outside [a-z0-9-.] become '-'; leading and trailing
// '-' and a trailing '.' removed; at most 253 characters.
std::string ToRfc1123(std::string name);

// "gpu-<minor>-mig-<profile without dots, RFC 1123>-<profile id>-<start>".
std::string MigDeviceName(std::uint32_t parent_minor, const std::string& profile_name,
                          std::uint32_t gi_profile_id, std::uint32_t placement_start);

// The parts of a MIG device name. kInvalidArgument when `name` does not have
// the shape above.
struct MigDeviceNameParts {
  std::uint32_t parent_minor = 0;
  std::string profile;  // as written in the name (dots removed)
  std::uint32_t gi_profile_id = 0;
  std::uint32_t placement_start = 0;
};
common::StatusOr<MigDeviceNameParts> ParseMigDeviceName(const std::string& name);

// "gpu-<minor>".
std::string GpuDeviceName(std::uint32_t minor);

// The engine counts of a GPU instance profile, by the names upstream gives
// them in MIG devices' capacities (CommonCapacitiesMig); nvidia-dra-inspect
// reports them under the same names.
struct MigProfileCount {
  std::string_view name;
  std::uint32_t nvml::GpuInstanceProfile::*field;
};
inline constexpr std::array<MigProfileCount, 6> kMigProfileCounts = {{
    {"multiprocessors", &nvml::GpuInstanceProfile::multiprocessor_count},
    {"copyEngines", &nvml::GpuInstanceProfile::copy_engine_count},
    {"decoders", &nvml::GpuInstanceProfile::decoder_count},
    {"encoders", &nvml::GpuInstanceProfile::encoder_count},
    {"jpegEngines", &nvml::GpuInstanceProfile::jpeg_count},
    {"ofaEngines", &nvml::GpuInstanceProfile::ofa_count},
}};

}  // namespace nvdra::gpu
