#pragma once

// Our own declarations of the part of NVML's C ABI (API version 13, the
// libnvidia-ml.so.1 of drivers 535 and later) that the driver uses. The build
// needs no NVIDIA package: src/nvml/library.cc resolves these functions with
// dlsym, and test/mocknvml implements them.
//
// Defines: the handle, enum and struct types under their NVML names in
// nvdra::nvml::abi, the constants the driver needs, and NVDRA_NVML_FUNCTIONS,
// an X-macro listing every function as X(name, parameter list). For each
// function it also defines `<name>_fn`, the pointer type.
//
// Layouts are those of the C header on x86-64 and aarch64 (LP64). The
// static_asserts below pin sizes and offsets that the fabric-info facts in
// ../shared/reference/dra-wire-facts.md section 7.5 give; a wrong layout is a
// silent memory corruption at run time, so it must fail to compile instead.
//
// Thread-safety: declarations only.

#include <cstddef>
#include <cstdint>

namespace nvdra::nvml::abi {

// nvmlReturn_t is a C enum: 4 bytes.
using nvmlReturn_t = int;
inline constexpr nvmlReturn_t NVML_SUCCESS = 0;
inline constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
inline constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
inline constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
inline constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
inline constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
inline constexpr nvmlReturn_t NVML_ERROR_LIBRARY_NOT_FOUND = 12;
inline constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;
inline constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
inline constexpr nvmlReturn_t NVML_ERROR_RESET_REQUIRED = 16;
inline constexpr nvmlReturn_t NVML_ERROR_IN_USE = 19;
inline constexpr nvmlReturn_t NVML_ERROR_MEMORY = 20;
inline constexpr nvmlReturn_t NVML_ERROR_NO_DATA = 21;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_RESOURCES = 23;
inline constexpr nvmlReturn_t NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_READY = 27;
inline constexpr nvmlReturn_t NVML_ERROR_GPU_NOT_FOUND = 28;
inline constexpr nvmlReturn_t NVML_ERROR_INVALID_STATE = 29;
inline constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

// Opaque handles: pointers to incomplete structs, as in the C header.
struct nvmlDevice_st;
struct nvmlGpuInstance_st;
struct nvmlComputeInstance_st;
struct nvmlEventSet_st;
using nvmlDevice_t = nvmlDevice_st*;
using nvmlGpuInstance_t = nvmlGpuInstance_st*;
using nvmlComputeInstance_t = nvmlComputeInstance_st*;
using nvmlEventSet_t = nvmlEventSet_st*;

// Buffer sizes the C header names.
inline constexpr unsigned kSystemDriverVersionBufferSize = 80;
inline constexpr unsigned kDeviceUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
inline constexpr unsigned kDeviceNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
inline constexpr unsigned kPciBusIdBufferSize = 32;
inline constexpr unsigned kPciBusIdLegacyBufferSize = 16;

// Versioned structs carry sizeof(struct) | (version << 24) in their first field.
constexpr unsigned StructVersion(std::size_t size, unsigned version) {
  return static_cast<unsigned>(size) | (version << 24U);
}

// nvmlBrandType_t (C enum).
using nvmlBrandType_t = int;
// nvmlComputeMode_t (C enum).
using nvmlComputeMode_t = int;
inline constexpr int NVML_COMPUTEMODE_DEFAULT = 0;
inline constexpr int NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1;  // deprecated by NVIDIA
inline constexpr int NVML_COMPUTEMODE_PROHIBITED = 2;
inline constexpr int NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3;
// nvmlDeviceArchitecture_t.
using nvmlDeviceArchitecture_t = unsigned int;
inline constexpr unsigned NVML_DEVICE_ARCH_KEPLER = 2;
inline constexpr unsigned NVML_DEVICE_ARCH_MAXWELL = 3;
inline constexpr unsigned NVML_DEVICE_ARCH_PASCAL = 4;
inline constexpr unsigned NVML_DEVICE_ARCH_VOLTA = 5;
inline constexpr unsigned NVML_DEVICE_ARCH_TURING = 6;
inline constexpr unsigned NVML_DEVICE_ARCH_AMPERE = 7;
inline constexpr unsigned NVML_DEVICE_ARCH_ADA = 8;
inline constexpr unsigned NVML_DEVICE_ARCH_HOPPER = 9;
inline constexpr unsigned NVML_DEVICE_ARCH_BLACKWELL = 10;
inline constexpr unsigned NVML_DEVICE_ARCH_RUBIN = 13;
inline constexpr unsigned NVML_DEVICE_ARCH_UNKNOWN = 0xffffffffU;

struct nvmlPciInfo_t {
  char busIdLegacy[kPciBusIdLegacyBufferSize];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;  // device id in the high 16 bits, vendor id in the low
  unsigned int pciSubSystemId;
  char busId[kPciBusIdBufferSize];
};
static_assert(sizeof(nvmlPciInfo_t) == 68);

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlDeviceAddressingMode_t (v1).
inline constexpr unsigned NVML_DEVICE_ADDRESSING_MODE_NONE = 0;
inline constexpr unsigned NVML_DEVICE_ADDRESSING_MODE_HMM = 1;
inline constexpr unsigned NVML_DEVICE_ADDRESSING_MODE_ATS = 2;
struct nvmlDeviceAddressingMode_t {
  unsigned int version;
  unsigned int value;
};
inline constexpr unsigned nvmlDeviceAddressingMode_v1 =
    StructVersion(sizeof(nvmlDeviceAddressingMode_t), 1);

// MIG.
inline constexpr unsigned NVML_DEVICE_MIG_DISABLE = 0;
inline constexpr unsigned NVML_DEVICE_MIG_ENABLE = 1;
// GPU instance profile indexes (the `profile` argument of ...ProfileInfo); the
// profile *id* NVML returns is a different number.
inline constexpr unsigned NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0x0;
inline constexpr unsigned NVML_GPU_INSTANCE_PROFILE_2_SLICE = 0x1;
inline constexpr unsigned NVML_GPU_INSTANCE_PROFILE_3_SLICE = 0x2;
inline constexpr unsigned NVML_GPU_INSTANCE_PROFILE_4_SLICE = 0x3;
inline constexpr unsigned NVML_GPU_INSTANCE_PROFILE_7_SLICE = 0x4;
inline constexpr unsigned NVML_GPU_INSTANCE_PROFILE_8_SLICE = 0x5;
inline constexpr unsigned NVML_GPU_INSTANCE_PROFILE_6_SLICE = 0x6;
inline constexpr unsigned NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7;
inline constexpr unsigned NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 = 0x8;
inline constexpr unsigned NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 0x9;
inline constexpr unsigned NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12;
inline constexpr unsigned NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0x0;
inline constexpr unsigned NVML_COMPUTE_INSTANCE_PROFILE_COUNT = 0x9;
inline constexpr unsigned NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0x0;

struct nvmlGpuInstanceProfileInfo_v2_t {
  unsigned int version;
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
  char name[kDeviceNameBufferSize];
};
inline constexpr unsigned nvmlGpuInstanceProfileInfo_v2 =
    StructVersion(sizeof(nvmlGpuInstanceProfileInfo_v2_t), 2);
static_assert(offsetof(nvmlGpuInstanceProfileInfo_v2_t, memorySizeMB) == 48);

struct nvmlGpuInstancePlacement_t {
  unsigned int start;
  unsigned int size;
};

struct nvmlGpuInstanceInfo_t {
  nvmlDevice_t device;
  unsigned int id;
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
};

struct nvmlComputeInstanceProfileInfo_v2_t {
  unsigned int version;
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  char name[kDeviceNameBufferSize];
};
inline constexpr unsigned nvmlComputeInstanceProfileInfo_v2 =
    StructVersion(sizeof(nvmlComputeInstanceProfileInfo_v2_t), 2);

struct nvmlComputeInstancePlacement_t {
  unsigned int start;
  unsigned int size;
};

struct nvmlComputeInstanceInfo_t {
  nvmlDevice_t device;
  nvmlGpuInstance_t gpuInstance;
  unsigned int id;
  unsigned int profileId;
  nvmlComputeInstancePlacement_t placement;
};

// Fabric (Multi-Node NVLink).
inline constexpr unsigned char NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0;
inline constexpr unsigned char NVML_GPU_FABRIC_STATE_NOT_STARTED = 1;
inline constexpr unsigned char NVML_GPU_FABRIC_STATE_IN_PROGRESS = 2;
inline constexpr unsigned char NVML_GPU_FABRIC_STATE_COMPLETED = 3;
// nvmlGpuFabricInfo_v3 healthSummary.
inline constexpr unsigned char NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED = 0;
inline constexpr unsigned char NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY = 1;
inline constexpr unsigned char NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY = 2;
inline constexpr unsigned char NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY = 3;
inline constexpr unsigned kGpuFabricUuidLength = 16;

struct nvmlGpuFabricInfo_t {  // v1: no version field
  unsigned char clusterUuid[kGpuFabricUuidLength];
  nvmlReturn_t status;
  unsigned int cliqueId;
  unsigned char state;
};
static_assert(offsetof(nvmlGpuFabricInfo_t, status) == 16);
static_assert(offsetof(nvmlGpuFabricInfo_t, cliqueId) == 20);
static_assert(offsetof(nvmlGpuFabricInfo_t, state) == 24);
static_assert(sizeof(nvmlGpuFabricInfo_t) == 28);

// v3 (nvmlGpuFabricInfoV_t); v2 is its prefix without healthSummary.
struct nvmlGpuFabricInfoV_t {
  unsigned int version;
  unsigned char clusterUuid[kGpuFabricUuidLength];
  nvmlReturn_t status;
  unsigned int cliqueId;
  unsigned char state;
  unsigned int healthMask;
  unsigned char healthSummary;
};
static_assert(offsetof(nvmlGpuFabricInfoV_t, status) == 20);
static_assert(offsetof(nvmlGpuFabricInfoV_t, cliqueId) == 24);
static_assert(offsetof(nvmlGpuFabricInfoV_t, state) == 28);
static_assert(offsetof(nvmlGpuFabricInfoV_t, healthMask) == 32);
static_assert(offsetof(nvmlGpuFabricInfoV_t, healthSummary) == 36);
static_assert(sizeof(nvmlGpuFabricInfoV_t) == 40);
inline constexpr unsigned nvmlGpuFabricInfo_v2 = StructVersion(36, 2);  // 0x02000024
inline constexpr unsigned nvmlGpuFabricInfo_v3 = StructVersion(40, 3);  // 0x03000028
static_assert(nvmlGpuFabricInfo_v2 == 0x02000024U && nvmlGpuFabricInfo_v3 == 0x03000028U);

// Events.
inline constexpr unsigned long long nvmlEventTypeSingleBitEccError = 0x1ULL;
inline constexpr unsigned long long nvmlEventTypeDoubleBitEccError = 0x2ULL;
inline constexpr unsigned long long nvmlEventTypePState = 0x4ULL;
inline constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8ULL;
inline constexpr unsigned long long nvmlEventTypeClock = 0x10ULL;
struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // the XID for nvmlEventTypeXidCriticalError
  unsigned int gpuInstanceId;    // 0xFFFFFFFF when not about a MIG device
  unsigned int computeInstanceId;
};

