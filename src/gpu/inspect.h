#pragma once

// The node as the GPU plugin would see and publish it, as one JSON document,
// without any cluster: the diagnostic behind `nvidia-dra-inspect` and the
// real-GPU check (scripts/check-real-gpu).
//
// Ownership: loads NVML for the duration of the call. Thread-safety: as NVML.

#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "gpu/discovery.h"
#include "gpu/published_devices.h"
#include "nvml/fabric.h"

namespace nvdra::gpu {

struct InspectOptions {
  std::filesystem::path driver_root = "/";
  std::optional<std::filesystem::path> nvml_library;  // overrides the search
  DiscoveryOptions discovery;
  PublishOptions publish;
  nvml::CliqueOptions clique;
};

// {"nvml": {library, driverVersion, nvmlVersion, cudaDriverVersion,
//  missingFunctions}, "cliqueId" or "cliqueError", "gpus": [...inventory...],
//  "resourceSlice": {"driver", "devices": [...], "sharedCounters": [...]}}.
// Errors: NVML cannot be loaded or a GPU cannot be read.
common::StatusOr<nlohmann::json> InspectNode(const InspectOptions& options);

// The inventory of one GPU as JSON (the "gpus" entries above).
nlohmann::json GpuInfoToJson(const GpuInfo& gpu);

}  // namespace nvdra::gpu
