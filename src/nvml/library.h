#pragma once

// NVML, loaded at run time: Library opens libnvidia-ml.so.1 from the driver
// root with dlopen, resolves the functions of nvml_abi.h, initialises NVML, and
// hands out Device, GpuInstance and ComputeInstance views with typed results.
//
//   ASSIGN_OR_RETURN(auto nvml, nvml::Library::Open({.driver_root = "/run/nvidia/driver"}));
//   ASSIGN_OR_RETURN(unsigned count, nvml->DeviceCount());
//   ASSIGN_OR_RETURN(nvml::Device gpu, nvml->DeviceByIndex(0));
//   ASSIGN_OR_RETURN(std::string uuid, gpu.Uuid());
//
// Errors: every failed NVML call becomes a Status whose message names the
// function and carries nvmlErrorString ("nvmlDeviceGetUUID: GPU is lost"), with
// the code from NvmlReturnToStatusCode. A function the loaded library does not
// export is not fatal: the call returns kUnimplemented ("... not exported by
// this libnvidia-ml.so.1") and MissingFunctions() lists it. NVML's
// NOT_SUPPORTED is kUnimplemented too; IsNotSupported() tells both apart from
// real errors.
//
// Ownership: Library owns the dlopen handle and the NVML initialisation; its
// destructor calls nvmlShutdown and dlclose. Device, GpuInstance and
// ComputeInstance are small non-owning views that must not outlive their
// Library. Thread-safety: thread-safe (NVML itself is thread-safe; Library
// holds no mutable state after Open).

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "nvml/nvml_abi.h"

namespace nvdra::nvml {

using common::Status;
using common::StatusCode;
using common::StatusOr;

// NVML return code to our code: NOT_FOUND/GPU_NOT_FOUND kNotFound,
// NOT_SUPPORTED/FUNCTION_NOT_FOUND kUnimplemented, NO_PERMISSION
// kPermissionDenied, INVALID_ARGUMENT/ARGUMENT_VERSION_MISMATCH
// kInvalidArgument, INSUFFICIENT_RESOURCES/MEMORY kResourceExhausted,
// IN_USE/INVALID_STATE/UNINITIALIZED/RESET_REQUIRED kFailedPrecondition,
// GPU_IS_LOST/TIMEOUT/NOT_READY/DRIVER_NOT_LOADED kUnavailable, the rest kInternal.
StatusCode NvmlReturnToStatusCode(abi::nvmlReturn_t code);

// True for a Status made from NVML_ERROR_NOT_SUPPORTED or from a function the
// library does not export: "this GPU or driver cannot answer", not a failure.
bool IsNotSupported(const Status& status);
// Whether `status` came from NVML_ERROR_GPU_IS_LOST (the GPU fell off the bus
// or stopped answering).
bool IsGpuLost(const Status& status);

struct LibraryOptions {
  // Host path of the NVIDIA driver installation ("/" for a driver on the host,
  // "/run/nvidia/driver" for the GPU operator's container driver).
  std::filesystem::path driver_root = "/";
  // Load exactly this file instead of searching the driver root (tests, and
  // operators with unusual layouts).
  std::optional<std::filesystem::path> library_path;
};

struct PciInfo {
  std::string bus_id;  // "0000:65:00.0": 4-digit domain, lowercase, as sysfs names it
  std::uint32_t domain = 0;
  std::uint32_t bus = 0;
  std::uint32_t device = 0;
  std::uint16_t device_id = 0;  // PCI device id (0x2330 for an H100 SXM)
  std::uint16_t vendor_id = 0;  // 0x10de
  std::uint32_t subsystem_id = 0;
};

struct MemoryInfo {
  std::uint64_t total_bytes = 0;
  std::uint64_t free_bytes = 0;
  std::uint64_t used_bytes = 0;
};

struct MigMode {
  bool current = false;
  bool pending = false;
};

struct ComputeCapability {
  int major = 0;
  int minor = 0;
};

struct GpuInstancePlacement {
  std::uint32_t start = 0;
  std::uint32_t size = 0;
  friend bool operator==(const GpuInstancePlacement&, const GpuInstancePlacement&) = default;
};

// One GPU-instance profile of a MIG-capable GPU (nvmlGpuInstanceProfileInfo_v2_t).
struct GpuInstanceProfile {
  std::uint32_t profile_index = 0;  // the NVML_GPU_INSTANCE_PROFILE_* index asked for
  std::uint32_t id = 0;             // the profile id NVML uses everywhere else
  std::string name;                 // "MIG 1g.10gb" as NVML reports it
  bool p2p_supported = false;
  std::uint32_t slice_count = 0;
  std::uint32_t instance_count = 0;
  std::uint32_t multiprocessor_count = 0;
  std::uint32_t copy_engine_count = 0;
  std::uint32_t decoder_count = 0;
  std::uint32_t encoder_count = 0;
  std::uint32_t jpeg_count = 0;
  std::uint32_t ofa_count = 0;
  std::uint64_t memory_size_mb = 0;
};

struct ComputeInstanceProfile {
  std::uint32_t profile_index = 0;
  std::uint32_t id = 0;
  std::string name;
  std::uint32_t slice_count = 0;
  std::uint32_t instance_count = 0;
  std::uint32_t multiprocessor_count = 0;
};

// nvmlGpuFabricInfo in one shape, whichever call answered.
struct FabricInfo {
  std::array<unsigned char, abi::kGpuFabricUuidLength> cluster_uuid{};
  abi::nvmlReturn_t status = abi::NVML_SUCCESS;  // the fabric's own result
  std::uint32_t clique_id = 0;
  unsigned char state = abi::NVML_GPU_FABRIC_STATE_NOT_SUPPORTED;
  std::optional<std::uint32_t> health_mask;     // v2 and later
  std::optional<unsigned char> health_summary;  // v3 and later
  std::string source;                           // which function answered
};

// One event from an EventSet.
struct Event {
  std::uint64_t type = 0;  // nvmlEventType* bit
  std::uint64_t data = 0;  // the XID for XID events
  std::string device_uuid;
  std::optional<std::uint32_t> gpu_instance_id;
  std::optional<std::uint32_t> compute_instance_id;
};

class Library;
class GpuInstance;

// A GPU or MIG device handle. Non-owning; valid while its Library lives.
class Device {
 public:
  Device(const Library* library, abi::nvmlDevice_t handle) : library_(library), handle_(handle) {}

