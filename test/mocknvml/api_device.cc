// Exported NVML functions: init, system queries, device handles and device
// properties, and nvmlErrorString. Contracts are NVML's; where the mock picks
// a code NVML's documentation leaves open, the comment says so.

#include <cstdio>
#include <cstring>
#include <string>

#include "context.h"
#include "exports.h"

namespace nvdra::mocknvml::c_api {
extern "C" {

nvmlReturn_t nvmlInit_v2() { return Context::Get().Init(); }

// NVML_INIT_FLAG_NO_GPUS changes nothing here: the mock never fails for a
// missing GPU.
nvmlReturn_t nvmlInitWithFlags(unsigned int /*flags*/) { return Context::Get().Init(); }

nvmlReturn_t nvmlShutdown() { return Context::Get().Shutdown(); }

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  NVDRA_MOCKNVML_BEGIN();
  return CopyString(ctx.profile().driver_version, version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  NVDRA_MOCKNVML_BEGIN();
  return CopyString(ctx.profile().nvml_version, version, length);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* cudaDriverVersion) {
  NVDRA_MOCKNVML_BEGIN();
  if (cudaDriverVersion == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *cudaDriverVersion = ctx.profile().cuda_driver_version;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount) {
  NVDRA_MOCKNVML_BEGIN();
  if (deviceCount == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *deviceCount = static_cast<unsigned>(ctx.profile().gpus.size());
  return NVML_SUCCESS;
}

// GPU_IS_LOST for a lost GPU, as nvidia-smi shows for one that fell off the
// bus ("Unable to determine the device handle for GPU ...: GPU is lost").
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  NVDRA_MOCKNVML_BEGIN();
  if (device == nullptr || index >= ctx.profile().gpus.size()) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (ctx.IsGpuLost(index)) return NVML_ERROR_GPU_IS_LOST;
  *device = ctx.GpuHandle(index);
  return NVML_SUCCESS;
}

// GPU and MIG device UUIDs; NOT_FOUND for any other string; GPU_IS_LOST
// when the GPU (the MIG device's parent) is lost.
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  NVDRA_MOCKNVML_BEGIN();
  if (uuid == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const std::string wanted(uuid);
  const Profile& profile = ctx.profile();
  for (unsigned i = 0; i < profile.gpus.size(); ++i) {
    if (profile.gpus[i].uuid == wanted) {
      if (ctx.IsGpuLost(i)) return NVML_ERROR_GPU_IS_LOST;
      *device = ctx.GpuHandle(i);
      return NVML_SUCCESS;
    }
  }
  if (!wanted.starts_with("MIG-")) return NVML_ERROR_NOT_FOUND;
  const MigState* state = ctx.ReadMigState();
  if (state == nullptr) return NVML_ERROR_UNKNOWN;
  for (unsigned i = 0; i < profile.gpus.size(); ++i) {
    auto it = state->gpus.find(profile.gpus[i].uuid);
    if (it == state->gpus.end()) continue;
    for (const GpuInstanceState& gi : it->second.gpu_instances) {
      for (const ComputeInstanceState& ci : gi.compute_instances) {
        if (MigDeviceUuid(profile.gpus[i].uuid, gi.id, ci.id) == wanted) {
          if (ctx.IsGpuLost(i)) return NVML_ERROR_GPU_IS_LOST;
          *device = ctx.MigDeviceHandle(i, gi.id, ci.id);
          return NVML_SUCCESS;
        }
      }
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

namespace {
// NVML's bus id forms, hex in any case: "domain:bus:device.function" (the
// domain up to 8 digits: "00000000:18:00.0", sysfs's "0000:18:00.0") or
// "bus:device.function" (domain 0). False when `text` is none of them.
bool ParsePciBusId(const char* text, unsigned* domain, unsigned* bus, unsigned* device,
                   unsigned* function) {
  // %x alone would also take "0x", signs and blanks.
  if (std::strspn(text, "0123456789abcdefABCDEF:.") != std::strlen(text)) return false;
  int used = 0;
  *domain = 0;
  // NOLINTNEXTLINE(cert-err34-c): the %n check below rejects partial parses.
  if (std::sscanf(text, "%x:%x:%x.%x%n", domain, bus, device, function, &used) == 4 &&
      text[used] == '\0') {
    return true;
  }
  used = 0;
  *domain = 0;
  return std::sscanf(text, "%x:%x.%x%n", bus, device, function, &used) == 3 && text[used] == '\0';
}
}  // namespace

// Not in nvml_abi.h (the driver does not use them); nvml.h declares both.
// INVALID_ARGUMENT for a string that is no bus id; NOT_FOUND for one no GPU
// NVML manages has (a GPU on vfio-pci included); GPU_IS_LOST for a lost GPU.
NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId,
                                                                    nvmlDevice_t* device);
NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* pciBusId,
                                                                 nvmlDevice_t* device);

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId, nvmlDevice_t* device) {
  NVDRA_MOCKNVML_BEGIN();
  if (pciBusId == nullptr || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned domain = 0;
  unsigned bus = 0;
  unsigned dev = 0;
  unsigned function = 0;
  if (!ParsePciBusId(pciBusId, &domain, &bus, &dev, &function)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const Profile& profile = ctx.profile();
  for (unsigned i = 0; i < profile.gpus.size(); ++i) {
    unsigned gpu_domain = 0;
    unsigned gpu_bus = 0;
    unsigned gpu_dev = 0;
    unsigned gpu_function = 0;
    if (ParsePciBusId(profile.gpus[i].pci.busId, &gpu_domain, &gpu_bus, &gpu_dev,
                      &gpu_function) &&
        gpu_domain == domain && gpu_bus == bus && gpu_dev == dev && gpu_function == function) {
      if (ctx.IsGpuLost(i)) return NVML_ERROR_GPU_IS_LOST;
      *device = ctx.GpuHandle(i);
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

// v1 skipped GPUs the caller may not use; the mock has none such. Checks
// init and missingFunctions under its own name, then forwards (unlocked).
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* pciBusId, nvmlDevice_t* device) {
  {
    NVDRA_MOCKNVML_BEGIN();
  }
  return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

// MIG devices have no index or minor number of their own: NOT_SUPPORTED.
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (d.is_mig()) return NVML_ERROR_NOT_SUPPORTED;
  *index = d.gpu_index;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (d.is_mig()) return CopyString(MigDeviceUuid(d.gpu->uuid, d.gi->id, d.ci->id), uuid, length);
  return CopyString(d.gpu->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minorNumber) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (minorNumber == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (d.is_mig()) return NVML_ERROR_NOT_SUPPORTED;
  *minorNumber = d.gpu->minor;
  return NVML_SUCCESS;
}

// A MIG device is named "<GPU name> MIG <profile>", e.g.
// "NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb".
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (d.is_mig()) return CopyString(d.gpu->name + " MIG " + d.ci_profile->name, name, length);
  return CopyString(d.gpu->name, name, length);
}

// Brand, architecture, compute capability, PCI, NUMA node, addressing mode
// and module id of a MIG device are its parent GPU's.
nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t* type) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (type == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *type = d.gpu->brand;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t* arch) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (arch == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *arch = d.gpu->architecture;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (major == nullptr || minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *major = d.gpu->cuda_cc_major;
  *minor = d.gpu->cuda_cc_minor;
  return NVML_SUCCESS;
}

// A MIG device's memory is its GPU instance's (all free).
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (d.is_mig()) {
    const unsigned long long bytes = d.gi_profile->memory_size_mb * 1024ULL * 1024ULL;
    *memory = nvmlMemory_t{bytes, bytes, 0};
    return NVML_SUCCESS;
  }
  *memory = d.gpu->memory;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *pci = d.gpu->pci;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int* node) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (node == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d.gpu->numa_node) return NVML_ERROR_NOT_SUPPORTED;
  *node = *d.gpu->numa_node;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAddressingMode(nvmlDevice_t device, nvmlDeviceAddressingMode_t* mode) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (mode->version != nvmlDeviceAddressingMode_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  if (!d.gpu->addressing_mode) return NVML_ERROR_NOT_SUPPORTED;
  mode->value = *d.gpu->addressing_mode;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetModuleId(nvmlDevice_t device, unsigned int* moduleId) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (moduleId == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d.gpu->module_id) return NVML_ERROR_NOT_SUPPORTED;
  *moduleId = *d.gpu->module_id;
  return NVML_SUCCESS;
}

// Texts of the real library (as NVIDIA's DCGM copies them in
// sdk/nvidia/nvml/nvml_error_strings.h). Codes that table lacks (21, 25, 27,
// 28, 29) use NVML's documented names; they are not checked against a real
// libnvidia-ml. Unknown codes give "Unknown Error".
const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires reset";
    case 17: return "GPU access blocked by the operating system";
    case 18: return "Driver/library version mismatch";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    case 23: return "Insufficient Resources";
    case 25: return "Argument version mismatch";
    case 27: return "Not Ready";
    case 28: return "GPU not found";
    case 29: return "Invalid State";
    default: return "Unknown Error";
  }
}

}  // extern "C"

}  // namespace nvdra::mocknvml::c_api
