// Exported NVML functions outside nvml_abi.h that the mock answers by hand:
// the plain (v1) names the real library still exports beside the versioned
// ones nvml.h maps them to, and the queries a GPU answers with SUCCESS and
// an empty list rather than NOT_SUPPORTED (running processes, excluded
// devices, S-class units). Everything else nvml.h declares is in the
// generated api_stubs.cc (gen-stubs.py).
//
// A plain name with the same ABI as its versioned function forwards to it;
// one whose structure grew (nvmlDeviceGetPciInfo, nvmlEventSetWait,
// nvmlComputeInstanceGetInfo, the v1 MIG profile infos) asks the versioned
// function into a local copy and writes only the v1 structure's fields, so
// a caller built against the old header gets no write past its structure.
// Each first checks init and the profile's missingFunctions under its own
// name, then releases the lock and forwards (the versioned function checks
// again under its name).

#include <cstring>

#include "context.h"
#include "exports.h"

namespace nvdra::mocknvml::c_api {

namespace {

// The v1 structures (nvml.h declares them; nvml_abi.h has only the newer).
struct GpuInstanceProfileInfoV1 {
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
};
static_assert(sizeof(GpuInstanceProfileInfoV1) == 48);

struct ComputeInstanceProfileInfoV1 {
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
};
static_assert(sizeof(ComputeInstanceProfileInfoV1) == 36);

// nvmlPciInfo_t of nvmlDeviceGetPciInfo (v1) and _v2: busId[16], domain,
// bus, device, pciDeviceId, pciSubSystemId, then four reserved words (52
// bytes). The first 36 bytes are laid out as nvmlPciInfo_t's (busIdLegacy
// then the same five fields).
constexpr std::size_t kPciInfoV1Prefix = offsetof(nvmlPciInfo_t, busId);
static_assert(kPciInfoV1Prefix == 36);

// nvmlEventData_t before gpuInstanceId/computeInstanceId (v1).
constexpr std::size_t kEventDataV1Size = offsetof(nvmlEventData_t, gpuInstanceId);
static_assert(kEventDataV1Size == 24);

// nvmlComputeInstanceInfo_t before placement (v1).
constexpr std::size_t kComputeInstanceInfoV1Size = offsetof(nvmlComputeInstanceInfo_t, placement);
static_assert(kComputeInstanceInfoV1Size == 24);

}  // namespace

// Init and missingFunctions under the caller's own name, then the lock is
// released (the forwarded-to function takes it again).
#define NVDRA_MOCKNVML_CHECK_ONLY()                                      \
  do {                                                                   \
    const Context::Call check_ = Context::Get().Begin(__func__);         \
    if (check_.rc != NVML_SUCCESS) return check_.rc;                     \
  } while (false)

extern "C" {

NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlInit();
NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* deviceCount);
NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index,
                                                              nvmlDevice_t* device);
NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* cudaDriverVersion);
NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, void* pci);
NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, void* pci);
NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(
    nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t* placements,
    unsigned int* count);
NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, void* data,
                                                    unsigned int timeoutms);
NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t ci,
                                                              void* info);
NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(
    nvmlDevice_t device, unsigned int profile, GpuInstanceProfileInfoV1* info);
NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    ComputeInstanceProfileInfoV1* info);

nvmlReturn_t nvmlInit() { return nvmlInit_v2(); }

nvmlReturn_t nvmlDeviceGetCount(unsigned int* deviceCount) {
  NVDRA_MOCKNVML_CHECK_ONLY();
  return nvmlDeviceGetCount_v2(deviceCount);
}

// v1 skipped GPUs the caller may not use; the mock has none such.
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  NVDRA_MOCKNVML_CHECK_ONLY();
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* cudaDriverVersion) {
  NVDRA_MOCKNVML_CHECK_ONLY();
  return nvmlSystemGetCudaDriverVersion_v2(cudaDriverVersion);
}

