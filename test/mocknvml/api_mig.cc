// Exported NVML MIG functions: mode, profiles, placements, GPU and compute
// instances, MIG device handles. State lives in the shared state file
// (mig_state.h); the placement rules and their codes are in mig_state.cc.
//
// Codes the mock chooses where NVML's documentation is loose:
//  - profile info, possible placements and remaining capacity of a profile
//    the GPU lacks: NOT_SUPPORTED; a profile index >= NVML_GPU_INSTANCE_PROFILE_COUNT
//    or a CI profile index >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT: INVALID_ARGUMENT.
//  - profile info and possible placements answer with MIG mode off on a
//    MIG-capable GPU (the probed H100 does); instance calls need MIG on
//    (NOT_SUPPORTED otherwise, as NVML documents).
//  - GetGpuInstanceId / GetComputeInstanceId on a full GPU: NOT_SUPPORTED;
//    GetDeviceHandleFromMigDeviceHandle on one: INVALID_ARGUMENT.
//  - MIG devices are numbered by (GI id, CI id); an index below
//    maxMigDeviceCount with no device is NOT_FOUND.

#include <cstdio>
#include <functional>
#include <string>

#include "context.h"
#include "exports.h"

namespace nvdra::mocknvml::c_api {
namespace {

// Read-modify-write of one GPU's MIG state under the state file's lock.
nvmlReturn_t MutateGpu(Context& ctx, const GpuSpec& gpu,
                       const std::function<nvmlReturn_t(GpuMigState&)>& mutate) {
  StatusOr<nvmlReturn_t> rc = ctx.store().Update([&](MigState& state) {
    auto it = state.gpus.find(gpu.uuid);
    return it == state.gpus.end() ? NVML_ERROR_NOT_SUPPORTED : mutate(it->second);
  });
  if (!rc.ok()) {
    std::fprintf(stderr, "mock NVML: %s\n", rc.status().message().c_str());
    return NVML_ERROR_UNKNOWN;
  }
  return *rc;
}

// The GPU's MIG state, or the error: NOT_SUPPORTED for a GPU without MIG or
// a MIG device handle.
nvmlReturn_t GpuMig(Context& ctx, const ResolvedDevice& d, const GpuMigState** out) {
  if (!d.gpu->mig || d.is_mig()) return NVML_ERROR_NOT_SUPPORTED;
  *out = ctx.ReadGpuMigState(d.gpu_index);
  return *out == nullptr ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
}

bool MigEnabled(const GpuMigState& mig) { return mig.current_mode == NVML_DEVICE_MIG_ENABLE; }

void CopyName(const std::string& name, char (&out)[kDeviceNameBufferSize]) {
  std::snprintf(out, sizeof(out), "%s", name.c_str());
}

}  // namespace

extern "C" {

// The compute mode lives in the state file next to the MIG state, where the
// simulated nvidia-smi (-c) changes it too. Full GPUs only, as NVML.
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t* mode) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (d.is_mig()) return NVML_ERROR_NOT_SUPPORTED;
  const MigState* state = ctx.ReadMigState();
  if (state == nullptr) return NVML_ERROR_UNKNOWN;
  auto it = state->compute_policy.find(d.gpu->uuid);
  *mode = it == state->compute_policy.end() ? NVML_COMPUTEMODE_DEFAULT : it->second.compute_mode;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t device, nvmlComputeMode_t mode) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (mode < NVML_COMPUTEMODE_DEFAULT || mode > NVML_COMPUTEMODE_EXCLUSIVE_PROCESS) return NVML_ERROR_INVALID_ARGUMENT;
  if (d.is_mig()) return NVML_ERROR_NOT_SUPPORTED;
  StatusOr<nvmlReturn_t> rc = ctx.store().Update([&](MigState& state) {
    state.compute_policy[d.gpu->uuid].compute_mode = mode;
    return NVML_SUCCESS;
  });
  if (!rc.ok()) {
    std::fprintf(stderr, "mock NVML: %s\n", rc.status().message().c_str());
    return NVML_ERROR_UNKNOWN;
  }
  return *rc;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode,
                                  unsigned int* pendingMode) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (currentMode == nullptr || pendingMode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const GpuMigState* mig = nullptr;
  if (const nvmlReturn_t rc = GpuMig(ctx, d, &mig); rc != NVML_SUCCESS) return rc;
  *currentMode = mig->current_mode;
  *pendingMode = mig->pending_mode;
  return NVML_SUCCESS;
}

