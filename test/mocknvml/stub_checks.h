#pragma once

// Handle checks for the generated stubs (api_stubs.cc, gen-stubs.py):
// NVDRA_MOCKNVML_CHECK_HANDLE(kind, handle) returns the error a real library
// gives for a handle it did not hand out, after NVDRA_MOCKNVML_BEGIN.
//
// Thread-safety: call with the context lock held (inside a Call).

#include "context.h"

namespace nvdra::mocknvml::stub_checks {
using nvml::abi::nvmlReturn_t;

// INVALID_ARGUMENT for an unknown handle, GPU_IS_LOST for a lost GPU.
inline nvmlReturn_t device(Context& ctx, nvml::abi::nvmlDevice_t h) {
  ResolvedDevice d;
  return ctx.Resolve(h, &d);
}
inline nvmlReturn_t gpu_instance(Context& ctx, nvml::abi::nvmlGpuInstance_t h) {
  ResolvedDevice d;
  return ctx.ResolveGpuInstance(h, &d);
}
inline nvmlReturn_t compute_instance(Context& ctx, nvml::abi::nvmlComputeInstance_t h) {
  ResolvedDevice d;
  return ctx.ResolveComputeInstance(h, &d);
}
inline nvmlReturn_t event_set(Context& ctx, nvml::abi::nvmlEventSet_t h) {
  return ctx.IsEventSet(h) ? nvml::abi::NVML_SUCCESS : nvml::abi::NVML_ERROR_INVALID_ARGUMENT;
}
// The mock models no S-class units (nvmlUnitGetCount is 0): no unit handle
// is valid.
inline nvmlReturn_t unit(Context& /*ctx*/, const void* /*h*/) {
  return nvml::abi::NVML_ERROR_INVALID_ARGUMENT;
}
// Handles the mock cannot have handed out (GPM samples: nvmlGpmSampleAlloc
// is NOT_SUPPORTED) are only checked for NULL, before NOT_SUPPORTED.
inline nvmlReturn_t non_null(Context& /*ctx*/, const void* h) {
  return h != nullptr ? nvml::abi::NVML_SUCCESS : nvml::abi::NVML_ERROR_INVALID_ARGUMENT;
}

}  // namespace nvdra::mocknvml::stub_checks

#define NVDRA_MOCKNVML_CHECK_HANDLE(kind, handle)                                     \
  if (const ::nvdra::nvml::abi::nvmlReturn_t rc_ =                                    \
          ::nvdra::mocknvml::stub_checks::kind(ctx, handle);                          \
      rc_ != ::nvdra::nvml::abi::NVML_SUCCESS)                                        \
  return rc_