namespace {
nvmlReturn_t PciInfoV1(nvmlDevice_t device, void* pci) {
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlPciInfo_t full{};
  const nvmlReturn_t rc = nvmlDeviceGetPciInfo_v3(device, &full);
  if (rc == NVML_SUCCESS) std::memcpy(pci, &full, kPciInfoV1Prefix);
  return rc;
}
}  // namespace

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, void* pci) {
  NVDRA_MOCKNVML_CHECK_ONLY();
  return PciInfoV1(device, pci);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, void* pci) {
  NVDRA_MOCKNVML_CHECK_ONLY();
  return PciInfoV1(device, pci);
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device,
                                                        unsigned int profileId,
                                                        nvmlGpuInstancePlacement_t* placements,
                                                        unsigned int* count) {
  NVDRA_MOCKNVML_CHECK_ONLY();
  return nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, profileId, placements, count);
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, void* data, unsigned int timeoutms) {
  NVDRA_MOCKNVML_CHECK_ONLY();
  if (data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlEventData_t full{};
  const nvmlReturn_t rc = nvmlEventSetWait_v2(set, &full, timeoutms);
  if (rc == NVML_SUCCESS) std::memcpy(data, &full, kEventDataV1Size);
  return rc;
}

nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t ci, void* info) {
  NVDRA_MOCKNVML_CHECK_ONLY();
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlComputeInstanceInfo_t full{};
  const nvmlReturn_t rc = nvmlComputeInstanceGetInfo_v2(ci, &full);
  if (rc == NVML_SUCCESS) std::memcpy(info, &full, kComputeInstanceInfoV1Size);
  return rc;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 GpuInstanceProfileInfoV1* info) {
  NVDRA_MOCKNVML_CHECK_ONLY();
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlGpuInstanceProfileInfo_v2_t v2{};
  v2.version = nvmlGpuInstanceProfileInfo_v2;
  const nvmlReturn_t rc = nvmlDeviceGetGpuInstanceProfileInfoV(device, profile, &v2);
  if (rc != NVML_SUCCESS) return rc;
  *info = GpuInstanceProfileInfoV1{v2.id, v2.isP2pSupported, v2.sliceCount, v2.instanceCount,
                                   v2.multiprocessorCount, v2.copyEngineCount, v2.decoderCount,
                                   v2.encoderCount, v2.jpegCount, v2.ofaCount, v2.memorySizeMB};
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance,
                                                          unsigned int profile,
                                                          unsigned int engProfile,
                                                          ComputeInstanceProfileInfoV1* info) {
  NVDRA_MOCKNVML_CHECK_ONLY();
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlComputeInstanceProfileInfo_v2_t v2{};
  v2.version = nvmlComputeInstanceProfileInfo_v2;
  const nvmlReturn_t rc =
      nvmlGpuInstanceGetComputeInstanceProfileInfoV(gpuInstance, profile, engProfile, &v2);
  if (rc != NVML_SUCCESS) return rc;
  *info = ComputeInstanceProfileInfoV1{v2.id, v2.sliceCount, v2.instanceCount,
                                       v2.multiprocessorCount, v2.sharedCopyEngineCount,
                                       v2.sharedDecoderCount, v2.sharedEncoderCount,
                                       v2.sharedJpegCount, v2.sharedOfaCount};
  return NVML_SUCCESS;
}

// --- Empty lists ---------------------------------------------------------------

// No process runs on a mock GPU (or MIG device): every process list is
// empty. *infoCount is set to 0; infos may be NULL (nothing is written).
namespace {
nvmlReturn_t NoProcesses(const char* function, nvmlDevice_t device, unsigned int* infoCount) {
  Context& ctx = Context::Get();
  const Context::Call call = ctx.Begin(function);
  if (call.rc != NVML_SUCCESS) return call.rc;
  ResolvedDevice d;
  if (const nvmlReturn_t rc = ctx.Resolve(device, &d); rc != NVML_SUCCESS) return rc;
  if (infoCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *infoCount = 0;
  return NVML_SUCCESS;
}
}  // namespace

#define NVDRA_MOCKNVML_NO_PROCESSES(name)                                                   \
  NVDRA_MOCKNVML_EXPORT nvmlReturn_t name(nvmlDevice_t device, unsigned int* infoCount,      \
                                          void* /*infos*/);                                  \
  nvmlReturn_t name(nvmlDevice_t device, unsigned int* infoCount, void* /*infos*/) {         \
    return NoProcesses(#name, device, infoCount);                                           \
  }
NVDRA_MOCKNVML_NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses)
NVDRA_MOCKNVML_NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v2)
NVDRA_MOCKNVML_NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v3)
NVDRA_MOCKNVML_NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses)
NVDRA_MOCKNVML_NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v2)
NVDRA_MOCKNVML_NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v3)
NVDRA_MOCKNVML_NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses)
NVDRA_MOCKNVML_NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses_v2)
NVDRA_MOCKNVML_NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses_v3)
#undef NVDRA_MOCKNVML_NO_PROCESSES

// No GPU is excluded from NVML (a GPU on vfio-pci is left out of the count
// instead; README "Mock sysfs"), and no S-class unit exists.
namespace {
nvmlReturn_t ZeroCount(const char* function, unsigned int* count) {
  const Context::Call call = Context::Get().Begin(function);
  if (call.rc != NVML_SUCCESS) return call.rc;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *count = 0;
  return NVML_SUCCESS;
}
// Any index is past the end of an empty list.
nvmlReturn_t NoSuchIndex(const char* function, const void* info) {
  const Context::Call call = Context::Get().Begin(function);
  if (call.rc != NVML_SUCCESS) return call.rc;
  (void)info;
  return NVML_ERROR_INVALID_ARGUMENT;
}
}  // namespace

NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlGetExcludedDeviceCount(unsigned int* deviceCount);
NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlGetBlacklistDeviceCount(unsigned int* deviceCount);
NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlUnitGetCount(unsigned int* unitCount);
NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlGetExcludedDeviceInfoByIndex(unsigned int index,
                                                                    void* info);
NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlGetBlacklistDeviceInfoByIndex(unsigned int index,
                                                                     void* info);

nvmlReturn_t nvmlGetExcludedDeviceCount(unsigned int* deviceCount) {
  return ZeroCount(__func__, deviceCount);
}
nvmlReturn_t nvmlGetBlacklistDeviceCount(unsigned int* deviceCount) {
  return ZeroCount(__func__, deviceCount);
}
nvmlReturn_t nvmlUnitGetCount(unsigned int* unitCount) { return ZeroCount(__func__, unitCount); }
nvmlReturn_t nvmlGetExcludedDeviceInfoByIndex(unsigned int /*index*/, void* info) {
  return NoSuchIndex(__func__, info);
}
nvmlReturn_t nvmlGetBlacklistDeviceInfoByIndex(unsigned int /*index*/, void* info) {
  return NoSuchIndex(__func__, info);
}

}  // extern "C"

}  // namespace nvdra::mocknvml::c_api
