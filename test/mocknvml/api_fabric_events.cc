// Exported NVML fabric (GPU fabric info, v1 and V) and event functions.
//
// Fabric info of a GPU, later sources winning: the profile ("fabric", merged
// per device), then $MOCK_NVML_FABRIC_STATE / $MOCK_NVML_FABRIC_STATUS (read at
// nvmlInit, applied to every GPU with fabric support), then the state file's
// "fabric" map (re-read on change, so a test can move a running process from
// in_progress to completed, or make a GPU's fabric unhealthy: healthMask,
// healthSummary). A GPU whose profile says "fabric": null answers
// NOT_SUPPORTED, as pre-Hopper GPUs do; MIG device handles too.
//
// Events: see events.h (event sets, lost GPUs, the registrations record).

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "context.h"
#include "exports.h"

namespace nvdra::mocknvml::c_api {
namespace {

nvmlReturn_t CurrentFabric(Context& ctx, const ResolvedDevice& d, FabricSpec* out) {
  if (d.is_mig() || !d.gpu->fabric) return NVML_ERROR_NOT_SUPPORTED;
  *out = *d.gpu->fabric;
  if (ctx.env_fabric_state()) out->state = *ctx.env_fabric_state();
  if (ctx.env_fabric_status()) out->status = *ctx.env_fabric_status();
  const MigState* state = ctx.ReadMigState();
  if (state == nullptr) return NVML_ERROR_UNKNOWN;
  if (auto it = state->fabric.find(d.gpu->uuid); it != state->fabric.end()) {
    if (it->second.state) out->state = *it->second.state;
    if (it->second.status) out->status = *it->second.status;
    if (it->second.health_mask) out->health_mask = *it->second.health_mask;
    if (it->second.health_summary) out->health_summary = *it->second.health_summary;
  }
  return NVML_SUCCESS;
}

}  // namespace

extern "C" {

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t* gpuFabricInfo) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (gpuFabricInfo == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  FabricSpec fabric;
  if (const nvmlReturn_t rc = CurrentFabric(ctx, d, &fabric); rc != NVML_SUCCESS) return rc;
  for (unsigned i = 0; i < kGpuFabricUuidLength; ++i) {
    gpuFabricInfo->clusterUuid[i] = fabric.cluster_uuid[i];
  }
  gpuFabricInfo->status = fabric.status;
  gpuFabricInfo->cliqueId = fabric.clique_id;
  gpuFabricInfo->state = fabric.state;
  return NVML_SUCCESS;
}

// Accepts v2 (no healthSummary, which is left untouched) and v3.
nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device,
                                         nvmlGpuFabricInfoV_t* gpuFabricInfo) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (gpuFabricInfo == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const unsigned version = gpuFabricInfo->version;
  if (version != nvmlGpuFabricInfo_v2 && version != nvmlGpuFabricInfo_v3) {
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  FabricSpec fabric;
  if (const nvmlReturn_t rc = CurrentFabric(ctx, d, &fabric); rc != NVML_SUCCESS) return rc;
  for (unsigned i = 0; i < kGpuFabricUuidLength; ++i) {
    gpuFabricInfo->clusterUuid[i] = fabric.cluster_uuid[i];
  }
  gpuFabricInfo->status = fabric.status;
  gpuFabricInfo->cliqueId = fabric.clique_id;
  gpuFabricInfo->state = fabric.state;
  gpuFabricInfo->healthMask = fabric.health_mask;
  if (version == nvmlGpuFabricInfo_v3) gpuFabricInfo->healthSummary = fabric.health_summary;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  NVDRA_MOCKNVML_BEGIN();
  if (set == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *set = ctx.CreateEventSet();
  return NVML_SUCCESS;
}

// NOT_SUPPORTED for a MIG device handle or when `eventTypes` has a type the
// GPU does not support (the profile's supportedEventTypes), as NVML documents.
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (!ctx.IsEventSet(set)) return NVML_ERROR_INVALID_ARGUMENT;
  if (d.is_mig() || (eventTypes & ~d.gpu->supported_event_types) != 0) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  set->set.Register(d.gpu_handle, d.gpu->uuid, eventTypes);
  // After Register: a test that sees the line may inject at once. A failed
  // record (a read-only state folder) does not fail the registration, which
  // took place; the test waiting for it is told why on stderr.
  const common::Status recorded = AppendRegistration(
      ctx.registrations_file(), static_cast<long>(::getpid()), d.gpu->uuid, eventTypes);
  if (!recorded.ok()) {
    std::fprintf(stderr, "mock NVML: recording the event registration: %s\n",
                 recorded.message().c_str());
  }
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                              unsigned long long* eventTypes) {
  NVDRA_MOCKNVML_BEGIN();
  NVDRA_MOCKNVML_RESOLVE(device, d);
  if (eventTypes == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *eventTypes = d.gpu->supported_event_types;
  return NVML_SUCCESS;
}

// Sleeps without the context lock, so other calls (and other threads' sets)
// go on while it waits. Freeing a set another thread waits on is undefined,
// as in NVML.
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                 unsigned int timeoutms) {
  NVDRA_MOCKNVML_BEGIN();
  if (data == nullptr || !ctx.IsEventSet(set)) return NVML_ERROR_INVALID_ARGUMENT;
  call.lock.unlock();
  return set->set.Wait(std::chrono::milliseconds(timeoutms), data);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  NVDRA_MOCKNVML_BEGIN();
  return ctx.FreeEventSet(set) ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

}  // extern "C"

}  // namespace nvdra::mocknvml::c_api
