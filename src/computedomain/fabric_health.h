#pragma once

// Whether a node's NVLink fabric lets its IMEX daemon say Ready. GB200-class
// GPUs report their fabric's health in NVML's fabric info (v3:
// healthSummary and healthMask); NVML has no event for it, so the daemon
// reads it at its readiness poll (imex_daemon.h) and turns its entry
// NotReady while any GPU of the node is unfit, with the reason in the entry.
// Defines: FabricReader, ReadNodeFabric(), DescribeHealthMask(),
// FabricHealth, JudgeFabricHealth().
//
// Rules, per GPU (nvml/fabric_health.h, shared with the GPU plugin's device
// health check):
//   kUnhealthy                                -> NotReady
//   kLimitedCapacity                          -> stays Ready, a warning
//   kFine, or the call NOT_SUPPORTED          -> no verdict (fine)
//   the call failing otherwise (GPU lost...)  -> unreadable: no verdict, a warning;
//     nvidia-imex's own readiness still counts, and a lost GPU is the GPU
//     plugin's health check's business (device taints).
//
// Ownership: values; ReadNodeFabric borrows the Library. Thread-safety: pure
// functions; ReadNodeFabric is as thread-safe as the Library.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nvml/fabric.h"
#include "nvml/fabric_health.h"
#include "nvml/library.h"

namespace nvdra::computedomain {

// Reads every GPU's fabric info (the daemon's test seam).
using FabricReader = std::function<std::vector<nvml::DeviceFabric>()>;

// One entry per GPU NVML lists, through the versioned fabric call (the v1
// call has no health fields). A failing device count is one entry with an
// empty uuid carrying that error; a GPU whose UUID cannot be read is named
// "GPU <index>".
std::vector<nvml::DeviceFabric> ReadNodeFabric(const nvml::Library& library);

using nvml::DescribeHealthMask;

struct FabricHealth {
  // One line per GPU: "GPU-... (healthSummary Unhealthy, healthMask 0x10: route unhealthy)".
  std::vector<std::string> unhealthy;
  std::vector<std::string> limited;     // the same for LIMITED_CAPACITY
  std::vector<std::string> unreadable;  // "GPU-...: <error>"

  bool healthy() const { return unhealthy.empty(); }
  // For the entry's message when not healthy: "NVLink fabric unhealthy: <GPUs>".
  std::string Message() const;
  friend bool operator==(const FabricHealth&, const FabricHealth&) = default;
};

// The verdict over the node's GPUs, by the rules above.
FabricHealth JudgeFabricHealth(const std::vector<nvml::DeviceFabric>& gpus);

}  // namespace nvdra::computedomain