  [[nodiscard]] abi::nvmlDevice_t handle() const { return handle_; }

  StatusOr<std::string> Uuid() const;
  StatusOr<std::uint32_t> Index() const;
  StatusOr<std::uint32_t> MinorNumber() const;
  StatusOr<std::string> Name() const;
  StatusOr<int> Brand() const;  // nvmlBrandType_t
  StatusOr<std::uint32_t> Architecture() const;  // NVML_DEVICE_ARCH_*
  StatusOr<ComputeCapability> CudaComputeCapability() const;
  StatusOr<MemoryInfo> Memory() const;
  StatusOr<PciInfo> Pci() const;
  StatusOr<std::uint32_t> NumaNodeId() const;
  StatusOr<std::uint32_t> AddressingMode() const;  // NVML_DEVICE_ADDRESSING_MODE_*
  StatusOr<std::uint32_t> ModuleId() const;
  StatusOr<MigMode> GetMigMode() const;
  // Switches MIG mode; kFailedPrecondition (IN_USE) while GPU instances
  // exist. On GPUs that need a reset for it (Ampere) the change stays
  // pending: kFailedPrecondition saying so.
  Status SetMigMode(bool enabled) const;
  // NVML_COMPUTEMODE_* (read only: the plugin changes it through
  // nvidia-smi, as upstream, gpu/compute_policy.h).
  StatusOr<int> ComputeMode() const;
  StatusOr<std::uint32_t> MaxMigDeviceCount() const;

  // The profile at NVML_GPU_INSTANCE_PROFILE_* index `profile_index`;
  // kUnimplemented (IsNotSupported) when this GPU has no such profile.
  StatusOr<GpuInstanceProfile> GetGpuInstanceProfile(std::uint32_t profile_index) const;
  // Every placement where an instance of profile `profile_id` could start on an
  // empty GPU.
  StatusOr<std::vector<GpuInstancePlacement>> GpuInstancePossiblePlacements(
      std::uint32_t profile_id) const;
  StatusOr<std::uint32_t> GpuInstanceRemainingCapacity(std::uint32_t profile_id) const;
  // Existing GPU instances of profile `profile_id`.
  StatusOr<std::vector<GpuInstance>> GpuInstances(std::uint32_t profile_id) const;
  StatusOr<GpuInstance> GpuInstanceById(std::uint32_t id) const;
  // kResourceExhausted when the placement overlaps an existing instance,
  // kInvalidArgument when it is not a possible placement of the profile.
  StatusOr<GpuInstance> CreateGpuInstance(std::uint32_t profile_id,
                                          GpuInstancePlacement placement) const;

  // MIG device views of a GPU with MIG on (index < MaxMigDeviceCount();
  // kNotFound for an empty index).
  StatusOr<Device> MigDeviceByIndex(std::uint32_t index) const;
  StatusOr<bool> IsMigDevice() const;
  StatusOr<Device> ParentOfMigDevice() const;
  StatusOr<std::uint32_t> GpuInstanceId() const;
  StatusOr<std::uint32_t> ComputeInstanceId() const;

  // Fabric info: the v1 call when the library exports it (what go-nvlib
  // prefers), otherwise the versioned call, asking for v3 and falling back to
  // v2 on a version mismatch.
  // kPreferVersioned asks the versioned call first: only it has the health
  // mask and summary (the device health monitor's view).
  enum class FabricCall { kPreferV1, kPreferVersioned };
  StatusOr<FabricInfo> GpuFabricInfo(FabricCall call = FabricCall::kPreferV1) const;