// As the driver: IN_USE while GPU instances exist; on an Ampere GPU the
// change waits for a GPU reset (pending only, activation status
// RESET_REQUIRED), later architectures switch at once.
nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t* activationStatus) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (activationStatus == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (mode != NVML_DEVICE_MIG_ENABLE && mode != NVML_DEVICE_MIG_DISABLE) return NVML_ERROR_INVALID_ARGUMENT;
  if (d.is_mig() || !d.gpu->mig) return NVML_ERROR_NOT_SUPPORTED;
  const bool needs_reset = d.gpu->architecture == NVML_DEVICE_ARCH_AMPERE;
  const nvmlReturn_t rc = MutateGpu(ctx, *d.gpu, [&](GpuMigState& mig) {
    if (!mig.gpu_instances.empty()) return NVML_ERROR_IN_USE;
    mig.pending_mode = mode;
    if (!needs_reset) mig.current_mode = mode;
    return NVML_SUCCESS;
  });
  *activationStatus = rc == NVML_SUCCESS && needs_reset ? NVML_ERROR_RESET_REQUIRED : rc;
  return rc;
}

// 0 while MIG mode is off, as the probed H100 answers.
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const GpuMigState* mig = nullptr;
  if (const nvmlReturn_t rc = GpuMig(ctx, d, &mig); rc != NVML_SUCCESS) return rc;
  *count = MigEnabled(*mig) ? d.gpu->mig->max_mig_device_count : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t* info) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (info->version != nvmlGpuInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  if (!d.gpu->mig || d.is_mig()) return NVML_ERROR_NOT_SUPPORTED;
  if (profile >= NVML_GPU_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
  const GpuInstanceProfile* p = d.gpu->mig->ProfileByIndex(profile);
  if (p == nullptr) return NVML_ERROR_NOT_SUPPORTED;
  info->id = p->id;
  info->isP2pSupported = p->is_p2p_supported;
  info->sliceCount = p->slice_count;
  info->instanceCount = p->instance_count;
  info->multiprocessorCount = p->multiprocessor_count;
  info->copyEngineCount = p->copy_engine_count;
  info->decoderCount = p->decoder_count;
  info->encoderCount = p->encoder_count;
  info->jpegCount = p->jpeg_count;
  info->ofaCount = p->ofa_count;
  info->memorySizeMB = p->memory_size_mb;
  CopyName(p->name, info->name);
  return NVML_SUCCESS;
}

// `placements` NULL asks for the count only; a `*count` too small gives
// INSUFFICIENT_SIZE with `*count` set to the number needed.
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t* placements,
    unsigned int* count) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d.gpu->mig || d.is_mig()) return NVML_ERROR_NOT_SUPPORTED;
  const GpuInstanceProfile* p = d.gpu->mig->ProfileById(profileId);
  if (p == nullptr) return NVML_ERROR_NOT_SUPPORTED;
  const auto needed = static_cast<unsigned>(p->placements.size());
  if (placements == nullptr) {
    *count = needed;
    return NVML_SUCCESS;
  }
  if (*count < needed) {
    *count = needed;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned i = 0; i < needed; ++i) placements[i] = p->placements[i];
  *count = needed;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device,
                                                       unsigned int profileId,
                                                       unsigned int* count) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const GpuMigState* mig = nullptr;
  if (const nvmlReturn_t rc = GpuMig(ctx, d, &mig); rc != NVML_SUCCESS) return rc;
  if (!MigEnabled(*mig)) return NVML_ERROR_NOT_SUPPORTED;
  const GpuInstanceProfile* p = d.gpu->mig->ProfileById(profileId);
  if (p == nullptr) return NVML_ERROR_NOT_SUPPORTED;
  *count = RemainingCapacity(*p, *mig);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                      const nvmlGpuInstancePlacement_t* placement,
                                                      nvmlGpuInstance_t* gpuInstance) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (placement == nullptr || gpuInstance == nullptr || d.is_mig()) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (!d.gpu->mig) return NVML_ERROR_NOT_SUPPORTED;
  unsigned gi_id = 0;
  const nvmlReturn_t rc = MutateGpu(ctx, *d.gpu, [&](GpuMigState& mig) {
    return CreateGpuInstance(*d.gpu->mig, mig, profileId, *placement, &gi_id);
  });
  if (rc == NVML_SUCCESS) *gpuInstance = ctx.GpuInstanceHandle(d.gpu_index, gi_id);
  return rc;
}

// Without a placement (declared in nvml.h, not in nvml_abi.h): the first of
// the profile's possible placements, in profile order, that is free; every
// placement taken: INSUFFICIENT_RESOURCES. Other codes as with a placement.
NVDRA_MOCKNVML_EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device,
                                                               unsigned int profileId,
                                                               nvmlGpuInstance_t* gpuInstance);
nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
                                         nvmlGpuInstance_t* gpuInstance) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (gpuInstance == nullptr || d.is_mig()) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d.gpu->mig) return NVML_ERROR_NOT_SUPPORTED;
  const GpuInstanceProfile* profile = d.gpu->mig->ProfileById(profileId);
  unsigned gi_id = 0;
  const nvmlReturn_t rc = MutateGpu(ctx, *d.gpu, [&](GpuMigState& mig) {
    if (profile == nullptr || profile->placements.empty()) {
      // MIG off (NOT_SUPPORTED) or an unknown profile (INVALID_ARGUMENT).
      return CreateGpuInstance(*d.gpu->mig, mig, profileId, nvmlGpuInstancePlacement_t{}, &gi_id);
    }
    nvmlReturn_t last = NVML_ERROR_INSUFFICIENT_RESOURCES;
    for (const nvmlGpuInstancePlacement_t& placement : profile->placements) {
      last = CreateGpuInstance(*d.gpu->mig, mig, profileId, placement, &gi_id);
      if (last != NVML_ERROR_INSUFFICIENT_RESOURCES) break;
    }
    return last;
  });
  if (rc == NVML_SUCCESS) *gpuInstance = ctx.GpuInstanceHandle(d.gpu_index, gi_id);
  return rc;
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) {
  NVDRA_MOCKNVML_BEGIN();
  ResolvedDevice d;
  if (const nvmlReturn_t rc = ctx.ResolveGpuInstance(gpuInstance, &d); rc != NVML_SUCCESS) {
    return rc;
  }
  const unsigned gi_id = d.gi->id;
  return MutateGpu(ctx, *d.gpu, [&](GpuMigState& mig) {
    if (!MigEnabled(mig)) return NVML_ERROR_NOT_SUPPORTED;
    return DestroyGpuInstance(mig, gi_id);
  });
}