inline constexpr unsigned NVML_INIT_FLAG_NO_GPUS = 1;

// Every function the driver uses: X(name, (parameters)). All return
// nvmlReturn_t except nvmlErrorString, which is declared apart.
#define NVDRA_NVML_FUNCTIONS(X)                                                              \
  X(nvmlInit_v2, ())                                                                         \
  X(nvmlInitWithFlags, (unsigned int flags))                                                 \
  X(nvmlShutdown, ())                                                                        \
  X(nvmlSystemGetDriverVersion, (char* version, unsigned int length))                        \
  X(nvmlSystemGetNVMLVersion, (char* version, unsigned int length))                          \
  X(nvmlSystemGetCudaDriverVersion_v2, (int* cudaDriverVersion))                             \
  X(nvmlDeviceGetCount_v2, (unsigned int* deviceCount))                                      \
  X(nvmlDeviceGetHandleByIndex_v2, (unsigned int index, nvmlDevice_t* device))               \
  X(nvmlDeviceGetHandleByUUID, (const char* uuid, nvmlDevice_t* device))                     \
  X(nvmlDeviceGetIndex, (nvmlDevice_t device, unsigned int* index))                          \
  X(nvmlDeviceGetUUID, (nvmlDevice_t device, char* uuid, unsigned int length))               \
  X(nvmlDeviceGetMinorNumber, (nvmlDevice_t device, unsigned int* minorNumber))              \
  X(nvmlDeviceGetName, (nvmlDevice_t device, char* name, unsigned int length))               \
  X(nvmlDeviceGetBrand, (nvmlDevice_t device, nvmlBrandType_t* type))                        \
  X(nvmlDeviceGetArchitecture, (nvmlDevice_t device, nvmlDeviceArchitecture_t* arch))        \
  X(nvmlDeviceGetCudaComputeCapability, (nvmlDevice_t device, int* major, int* minor))       \
  X(nvmlDeviceGetMemoryInfo, (nvmlDevice_t device, nvmlMemory_t* memory))                    \
  X(nvmlDeviceGetPciInfo_v3, (nvmlDevice_t device, nvmlPciInfo_t* pci))                      \
  X(nvmlDeviceGetNumaNodeId, (nvmlDevice_t device, unsigned int* node))                      \
  X(nvmlDeviceGetAddressingMode, (nvmlDevice_t device, nvmlDeviceAddressingMode_t* mode))    \
  X(nvmlDeviceGetModuleId, (nvmlDevice_t device, unsigned int* moduleId))                    \
  X(nvmlDeviceGetComputeMode, (nvmlDevice_t device, nvmlComputeMode_t* mode))               \
  X(nvmlDeviceSetComputeMode, (nvmlDevice_t device, nvmlComputeMode_t mode))                 \
  X(nvmlDeviceGetMigMode, (nvmlDevice_t device, unsigned int* currentMode,                   \
                           unsigned int* pendingMode))                                       \
  X(nvmlDeviceSetMigMode, (nvmlDevice_t device, unsigned int mode, nvmlReturn_t* activationStatus)) \
  X(nvmlDeviceGetMaxMigDeviceCount, (nvmlDevice_t device, unsigned int* count))              \
  X(nvmlDeviceGetGpuInstanceProfileInfoV, (nvmlDevice_t device, unsigned int profile,        \
                                           nvmlGpuInstanceProfileInfo_v2_t* info))           \
  X(nvmlDeviceGetGpuInstancePossiblePlacements_v2,                                           \
    (nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t* placements,    \
     unsigned int* count))                                                                   \
  X(nvmlDeviceGetGpuInstanceRemainingCapacity, (nvmlDevice_t device, unsigned int profileId, \
                                                unsigned int* count))                        \
  X(nvmlDeviceCreateGpuInstanceWithPlacement,                                                \
    (nvmlDevice_t device, unsigned int profileId,                                            \
     const nvmlGpuInstancePlacement_t* placement, nvmlGpuInstance_t* gpuInstance))           \
  X(nvmlGpuInstanceDestroy, (nvmlGpuInstance_t gpuInstance))                                 \
  X(nvmlDeviceGetGpuInstances, (nvmlDevice_t device, unsigned int profileId,                 \
                                nvmlGpuInstance_t* gpuInstances, unsigned int* count))       \
  X(nvmlDeviceGetGpuInstanceById, (nvmlDevice_t device, unsigned int id,                     \
                                   nvmlGpuInstance_t* gpuInstance))                          \
  X(nvmlGpuInstanceGetInfo, (nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t* info))    \
  X(nvmlGpuInstanceGetComputeInstanceProfileInfoV,                                           \
    (nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,           \
     nvmlComputeInstanceProfileInfo_v2_t* info))                                             \
  X(nvmlGpuInstanceCreateComputeInstance, (nvmlGpuInstance_t gpuInstance,                    \
                                           unsigned int profileId,                           \
                                           nvmlComputeInstance_t* computeInstance))          \
  X(nvmlComputeInstanceDestroy, (nvmlComputeInstance_t computeInstance))                     \
  X(nvmlGpuInstanceGetComputeInstances,                                                      \
    (nvmlGpuInstance_t gpuInstance, unsigned int profileId,                                  \
     nvmlComputeInstance_t* computeInstances, unsigned int* count))                          \
  X(nvmlComputeInstanceGetInfo_v2, (nvmlComputeInstance_t computeInstance,                   \
                                    nvmlComputeInstanceInfo_t* info))                        \
  X(nvmlDeviceIsMigDeviceHandle, (nvmlDevice_t device, unsigned int* isMigDevice))           \
  X(nvmlDeviceGetGpuInstanceId, (nvmlDevice_t device, unsigned int* id))                     \
  X(nvmlDeviceGetComputeInstanceId, (nvmlDevice_t device, unsigned int* id))                 \
  X(nvmlDeviceGetMigDeviceHandleByIndex, (nvmlDevice_t device, unsigned int index,           \
                                          nvmlDevice_t* migDevice))                          \
  X(nvmlDeviceGetDeviceHandleFromMigDeviceHandle, (nvmlDevice_t migDevice,                   \
                                                   nvmlDevice_t* device))                    \
  X(nvmlDeviceGetGpuFabricInfo, (nvmlDevice_t device, nvmlGpuFabricInfo_t* gpuFabricInfo))   \
  X(nvmlDeviceGetGpuFabricInfoV, (nvmlDevice_t device, nvmlGpuFabricInfoV_t* gpuFabricInfo)) \
  X(nvmlEventSetCreate, (nvmlEventSet_t* set))                                               \
  X(nvmlDeviceRegisterEvents, (nvmlDevice_t device, unsigned long long eventTypes,           \
                               nvmlEventSet_t set))                                          \
  X(nvmlDeviceGetSupportedEventTypes, (nvmlDevice_t device, unsigned long long* eventTypes)) \
  X(nvmlEventSetWait_v2, (nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms)) \
  X(nvmlEventSetFree, (nvmlEventSet_t set))

#define NVDRA_NVML_DECLARE_FN_TYPE(name, params) using name##_fn = nvmlReturn_t(*) params;
NVDRA_NVML_FUNCTIONS(NVDRA_NVML_DECLARE_FN_TYPE)
#undef NVDRA_NVML_DECLARE_FN_TYPE
using nvmlErrorString_fn = const char* (*)(nvmlReturn_t result);

}  // namespace nvdra::nvml::abi
