#pragma once

// The mock NVML's view of a node: the GPUs a profile JSON file describes, and
// how the library finds that file.
//
// Defines: GpuInstanceProfile, ComputeInstanceProfile, StaticGpuInstance,
// MigSpec, FabricSpec, GpuSpec, Profile, FindProfilePath, LoadProfile.
//
// Profile format (test/mocknvml/README.md has the full list): top-level
// "driverVersion", "nvmlVersion", "cudaDriverVersion", "missingFunctions",
// "deviceDefaults" and "devices"; each entry of "devices" is merged over
// "deviceDefaults" (RFC 7386 merge patch), so a device lists only what
// differs. "mig": null means not MIG-capable, "fabric": null means the fabric
// calls answer NOT_SUPPORTED (pre-Hopper).
//
// Ownership: plain values. Thread-safety: immutable after LoadProfile.

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "nvml/nvml_abi.h"

namespace nvdra::mocknvml {

namespace abi = nvdra::nvml::abi;
using common::Status;
using common::StatusOr;

struct ComputeInstanceProfile {
  unsigned index = 0;  // NVML_COMPUTE_INSTANCE_PROFILE_*; NVML uses it as the id too
  unsigned slice_count = 0;
  unsigned instance_count = 0;
  unsigned multiprocessor_count = 0;
  std::string name;  // "1c.7g.40gb"; equal to the GI's name when it spans the GI
};

struct GpuInstanceProfile {
  unsigned index = 0;  // NVML_GPU_INSTANCE_PROFILE_*: the argument of ...ProfileInfoV
  unsigned id = 0;     // what NVML returns and takes everywhere else (19 for 1g.5gb)
  std::string name;    // "MIG 1g.5gb"
  unsigned is_p2p_supported = 0;
  unsigned slice_count = 0;  // compute slices
  unsigned instance_count = 0;
  unsigned multiprocessor_count = 0;
  unsigned copy_engine_count = 0;
  unsigned decoder_count = 0;
  unsigned encoder_count = 0;
  unsigned jpeg_count = 0;
  unsigned ofa_count = 0;
  unsigned long long memory_size_mb = 0;
  // Placements in memory slices, as nvmlDeviceGetGpuInstancePossiblePlacements_v2 gives them.
  std::vector<abi::nvmlGpuInstancePlacement_t> placements;
  // Derived from the profile's "computeInstanceSlices" (e.g. [1,2,3,4,7]).
  std::vector<ComputeInstanceProfile> compute_profiles;
};

// A pre-created MIG device: a GI and its CIs, written to the state file on
// first use.
struct StaticGpuInstance {
  unsigned profile_id = 0;
  unsigned start = 0;
  std::vector<unsigned> compute_profile_ids;
};

struct MigSpec {
  unsigned current_mode = 0;  // NVML_DEVICE_MIG_DISABLE / _ENABLE, the state file's start value
  unsigned pending_mode = 0;
  unsigned max_mig_device_count = 0;  // when MIG is enabled; NVML answers 0 when disabled
  unsigned memory_slices = 8;
  std::vector<GpuInstanceProfile> profiles;
  std::vector<StaticGpuInstance> static_instances;

  const GpuInstanceProfile* ProfileById(unsigned id) const;
  const GpuInstanceProfile* ProfileByIndex(unsigned index) const;
};

struct FabricSpec {
  std::array<unsigned char, abi::kGpuFabricUuidLength> cluster_uuid{};
  unsigned clique_id = 0;
  unsigned char state = abi::NVML_GPU_FABRIC_STATE_NOT_SUPPORTED;
  abi::nvmlReturn_t status = abi::NVML_SUCCESS;
  unsigned health_mask = 0;
  unsigned char health_summary = 0;
};

struct GpuSpec {
  std::string uuid;
  std::string name;
  abi::nvmlBrandType_t brand = 0;
  abi::nvmlDeviceArchitecture_t architecture = abi::NVML_DEVICE_ARCH_UNKNOWN;
  int cuda_cc_major = 0;
  int cuda_cc_minor = 0;
  abi::nvmlMemory_t memory{};
  abi::nvmlPciInfo_t pci{};
  unsigned minor = 0;
  std::optional<unsigned> numa_node;        // nullopt: NOT_SUPPORTED (as on the probed VM)
  std::optional<unsigned> addressing_mode;  // nullopt: NOT_SUPPORTED
  std::optional<unsigned> module_id;        // nullopt: NOT_SUPPORTED
  unsigned long long supported_event_types = 0;
  std::optional<MigSpec> mig;        // nullopt: not MIG-capable
  std::optional<FabricSpec> fabric;  // nullopt: fabric calls return NOT_SUPPORTED
};

struct Profile {
  std::filesystem::path path;
  std::string driver_version;
  std::string nvml_version;
  int cuda_driver_version = 0;
  std::vector<GpuSpec> gpus;
  std::set<std::string, std::less<>> missing_functions;
};

// Where the profile is: $MOCK_NVML_PROFILE when set, else
// <driver root>/mock-nvml/profile.json, where the driver root is the folder
// holding this library minus its library folder (usr/lib64,
// usr/lib/x86_64-linux-gnu, usr/lib/aarch64-linux-gnu, lib64, usr/lib, lib).
// kNotFound lists every path tried.
StatusOr<std::filesystem::path> FindProfilePath();

// Parses `path`. kNotFound when it cannot be read; kInvalidArgument naming the
// field ("devices[2].pci.busId: ...") when it is malformed.
StatusOr<Profile> LoadProfile(const std::filesystem::path& path);

// The GPUs of `profile` NVML manages, in profile order: those the nvidia
// kernel driver holds in the mock sysfs of the driver root the profile lies
// in (<root>/sys when the profile is <root>/mock-nvml/profile.json; see
// make-sysfs.py). A GPU is left out when <root>/sys/bus/pci/drivers exists,
// sys/bus/pci/devices/<bdf> exists, and the device's `driver` link is missing
// or names another driver (vfio-pci): the real library does not see a GPU it
// has no driver for. Every GPU stays when there is no such tree (profiles
// elsewhere, roots laid out before the tree existed, a test's partial sysfs).
std::vector<GpuSpec> NvidiaManagedGpus(const Profile& profile);

// Parses "aabbccdd-eeff-0011-2233-445566778899" (dashes optional) into 16 bytes.
std::optional<std::array<unsigned char, 16>> ParseUuidBytes(std::string_view text);

// "not_supported" | "not_started" | "in_progress" | "completed" to
// NVML_GPU_FABRIC_STATE_*.
std::optional<unsigned char> ParseFabricState(std::string_view text);

}  // namespace nvdra::mocknvml
