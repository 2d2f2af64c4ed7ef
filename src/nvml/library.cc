#include "nvml/library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "common/driver_library.h"

namespace nvdra::nvml {
namespace {

using abi::nvmlReturn_t;

constexpr std::string_view kMissingMarker = "not exported by this libnvidia-ml.so.1";

constexpr const char* kLibraryName = "libnvidia-ml.so.1";

}  // namespace

StatusCode NvmlReturnToStatusCode(nvmlReturn_t code) {
  switch (code) {
    case abi::NVML_SUCCESS:
      return StatusCode::kOk;
    case abi::NVML_ERROR_NOT_FOUND:
    case abi::NVML_ERROR_GPU_NOT_FOUND:
      return StatusCode::kNotFound;
    case abi::NVML_ERROR_NOT_SUPPORTED:
    case abi::NVML_ERROR_FUNCTION_NOT_FOUND:
      return StatusCode::kUnimplemented;
    case abi::NVML_ERROR_NO_PERMISSION:
      return StatusCode::kPermissionDenied;
    case abi::NVML_ERROR_INVALID_ARGUMENT:
    case abi::NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
    case abi::NVML_ERROR_INSUFFICIENT_SIZE:
      return StatusCode::kInvalidArgument;
    case abi::NVML_ERROR_INSUFFICIENT_RESOURCES:
    case abi::NVML_ERROR_MEMORY:
      return StatusCode::kResourceExhausted;
    case abi::NVML_ERROR_IN_USE:
    case abi::NVML_ERROR_INVALID_STATE:
    case abi::NVML_ERROR_UNINITIALIZED:
    case abi::NVML_ERROR_RESET_REQUIRED:
      return StatusCode::kFailedPrecondition;
    case abi::NVML_ERROR_GPU_IS_LOST:
    case abi::NVML_ERROR_TIMEOUT:
    case abi::NVML_ERROR_NOT_READY:
    case abi::NVML_ERROR_DRIVER_NOT_LOADED:
      return StatusCode::kUnavailable;
    default:
      return StatusCode::kInternal;
  }
}

bool IsNotSupported(const Status& status) {
  if (status.code() != StatusCode::kUnimplemented) return false;
  // Both NVML_ERROR_NOT_SUPPORTED and a missing export map to kUnimplemented;
  // nothing else does.
  return true;
}

bool IsGpuLost(const Status& status) {
  // kUnavailable also covers timeouts and an unloaded driver; Check() puts
  // NVML's own code at the end of the message.
  return status.code() == StatusCode::kUnavailable &&
         status.message().ends_with(fmt::format("(NVML error {})", static_cast<int>(abi::NVML_ERROR_GPU_IS_LOST)));
}

Status MissingFunctionError(std::string_view function) {
  return common::UnimplementedError(fmt::format("{}: {}", function, kMissingMarker));
}

// --- Library --------------------------------------------------------------------

StatusOr<std::unique_ptr<Library>> Library::Open(const LibraryOptions& options) {
  std::unique_ptr<Library> library(new Library());  // private constructor
  ASSIGN_OR_RETURN(const common::LoadedDriverLibrary loaded,
                   common::OpenDriverLibrary(options.driver_root, options.library_path, {kLibraryName},
                                             "NVML library",
                                             "set --nvidia-driver-root (NVIDIA_DRIVER_ROOT) to where the NVIDIA "
                                             "driver is installed"));
  library->handle_ = loaded.handle;
  library->path_ = loaded.path;

  // Resolve every function; the missing ones stay nullptr.
  auto resolve = [&](const char* name) -> void* {
    void* symbol = dlsym(library->handle_, name);
    if (symbol == nullptr) library->missing_.emplace_back(name);
    return symbol;
  };
  // dlsym returns void*; POSIX guarantees it converts to a function pointer.
#define NVDRA_NVML_RESOLVE(name, params) \
  library->fn_.name = reinterpret_cast<abi::name##_fn>(resolve(#name));
  NVDRA_NVML_FUNCTIONS(NVDRA_NVML_RESOLVE)
#undef NVDRA_NVML_RESOLVE
  library->fn_.nvmlErrorString = reinterpret_cast<abi::nvmlErrorString_fn>(resolve("nvmlErrorString"));

  if (library->fn_.nvmlInit_v2 == nullptr || library->fn_.nvmlShutdown == nullptr) {
    return common::FailedPreconditionError(fmt::format(
        "{} lacks nvmlInit_v2/nvmlShutdown: not an NVML library of driver 450 or later",
        library->path_.string()));
  }
  nvmlReturn_t rc = library->fn_.nvmlInit_v2();
  if (rc != abi::NVML_SUCCESS) {
    return common::FailedPreconditionError(fmt::format(
        "nvmlInit_v2 ({}): {} (is the NVIDIA kernel driver loaded, and does the library "
        "match its version?)",
        library->path_.string(), library->ErrorString(rc)));
  }
  library->initialized_ = true;
  return library;
}

Library::~Library() {
  if (initialized_) fn_.nvmlShutdown();
  if (handle_ != nullptr) dlclose(handle_);
}

std::string Library::ErrorString(nvmlReturn_t code) const {
  if (fn_.nvmlErrorString != nullptr) {
    if (const char* text = fn_.nvmlErrorString(code)) return text;
  }
  return fmt::format("NVML error {}", code);
}

Status Library::Check(nvmlReturn_t code, std::string_view function) const {
  if (code == abi::NVML_SUCCESS) return common::OkStatus();
  return Status(NvmlReturnToStatusCode(code),
                fmt::format("{}: {} (NVML error {})", function, ErrorString(code), code));
}

// Calls `fn` of `lib` with the arguments, or returns the missing-function
// status; on failure returns the checked Status from the enclosing function.
#define NVDRA_NVML_CALL(lib, function, ...)                                          \
  do {                                                                               \
    if ((lib)->fn().function == nullptr) return MissingFunctionError(#function);     \
    RETURN_IF_ERROR((lib)->Check((lib)->fn().function(__VA_ARGS__), #function));     \
  } while (false)

StatusOr<std::string> Library::DriverVersion() const {
  char buffer[abi::kSystemDriverVersionBufferSize] = {};
  NVDRA_NVML_CALL(this, nvmlSystemGetDriverVersion, buffer, sizeof(buffer));
  return common::DriverBufferString(buffer, sizeof(buffer));
}

StatusOr<std::string> Library::NvmlVersion() const {
  char buffer[abi::kSystemDriverVersionBufferSize] = {};
  NVDRA_NVML_CALL(this, nvmlSystemGetNVMLVersion, buffer, sizeof(buffer));
  return common::DriverBufferString(buffer, sizeof(buffer));
}

StatusOr<int> Library::CudaDriverVersion() const {
  int version = 0;
  NVDRA_NVML_CALL(this, nvmlSystemGetCudaDriverVersion_v2, &version);
  return version;
}

StatusOr<std::uint32_t> Library::DeviceCount() const {
  unsigned count = 0;
  NVDRA_NVML_CALL(this, nvmlDeviceGetCount_v2, &count);
  return count;
}

StatusOr<Device> Library::DeviceByIndex(std::uint32_t index) const {
  abi::nvmlDevice_t handle = nullptr;
  NVDRA_NVML_CALL(this, nvmlDeviceGetHandleByIndex_v2, index, &handle);
  return Device(this, handle);
}

StatusOr<Device> Library::DeviceByUuid(const std::string& uuid) const {
  abi::nvmlDevice_t handle = nullptr;
  NVDRA_NVML_CALL(this, nvmlDeviceGetHandleByUUID, uuid.c_str(), &handle);
  return Device(this, handle);
}

StatusOr<EventSet> Library::CreateEventSet() const {
  abi::nvmlEventSet_t handle = nullptr;
  NVDRA_NVML_CALL(this, nvmlEventSetCreate, &handle);
  return EventSet(this, handle);
}

// --- Device ------------------------------------------------------------------------

namespace {
// Reads one unsigned value through `fn(handle, &value)`.
template <typename Fn>
StatusOr<std::uint32_t> ReadUint(const Library* library, abi::nvmlDevice_t handle, Fn fn,
                                 const char* name) {
  if (fn == nullptr) return MissingFunctionError(name);
  unsigned value = 0;
  RETURN_IF_ERROR(library->Check(fn(handle, &value), name));
  return value;
}
}  // namespace

#define NVDRA_DEVICE_UINT(method, function)                                   \
  StatusOr<std::uint32_t> Device::method() const {                            \
    return ReadUint(library_, handle_, library_->fn().function, #function);   \
  }
NVDRA_DEVICE_UINT(Index, nvmlDeviceGetIndex)
NVDRA_DEVICE_UINT(MinorNumber, nvmlDeviceGetMinorNumber)
NVDRA_DEVICE_UINT(NumaNodeId, nvmlDeviceGetNumaNodeId)
NVDRA_DEVICE_UINT(ModuleId, nvmlDeviceGetModuleId)
NVDRA_DEVICE_UINT(MaxMigDeviceCount, nvmlDeviceGetMaxMigDeviceCount)
NVDRA_DEVICE_UINT(GpuInstanceId, nvmlDeviceGetGpuInstanceId)
NVDRA_DEVICE_UINT(ComputeInstanceId, nvmlDeviceGetComputeInstanceId)
NVDRA_DEVICE_UINT(Architecture, nvmlDeviceGetArchitecture)
#undef NVDRA_DEVICE_UINT

StatusOr<std::string> Device::Uuid() const {
  char buffer[abi::kDeviceUuidBufferSize] = {};
  NVDRA_NVML_CALL(library_, nvmlDeviceGetUUID, handle_, buffer, sizeof(buffer));
  return common::DriverBufferString(buffer, sizeof(buffer));
}

StatusOr<std::string> Device::Name() const {
  char buffer[abi::kDeviceNameBufferSize] = {};
  NVDRA_NVML_CALL(library_, nvmlDeviceGetName, handle_, buffer, sizeof(buffer));
  return common::DriverBufferString(buffer, sizeof(buffer));
}

StatusOr<int> Device::Brand() const {
  abi::nvmlBrandType_t brand = 0;
  NVDRA_NVML_CALL(library_, nvmlDeviceGetBrand, handle_, &brand);
  return brand;
}

StatusOr<ComputeCapability> Device::CudaComputeCapability() const {
  ComputeCapability cc;
  NVDRA_NVML_CALL(library_, nvmlDeviceGetCudaComputeCapability, handle_, &cc.major, &cc.minor);
  return cc;
}

StatusOr<MemoryInfo> Device::Memory() const {
  abi::nvmlMemory_t memory{};
  NVDRA_NVML_CALL(library_, nvmlDeviceGetMemoryInfo, handle_, &memory);
  return MemoryInfo{memory.total, memory.free, memory.used};
}

StatusOr<PciInfo> Device::Pci() const {
  abi::nvmlPciInfo_t pci{};
  NVDRA_NVML_CALL(library_, nvmlDeviceGetPciInfo_v3, handle_, &pci);
  PciInfo info;
  info.bus_id = common::NormalizePciBusId(common::DriverBufferString(pci.busId, sizeof(pci.busId)));
  info.domain = pci.domain;
  info.bus = pci.bus;
  info.device = pci.device;
  info.device_id = static_cast<std::uint16_t>(pci.pciDeviceId >> 16U);
  info.vendor_id = static_cast<std::uint16_t>(pci.pciDeviceId & 0xffffU);
  info.subsystem_id = pci.pciSubSystemId;
  return info;
}

StatusOr<std::uint32_t> Device::AddressingMode() const {
  abi::nvmlDeviceAddressingMode_t mode{};
  mode.version = abi::nvmlDeviceAddressingMode_v1;
  NVDRA_NVML_CALL(library_, nvmlDeviceGetAddressingMode, handle_, &mode);
  return mode.value;
}

StatusOr<MigMode> Device::GetMigMode() const {
  unsigned current = 0;
  unsigned pending = 0;
  NVDRA_NVML_CALL(library_, nvmlDeviceGetMigMode, handle_, &current, &pending);
  return MigMode{current == abi::NVML_DEVICE_MIG_ENABLE, pending == abi::NVML_DEVICE_MIG_ENABLE};
}

Status Device::SetMigMode(bool enabled) const {
  abi::nvmlReturn_t activation = abi::NVML_SUCCESS;
  NVDRA_NVML_CALL(library_, nvmlDeviceSetMigMode, handle_,
                  enabled ? abi::NVML_DEVICE_MIG_ENABLE : abi::NVML_DEVICE_MIG_DISABLE, &activation);
  if (activation != abi::NVML_SUCCESS) {
    return common::FailedPreconditionError(
        std::string("MIG mode ") + (enabled ? "enable" : "disable") +
        " is pending until the GPU is reset (NVML activation status " + std::to_string(activation) + ")");
  }
  return common::OkStatus();
}

StatusOr<int> Device::ComputeMode() const {
  abi::nvmlComputeMode_t mode = abi::NVML_COMPUTEMODE_DEFAULT;
  NVDRA_NVML_CALL(library_, nvmlDeviceGetComputeMode, handle_, &mode);
  return mode;
}

StatusOr<GpuInstanceProfile> Device::GetGpuInstanceProfile(std::uint32_t profile_index) const {
  abi::nvmlGpuInstanceProfileInfo_v2_t info{};
  info.version = abi::nvmlGpuInstanceProfileInfo_v2;
  NVDRA_NVML_CALL(library_, nvmlDeviceGetGpuInstanceProfileInfoV, handle_, profile_index, &info);
  GpuInstanceProfile profile;
  profile.profile_index = profile_index;
  profile.id = info.id;
  profile.name = common::DriverBufferString(info.name, sizeof(info.name));
  profile.p2p_supported = info.isP2pSupported != 0;
  profile.slice_count = info.sliceCount;
  profile.instance_count = info.instanceCount;
  profile.multiprocessor_count = info.multiprocessorCount;
  profile.copy_engine_count = info.copyEngineCount;
  profile.decoder_count = info.decoderCount;
  profile.encoder_count = info.encoderCount;
  profile.jpeg_count = info.jpegCount;
  profile.ofa_count = info.ofaCount;
  profile.memory_size_mb = info.memorySizeMB;
  return profile;
}

StatusOr<std::vector<GpuInstancePlacement>> Device::GpuInstancePossiblePlacements(
    std::uint32_t profile_id) const {
  // First ask for the count (placements == NULL), then fill.
  unsigned count = 0;
  NVDRA_NVML_CALL(library_, nvmlDeviceGetGpuInstancePossiblePlacements_v2, handle_, profile_id,
                  nullptr, &count);
  std::vector<abi::nvmlGpuInstancePlacement_t> raw(count);
  if (count > 0) {
    NVDRA_NVML_CALL(library_, nvmlDeviceGetGpuInstancePossiblePlacements_v2, handle_, profile_id,
                    raw.data(), &count);
  }
  std::vector<GpuInstancePlacement> placements;
  placements.reserve(count);
  for (unsigned i = 0; i < count && i < raw.size(); ++i) {
    placements.push_back({raw[i].start, raw[i].size});
  }
  return placements;
}

StatusOr<std::uint32_t> Device::GpuInstanceRemainingCapacity(std::uint32_t profile_id) const {
  unsigned count = 0;
  NVDRA_NVML_CALL(library_, nvmlDeviceGetGpuInstanceRemainingCapacity, handle_, profile_id, &count);
  return count;
}

StatusOr<std::vector<GpuInstance>> Device::GpuInstances(std::uint32_t profile_id) const {
  // No GPU has more GPU instances than memory slices; 16 leaves room.
  std::vector<abi::nvmlGpuInstance_t> raw(16, nullptr);
  unsigned count = static_cast<unsigned>(raw.size());
  NVDRA_NVML_CALL(library_, nvmlDeviceGetGpuInstances, handle_, profile_id, raw.data(), &count);
  std::vector<GpuInstance> instances;
  for (unsigned i = 0; i < count && i < raw.size(); ++i) instances.emplace_back(library_, raw[i]);
  return instances;
}

StatusOr<GpuInstance> Device::GpuInstanceById(std::uint32_t id) const {
  abi::nvmlGpuInstance_t handle = nullptr;
  NVDRA_NVML_CALL(library_, nvmlDeviceGetGpuInstanceById, handle_, id, &handle);
  return GpuInstance(library_, handle);
}

StatusOr<GpuInstance> Device::CreateGpuInstance(std::uint32_t profile_id,
                                                GpuInstancePlacement placement) const {
  abi::nvmlGpuInstancePlacement_t raw{placement.start, placement.size};
  abi::nvmlGpuInstance_t handle = nullptr;
  NVDRA_NVML_CALL(library_, nvmlDeviceCreateGpuInstanceWithPlacement, handle_, profile_id, &raw,
                  &handle);
  return GpuInstance(library_, handle);
}

StatusOr<Device> Device::MigDeviceByIndex(std::uint32_t index) const {
  abi::nvmlDevice_t handle = nullptr;
  NVDRA_NVML_CALL(library_, nvmlDeviceGetMigDeviceHandleByIndex, handle_, index, &handle);
  return Device(library_, handle);
}

StatusOr<bool> Device::IsMigDevice() const {
  ASSIGN_OR_RETURN(std::uint32_t is_mig,
                   ReadUint(library_, handle_, library_->fn().nvmlDeviceIsMigDeviceHandle,
                            "nvmlDeviceIsMigDeviceHandle"));
  return is_mig != 0;
}

StatusOr<Device> Device::ParentOfMigDevice() const {
  abi::nvmlDevice_t parent = nullptr;
  NVDRA_NVML_CALL(library_, nvmlDeviceGetDeviceHandleFromMigDeviceHandle, handle_, &parent);
  return Device(library_, parent);
}

StatusOr<FabricInfo> Device::GpuFabricInfo(FabricCall call) const {
  const auto& fn = library_->fn();
  FabricInfo info;
  // FUNCTION_NOT_FOUND from an exported symbol means the same as no symbol
  // (a stub or a shim library): the other call is tried.
  const bool has_v1 = fn.nvmlDeviceGetGpuFabricInfo != nullptr;
  const bool has_versioned = fn.nvmlDeviceGetGpuFabricInfoV != nullptr;
  const auto versioned = [&]() -> StatusOr<FabricInfo> {
    abi::nvmlGpuFabricInfoV_t raw{};
    raw.version = abi::nvmlGpuFabricInfo_v3;
    nvmlReturn_t rc = fn.nvmlDeviceGetGpuFabricInfoV(handle_, &raw);
    bool v3 = true;
    if (rc == abi::NVML_ERROR_ARGUMENT_VERSION_MISMATCH) {
      // A library from before v3 (health summary): ask for v2.
      raw = {};
      raw.version = abi::nvmlGpuFabricInfo_v2;
      rc = fn.nvmlDeviceGetGpuFabricInfoV(handle_, &raw);
      v3 = false;
    }
    if (rc == abi::NVML_ERROR_FUNCTION_NOT_FOUND) return MissingFunctionError("nvmlDeviceGetGpuFabricInfoV");
    RETURN_IF_ERROR(library_->Check(rc, "nvmlDeviceGetGpuFabricInfoV"));
    std::memcpy(info.cluster_uuid.data(), raw.clusterUuid, info.cluster_uuid.size());
    info.status = raw.status;
    info.clique_id = raw.cliqueId;
    info.state = raw.state;
    info.health_mask = raw.healthMask;
    if (v3) info.health_summary = raw.healthSummary;
    info.source = v3 ? "nvmlDeviceGetGpuFabricInfoV(v3)" : "nvmlDeviceGetGpuFabricInfoV(v2)";
    return info;
  };
  if (call == FabricCall::kPreferVersioned && has_versioned) {
    StatusOr<FabricInfo> answer = versioned();
    if (answer.ok() || !has_v1 || !IsNotSupported(answer.status())) return answer;
  }
  if (has_v1) {
    abi::nvmlGpuFabricInfo_t raw{};
    nvmlReturn_t rc = fn.nvmlDeviceGetGpuFabricInfo(handle_, &raw);
    if (rc != abi::NVML_ERROR_FUNCTION_NOT_FOUND) {
      RETURN_IF_ERROR(library_->Check(rc, "nvmlDeviceGetGpuFabricInfo"));
      std::memcpy(info.cluster_uuid.data(), raw.clusterUuid, info.cluster_uuid.size());
      info.status = raw.status;
      info.clique_id = raw.cliqueId;
      info.state = raw.state;
      info.source = "nvmlDeviceGetGpuFabricInfo";
      return info;
    }
  }
  if (!has_versioned) {
    return MissingFunctionError("nvmlDeviceGetGpuFabricInfo and nvmlDeviceGetGpuFabricInfoV");
  }
  return versioned();
}

StatusOr<std::uint64_t> Device::SupportedEventTypes() const {
  unsigned long long types = 0;
  NVDRA_NVML_CALL(library_, nvmlDeviceGetSupportedEventTypes, handle_, &types);
  return static_cast<std::uint64_t>(types);
}

// --- GpuInstance / ComputeInstance -------------------------------------------------

StatusOr<abi::nvmlGpuInstanceInfo_t> GpuInstance::Info() const {
  abi::nvmlGpuInstanceInfo_t info{};
  NVDRA_NVML_CALL(library_, nvmlGpuInstanceGetInfo, handle_, &info);
  return info;
}

StatusOr<ComputeInstanceProfile> GpuInstance::GetComputeInstanceProfile(
    std::uint32_t profile_index) const {
  abi::nvmlComputeInstanceProfileInfo_v2_t info{};
  info.version = abi::nvmlComputeInstanceProfileInfo_v2;
  NVDRA_NVML_CALL(library_, nvmlGpuInstanceGetComputeInstanceProfileInfoV, handle_, profile_index,
                  abi::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info);
  ComputeInstanceProfile profile;
  profile.profile_index = profile_index;
  profile.id = info.id;
  profile.name = common::DriverBufferString(info.name, sizeof(info.name));
  profile.slice_count = info.sliceCount;
  profile.instance_count = info.instanceCount;
  profile.multiprocessor_count = info.multiprocessorCount;
  return profile;
}

StatusOr<ComputeInstance> GpuInstance::CreateComputeInstance(std::uint32_t profile_id) const {
  abi::nvmlComputeInstance_t handle = nullptr;
  NVDRA_NVML_CALL(library_, nvmlGpuInstanceCreateComputeInstance, handle_, profile_id, &handle);
  return ComputeInstance(library_, handle);
}

StatusOr<std::vector<ComputeInstance>> GpuInstance::ComputeInstances(
    std::uint32_t profile_id) const {
  std::vector<abi::nvmlComputeInstance_t> raw(16, nullptr);
  unsigned count = static_cast<unsigned>(raw.size());
  NVDRA_NVML_CALL(library_, nvmlGpuInstanceGetComputeInstances, handle_, profile_id, raw.data(),
                  &count);
  std::vector<ComputeInstance> instances;
  for (unsigned i = 0; i < count && i < raw.size(); ++i) instances.emplace_back(library_, raw[i]);
  return instances;
}

Status GpuInstance::Destroy() const {
  NVDRA_NVML_CALL(library_, nvmlGpuInstanceDestroy, handle_);
  return common::OkStatus();
}

StatusOr<abi::nvmlComputeInstanceInfo_t> ComputeInstance::Info() const {
  abi::nvmlComputeInstanceInfo_t info{};
  NVDRA_NVML_CALL(library_, nvmlComputeInstanceGetInfo_v2, handle_, &info);
  return info;
}

Status ComputeInstance::Destroy() const {
  NVDRA_NVML_CALL(library_, nvmlComputeInstanceDestroy, handle_);
  return common::OkStatus();
}

// --- EventSet ----------------------------------------------------------------------

EventSet::EventSet(EventSet&& other) noexcept
    : library_(other.library_), handle_(std::exchange(other.handle_, nullptr)) {}

EventSet& EventSet::operator=(EventSet&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr && library_->fn().nvmlEventSetFree != nullptr) {
      library_->fn().nvmlEventSetFree(handle_);
    }
    library_ = other.library_;
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

EventSet::~EventSet() {
  if (handle_ != nullptr && library_->fn().nvmlEventSetFree != nullptr) {
    library_->fn().nvmlEventSetFree(handle_);
  }
}

Status EventSet::Register(const Device& device, std::uint64_t event_types) {
  NVDRA_NVML_CALL(library_, nvmlDeviceRegisterEvents, device.handle(), event_types, handle_);
  return common::OkStatus();
}

StatusOr<Event> EventSet::Wait(std::uint32_t timeout_ms) {
  const auto& fn = library_->fn();
  if (fn.nvmlEventSetWait_v2 == nullptr) return MissingFunctionError("nvmlEventSetWait_v2");
  abi::nvmlEventData_t data{};
  nvmlReturn_t rc = fn.nvmlEventSetWait_v2(handle_, &data, timeout_ms);
  if (rc == abi::NVML_ERROR_TIMEOUT) {
    return common::DeadlineExceededError(
        fmt::format("nvmlEventSetWait_v2: no event within {} ms", timeout_ms));
  }
  RETURN_IF_ERROR(library_->Check(rc, "nvmlEventSetWait_v2"));
  Event event;
  event.type = data.eventType;
  event.data = data.eventData;
  if (data.device != nullptr) {
    auto uuid = Device(library_, data.device).Uuid();
    if (uuid.ok()) event.device_uuid = *uuid;
  }
  if (data.gpuInstanceId != 0xffffffffU) event.gpu_instance_id = data.gpuInstanceId;
  if (data.computeInstanceId != 0xffffffffU) event.compute_instance_id = data.computeInstanceId;
  return event;
}

}  // namespace nvdra::nvml
