#pragma once

// How healthy one GPU's NVLink fabric is, by its fabric info (v3: health
// summary and mask), in the one rule both the GPU plugin's device health
// check (device taints) and the IMEX daemon (its clique entry) apply:
//   health summary UNHEALTHY, or state COMPLETED with a non-success fabric
//     status (registration failed)            -> kUnhealthy
//   health summary LIMITED_CAPACITY           -> kLimitedCapacity
//   NOT_SUPPORTED, HEALTHY, no summary (v2 and older drivers), NOT_STARTED
//     or IN_PROGRESS                          -> kFine
// NVML has no event for a change of it: callers read it periodically.
// Defines: FabricVerdict, JudgeFabric, DescribeFabric, DescribeHealthMask.
// Thread-safety: pure functions.

#include <cstdint>
#include <string>

#include "nvml/library.h"

namespace nvdra::nvml {

enum class FabricVerdict { kFine, kLimitedCapacity, kUnhealthy };

FabricVerdict JudgeFabric(const FabricInfo& info);

// "GPU-... (healthSummary Unhealthy, healthMask 0x10: route unhealthy)".
std::string DescribeFabric(const std::string& uuid, const FabricInfo& info);

// The health mask's set conditions in words ("route unhealthy, degraded
// bandwidth"); "" when none is set.
std::string DescribeHealthMask(std::uint32_t mask);

}  // namespace nvdra::nvml