  StatusOr<std::uint64_t> SupportedEventTypes() const;

 private:
  const Library* library_;
  abi::nvmlDevice_t handle_;
};

class ComputeInstance {
 public:
  ComputeInstance(const Library* library, abi::nvmlComputeInstance_t handle)
      : library_(library), handle_(handle) {}
  [[nodiscard]] abi::nvmlComputeInstance_t handle() const { return handle_; }
  // id, profile id, placement start and size.
  StatusOr<abi::nvmlComputeInstanceInfo_t> Info() const;
  Status Destroy() const;

 private:
  const Library* library_;
  abi::nvmlComputeInstance_t handle_;
};

class GpuInstance {
 public:
  GpuInstance(const Library* library, abi::nvmlGpuInstance_t handle)
      : library_(library), handle_(handle) {}
  [[nodiscard]] abi::nvmlGpuInstance_t handle() const { return handle_; }
  StatusOr<abi::nvmlGpuInstanceInfo_t> Info() const;
  StatusOr<ComputeInstanceProfile> GetComputeInstanceProfile(std::uint32_t profile_index) const;
  StatusOr<ComputeInstance> CreateComputeInstance(std::uint32_t profile_id) const;
  StatusOr<std::vector<ComputeInstance>> ComputeInstances(std::uint32_t profile_id) const;
  // kFailedPrecondition (IN_USE) while compute instances remain.
  Status Destroy() const;

 private:
  const Library* library_;
  abi::nvmlGpuInstance_t handle_;
};

// An NVML event set; frees itself. Movable, not copyable. Thread-compatible.
class EventSet {
 public:
  EventSet(EventSet&& other) noexcept;
  EventSet& operator=(EventSet&& other) noexcept;
  EventSet(const EventSet&) = delete;
  EventSet& operator=(const EventSet&) = delete;
  ~EventSet();

  Status Register(const Device& device, std::uint64_t event_types);
  // The next event, or kDeadlineExceeded when none came within `timeout_ms`.
  StatusOr<Event> Wait(std::uint32_t timeout_ms);

 private:
  friend class Library;
  EventSet(const Library* library, abi::nvmlEventSet_t handle) : library_(library), handle_(handle) {}
  const Library* library_;
  abi::nvmlEventSet_t handle_;
};

class Library {
 public:
  // Loads and initialises NVML. Searches, under the driver root, the usual
  // library folders (usr/lib64, usr/lib/x86_64-linux-gnu,
  // usr/lib/aarch64-linux-gnu, lib64, usr/lib, lib), then, for driver root
  // "/", the dynamic loader's own search. kNotFound names every folder
  // searched; kFailedPrecondition when the library loads but nvmlInit fails
  // (driver not loaded, library/driver mismatch), with NVML's reason.
  static StatusOr<std::unique_ptr<Library>> Open(const LibraryOptions& options);

  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  ~Library();

  // The file that was loaded.
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  // Functions of nvml_abi.h that this library does not export.
  [[nodiscard]] const std::vector<std::string>& MissingFunctions() const { return missing_; }

  StatusOr<std::string> DriverVersion() const;  // "580.159.04"
  StatusOr<std::string> NvmlVersion() const;    // "13.580.159.04"
  // CUDA driver API version as NVML reports it: 13000 for 13.0.
  StatusOr<int> CudaDriverVersion() const;
  StatusOr<std::uint32_t> DeviceCount() const;
  StatusOr<Device> DeviceByIndex(std::uint32_t index) const;
  StatusOr<Device> DeviceByUuid(const std::string& uuid) const;
  StatusOr<EventSet> CreateEventSet() const;

  // The text NVML gives for `code` ("Not Supported").
  [[nodiscard]] std::string ErrorString(abi::nvmlReturn_t code) const;

  // Resolved entry points; nullptr where the library lacks the function.
  struct Functions {
#define NVDRA_NVML_FN_MEMBER(name, params) abi::name##_fn name = nullptr;
    NVDRA_NVML_FUNCTIONS(NVDRA_NVML_FN_MEMBER)
#undef NVDRA_NVML_FN_MEMBER
    abi::nvmlErrorString_fn nvmlErrorString = nullptr;
  };
  [[nodiscard]] const Functions& fn() const { return fn_; }

  // Turns an NVML result of `function` into a Status (OK for NVML_SUCCESS).
  [[nodiscard]] Status Check(abi::nvmlReturn_t code, std::string_view function) const;

 private:
  Library() = default;

  void* handle_ = nullptr;  // dlopen handle, closed by the destructor
  bool initialized_ = false;
  std::filesystem::path path_;
  std::vector<std::string> missing_;
  Functions fn_;
};

// The status of calling a function the library does not export.
Status MissingFunctionError(std::string_view function);

}  // namespace nvdra::nvml