// `gpuInstances` must hold the profile's instanceCount entries, as in NVML.
nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                       nvmlGpuInstance_t* gpuInstances, unsigned int* count) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (gpuInstances == nullptr || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const GpuMigState* mig = nullptr;
  if (const nvmlReturn_t rc = GpuMig(ctx, d, &mig); rc != NVML_SUCCESS) return rc;
  if (!MigEnabled(*mig)) return NVML_ERROR_NOT_SUPPORTED;
  if (d.gpu->mig->ProfileById(profileId) == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned n = 0;
  for (const GpuInstanceState& gi : mig->gpu_instances) {
    if (gi.profile_id == profileId) gpuInstances[n++] = ctx.GpuInstanceHandle(d.gpu_index, gi.id);
  }
  *count = n;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                          nvmlGpuInstance_t* gpuInstance) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (gpuInstance == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const GpuMigState* mig = nullptr;
  if (const nvmlReturn_t rc = GpuMig(ctx, d, &mig); rc != NVML_SUCCESS) return rc;
  if (!MigEnabled(*mig)) return NVML_ERROR_NOT_SUPPORTED;
  if (mig->FindGpuInstance(id) == nullptr) return NVML_ERROR_NOT_FOUND;
  *gpuInstance = ctx.GpuInstanceHandle(d.gpu_index, id);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t* info) {
  NVDRA_MOCKNVML_BEGIN();
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  ResolvedDevice d;
  if (const nvmlReturn_t rc = ctx.ResolveGpuInstance(gpuInstance, &d); rc != NVML_SUCCESS) {
    return rc;
  }
  info->device = d.gpu_handle;
  info->id = d.gi->id;
  info->profileId = d.gi->profile_id;
  info->placement = {d.gi->start, d.gi->size};
  return NVML_SUCCESS;
}

// Shared engine counts of a CI are its GI's.
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_v2_t* info) {
  NVDRA_MOCKNVML_BEGIN();
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  ResolvedDevice d;
  if (const nvmlReturn_t rc = ctx.ResolveGpuInstance(gpuInstance, &d); rc != NVML_SUCCESS) {
    return rc;
  }
  if (info->version != nvmlComputeInstanceProfileInfo_v2) {
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  if (profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
      engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  for (const ComputeInstanceProfile& p : d.gi_profile->compute_profiles) {
    if (p.index != profile) continue;
    info->id = p.index;
    info->sliceCount = p.slice_count;
    info->instanceCount = p.instance_count;
    info->multiprocessorCount = p.multiprocessor_count;
    info->sharedCopyEngineCount = d.gi_profile->copy_engine_count;
    info->sharedDecoderCount = d.gi_profile->decoder_count;
    info->sharedEncoderCount = d.gi_profile->encoder_count;
    info->sharedJpegCount = d.gi_profile->jpeg_count;
    info->sharedOfaCount = d.gi_profile->ofa_count;
    CopyName(p.name, info->name);
    return NVML_SUCCESS;
  }
  return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance,
                                                  unsigned int profileId,
                                                  nvmlComputeInstance_t* computeInstance) {
  NVDRA_MOCKNVML_BEGIN();
  if (computeInstance == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  ResolvedDevice d;
  if (const nvmlReturn_t rc = ctx.ResolveGpuInstance(gpuInstance, &d); rc != NVML_SUCCESS) {
    return rc;
  }
  const unsigned gi_id = d.gi->id;
  unsigned ci_id = 0;
  const nvmlReturn_t rc = MutateGpu(ctx, *d.gpu, [&](GpuMigState& mig) {
    return CreateComputeInstance(*d.gpu->mig, mig, gi_id, profileId, &ci_id);
  });
  if (rc == NVML_SUCCESS) *computeInstance = ctx.ComputeInstanceHandle(d.gpu_index, gi_id, ci_id);
  return rc;
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) {
  NVDRA_MOCKNVML_BEGIN();
  ResolvedDevice d;
  if (const nvmlReturn_t rc = ctx.ResolveComputeInstance(computeInstance, &d);
      rc != NVML_SUCCESS) {
    return rc;
  }
  const unsigned gi_id = d.gi->id;
  const unsigned ci_id = d.ci->id;
  return MutateGpu(ctx, *d.gpu, [&](GpuMigState& mig) {
    if (!MigEnabled(mig)) return NVML_ERROR_NOT_SUPPORTED;
    return DestroyComputeInstance(mig, gi_id, ci_id);
  });
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance,
                                                unsigned int profileId,
                                                nvmlComputeInstance_t* computeInstances,
                                                unsigned int* count) {
  NVDRA_MOCKNVML_BEGIN();
  if (computeInstances == nullptr || count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  ResolvedDevice d;
  if (const nvmlReturn_t rc = ctx.ResolveGpuInstance(gpuInstance, &d); rc != NVML_SUCCESS) {
    return rc;
  }
  if (profileId >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned n = 0;
  for (const ComputeInstanceState& ci : d.gi->compute_instances) {
    if (ci.profile_id == profileId) {
      computeInstances[n++] = ctx.ComputeInstanceHandle(d.gpu_index, d.gi->id, ci.id);
    }
  }
  *count = n;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                           nvmlComputeInstanceInfo_t* info) {
  NVDRA_MOCKNVML_BEGIN();
  if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  ResolvedDevice d;
  if (const nvmlReturn_t rc = ctx.ResolveComputeInstance(computeInstance, &d);
      rc != NVML_SUCCESS) {
    return rc;
  }
  info->device = d.gpu_handle;
  info->gpuInstance = ctx.GpuInstanceHandle(d.gpu_index, d.gi->id);
  info->id = d.ci->id;
  info->profileId = d.ci->profile_id;
  info->placement = {d.ci->start, d.ci->size};
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int* isMigDevice) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (isMigDevice == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *isMigDevice = d.is_mig() ? 1 : 0;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d.is_mig()) return NVML_ERROR_NOT_SUPPORTED;
  *id = d.gi->id;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (!d.is_mig()) return NVML_ERROR_NOT_SUPPORTED;
  *id = d.ci->id;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t* migDevice) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (migDevice == nullptr || d.is_mig()) return NVML_ERROR_INVALID_ARGUMENT;
  const GpuMigState* mig = nullptr;
  if (const nvmlReturn_t rc = GpuMig(ctx, d, &mig); rc != NVML_SUCCESS) return rc;
  if (!MigEnabled(*mig)) return NVML_ERROR_NOT_FOUND;
  if (index >= d.gpu->mig->max_mig_device_count) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned n = 0;
  for (const GpuInstanceState& gi : mig->gpu_instances) {
    for (const ComputeInstanceState& ci : gi.compute_instances) {
      if (n++ == index) {
        *migDevice = ctx.MigDeviceHandle(d.gpu_index, gi.id, ci.id);
        return NVML_SUCCESS;
      }
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                          nvmlDevice_t* device) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(migDevice, d);
  if (device == nullptr || !d.is_mig()) return NVML_ERROR_INVALID_ARGUMENT;
  *device = d.gpu_handle;
  return NVML_SUCCESS;
}

}  // extern "C"

}  // namespace nvdra::mocknvml::c_api
