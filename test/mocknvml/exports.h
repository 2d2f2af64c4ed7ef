#pragma once

// The C functions of nvml_abi.h the mock exports: every function of
// NVDRA_NVML_FUNCTIONS plus nvmlErrorString, with C linkage and default
// visibility (the library is built with -fvisibility=hidden and a version
// script, so nothing else leaks). Each definition's type is checked against
// nvml_abi.h, so a signature that drifts from the loader's fails to compile.
//
// The definitions live in api_device.cc (init, system, device queries,
// nvmlErrorString), api_mig.cc (MIG) and api_fabric_events.cc (fabric, events).
// The rest of nvml.h is declared where it is defined, with
// NVDRA_MOCKNVML_EXPORT: api_compat.cc (the plain v1 names, empty lists),
// api_device.cc / api_mig.cc (a few lookups and creates), and the generated
// api_stubs.cc (README.md, "Every NVML function").
//
// Thread-safety: every function is thread-safe (see context.h).

#include <type_traits>

#include "nvml/nvml_abi.h"

#define NVDRA_MOCKNVML_EXPORT __attribute__((visibility("default")))

namespace nvdra::mocknvml::c_api {
using namespace nvdra::nvml::abi;  // NOLINT: the X-macro's parameter lists name the ABI types

extern "C" {
#define NVDRA_MOCKNVML_DECLARE(name, params) NVDRA_MOCKNVML_EXPORT nvmlReturn_t name params;
NVDRA_NVML_FUNCTIONS(NVDRA_MOCKNVML_DECLARE)
#undef NVDRA_MOCKNVML_DECLARE
NVDRA_MOCKNVML_EXPORT const char* nvmlErrorString(nvmlReturn_t result);
}

#define NVDRA_MOCKNVML_CHECK_SIGNATURE(name, params)                  \
  static_assert(std::is_same_v<decltype(&name), name##_fn>,           \
                #name " in the mock differs from nvml_abi.h");
NVDRA_NVML_FUNCTIONS(NVDRA_MOCKNVML_CHECK_SIGNATURE)
#undef NVDRA_MOCKNVML_CHECK_SIGNATURE
static_assert(std::is_same_v<decltype(&nvmlErrorString), nvmlErrorString_fn>);

}  // namespace nvdra::mocknvml::c_api
