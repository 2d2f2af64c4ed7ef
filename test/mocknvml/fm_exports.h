#pragma once

// The C functions the mock Fabric Manager library (libnvfm.so.1) exports:
// every function of NVDRA_FM_FUNCTIONS, with C linkage and default
// visibility (the library is built with -fvisibility=hidden and a version
// script, so nothing else leaks). Each definition's type is checked against
// fm_abi.h, so a signature that drifts from the loader's fails to compile.
//
// The definitions live in fm_api.cc. Thread-safety: every function is
// thread-safe.

#include <type_traits>

#include "fabricmanager/fm_abi.h"

#define NVDRA_MOCKNVFM_EXPORT __attribute__((visibility("default")))

namespace nvdra::mocknvml::fm_c_api {
using namespace nvdra::fabricmanager::abi;  // NOLINT: the X-macro's parameter lists name the ABI types

extern "C" {
#define NVDRA_MOCKNVFM_DECLARE(name, params) NVDRA_MOCKNVFM_EXPORT fmReturn_t name params;
NVDRA_FM_FUNCTIONS(NVDRA_MOCKNVFM_DECLARE)
#undef NVDRA_MOCKNVFM_DECLARE
}

#define NVDRA_MOCKNVFM_CHECK_SIGNATURE(name, params) \
  static_assert(std::is_same_v<decltype(&name), name##_fn>, #name " in the mock differs from fm_abi.h");
NVDRA_FM_FUNCTIONS(NVDRA_MOCKNVFM_CHECK_SIGNATURE)
#undef NVDRA_MOCKNVFM_CHECK_SIGNATURE

}  // namespace nvdra::mocknvml::fm_c_api
