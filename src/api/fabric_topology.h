#pragma once

// Seed 002's NVLink-topology-aware Fabric Manager API under structured
// parameters (gate FabricTopologySupport): `fabricTopologyConfig` and the
// older `fabricPartitionID` of a GpuConfig or VfioDeviceConfig, their
// validation (shared by the webhook and the GPU plugin, through
// ValidateConfig) and their typed form for Prepare. docs/fabric-manager.md
// gives the meaning of each field; in short:
//
//   - The scheduler picks the GPUs (a claim asks for GPUs of one partition
//     with matchAttribute gpu.nvidia.com/partition<N>); Prepare checks that
//     they are what the config says and acts on Fabric Manager.
//   - strategy Auto: the GPUs under the config must be exactly one partition
//     of partitionSize GPUs (the allocation's size when left out) that meets
//     minBandwidth and maxLatency; Manual: exactly the named partitions;
//     Disabled: no fabric action.
//   - virtualizationModel BareMetal / SharedNVSwitch: the driver activates
//     the partitions for the tenant and deactivates them at Unprepare;
//     FullPassthrough (VFIO GPUs only): checked, not activated, the guest
//     manages its partitions; VGPU: no fabric constraint at all.
//   - fabricPartitionID: N is strategy Manual with partitionIDs [N].
//
// Thread-safety: values and pure functions.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/feature_gates.h"
#include "common/status.h"

namespace nvdra::api {

enum class FabricStrategy { kAuto, kManual, kDisabled };
enum class VirtualizationModel { kBareMetal, kFullPassthrough, kSharedNVSwitch, kVGPU };
std::string_view FabricStrategyName(FabricStrategy strategy);
std::string_view VirtualizationModelName(VirtualizationModel model);

struct FabricTopology {
  FabricStrategy strategy = FabricStrategy::kAuto;
  std::optional<int> partition_size;  // 2, 4 or 8; nullopt: the allocation's GPU count
  VirtualizationModel model = VirtualizationModel::kBareMetal;
  double min_bandwidth_gbps = 0;  // 0: no bound
  double max_latency_ms = 0;      // 0: no bound
  std::vector<std::uint32_t> partition_ids;  // Manual only
  // Where it came from, for messages: "...fabricTopologyConfig" or
  // "...fabricPartitionID".
  std::string field;
  friend bool operator==(const FabricTopology&, const FabricTopology&) = default;
};

// Checks the fabric fields of a decoded GpuConfig (`vfio` false) or
// VfioDeviceConfig (`vfio` true) object; OK when it has none.
// kFailedPrecondition when the gate is off; kInvalidArgument naming the
// field otherwise.
common::Status ValidateFabricTopology(const nlohmann::json& object, bool vfio, std::string_view where,
                                      const common::FeatureGates& gates);

// Fields a valid config sets that its strategy or model ignores (the seed's
// example has partitionIDs under Auto): one warning each, for the admission
// answer.
std::vector<std::string> FabricTopologyWarnings(const nlohmann::json& object, std::string_view where);

// The typed form of a config that passed ValidateFabricTopology; nullopt
// when it has no fabric fields.
std::optional<FabricTopology> FabricTopologyOf(const nlohmann::json& object, std::string_view where);

}  // namespace nvdra::api
