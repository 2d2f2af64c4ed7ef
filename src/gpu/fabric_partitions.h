#pragma once

// Fabric Manager partitions for the GPU plugin (gate
// FabricManagerPartitioning), as upstream's pkg/fabricmanager manager:
// shared-NVSwitch multitenancy (FM's FABRIC_MODE=1), where the GPUs of a claim
// talk over NVLink only once FM has activated the partition made of exactly
// those GPUs.
//
//   - Publishing: each GPU (full and VFIO devices) carries `gpuModuleID` and,
//     per partition size N holding it, `partition<N>` = that partition's id,
//     so a claim asks the scheduler for GPUs of one partition with
//     `matchAttribute: gpu.nvidia.com/partition<N>`.
//   - Prepare activates the partition whose GPU module ids equal the claim's
//     full and VFIO GPUs exactly (any other set fails); Unprepare deactivates
//     it unless another prepared claim still holds one of its GPUs. Both are
//     idempotent, so a retried or crashed Prepare converges.
//   - Each reconcile (at start-up and every 10 minutes) makes FM's active set
//     equal the partitions of the completed claims: it deactivates the rest
//     (a Prepare that crashed after activating) and activates what FM lost
//     (an FM restart). The plugin owns the node's partitions in this mode.
//
// Seed 002's fabricTopologyConfig (gate FabricTopologySupport,
// api/fabric_topology.h) is planned here too: PlanFabricTopology turns a
// config and the GPUs the scheduler gave into the partitions to activate,
// checking them against FM's live NVLink figures (PartitionFiguresOf: the
// model docs/fabric-manager.md states).
//
// Defines: PartitionTable, FabricPartitions (what the device state uses),
// FmFabricPartitions (over libnvfm), FabricManagerAddressFromEnv,
// NodeHasNvSwitchFabric, PartitionFigures, PartitionFiguresOf, FabricPlan,
// PlanFabricTopology.
//
// Ownership: FmFabricPartitions owns its Library and connects per call, as
// upstream (FM drops connections when it restarts). Thread-safety:
// PartitionTable is a value; FmFabricPartitions is thread-safe.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api/fabric_topology.h"
#include "common/status.h"
#include "fabricmanager/library.h"

namespace nvdra::gpu {

// The node's partitions as FM listed them when the plugin started.
class PartitionTable {
 public:
  // kFailedPrecondition when ids repeat, a partition has no GPU, or lists a
  // module id twice (FM and the node disagree: nothing can be matched).
  static common::StatusOr<PartitionTable> From(std::vector<fabricmanager::Partition> partitions);

  // Partition size -> id, for the partitions holding `module`.
  // kFailedPrecondition when two partitions of one size hold it (the
  // `partition<N>` attribute would be ambiguous).
  [[nodiscard]] common::StatusOr<std::map<std::size_t, std::uint32_t>> BySize(std::uint32_t module) const;
  // The partition whose module ids are exactly `modules`.
  [[nodiscard]] std::optional<std::uint32_t> Exactly(const std::set<std::uint32_t>& modules) const;
  [[nodiscard]] const std::vector<fabricmanager::Partition>& partitions() const { return partitions_; }

 private:
  std::vector<fabricmanager::Partition> partitions_;
};

class FabricPartitions {
 public:
  virtual ~FabricPartitions() = default;
  [[nodiscard]] virtual const PartitionTable& table() const = 0;
  // Idempotent: an active partition activates, an inactive one deactivates,
  // without error.
  virtual common::Status Activate(std::uint32_t id) = 0;
  virtual common::Status Deactivate(std::uint32_t id) = 0;
  // FM's partitions now, with their is_active and NVLink figures (asked
  // live: FM may have restarted, NVLinks may have failed).
  virtual common::StatusOr<std::vector<fabricmanager::Partition>> ListNow() = 0;
  // The ids of ListNow() that are active.
  common::StatusOr<std::set<std::uint32_t>> ActiveNow();
};

// What a partition's NVLinks give, by the model docs/fabric-manager.md
// states: bandwidth is its weakest GPU's NVLinks available in the partition
// x their line rate, both directions (the way NVIDIA quotes "900 GB/s" for
// an H100), in GB/s; latency is one NVSwitch hop between any two of its
// GPUs, kNvSwitchHopLatencyMs, when every GPU has an NVLink, and infinite
// (no NVLink path) when one has none.
inline constexpr double kNvSwitchHopLatencyMs = 0.001;
struct PartitionFigures {
  double bandwidth_gbps = 0;
  double latency_ms = 0;
  std::uint32_t weakest_links = 0;    // NVLinks of the GPU with fewest
  std::uint32_t line_rate_mbps = 0;   // per link and direction
};
PartitionFigures PartitionFiguresOf(const fabricmanager::Partition& partition);

// What Prepare does for a fabricTopologyConfig.
struct FabricPlan {
  std::vector<std::uint32_t> activate;  // partitions the driver activates (and later deactivates)
  // Why nothing is activated where the config still applies (Disabled,
  // VGPU, FullPassthrough): said in an Event on the claim. Empty otherwise.
  std::string note;
};

// Plans `config` for the whole GPUs with module ids `modules` (those under
// the config in the allocation), against FM's `partitions` (ListNow()).
// kFailedPrecondition naming config.field and the figures when the GPUs are
// not the partition(s) the config says or a partition misses a bound.
// `check_figures` false skips the bandwidth and latency bounds (to find
// what a crashed Prepare may have activated).
common::StatusOr<FabricPlan> PlanFabricTopology(const api::FabricTopology& config,
                                                const std::set<std::uint32_t>& modules,
                                                const std::vector<fabricmanager::Partition>& partitions,
                                                bool check_figures = true);

// Where upstream's plugin reaches FM: TCP to $NVIDIA_FABRICMANAGER_ADDRESS
// when set (127.0.0.1 when set but empty), else the Unix socket
// $NVIDIA_FABRICMANAGER_UNIX_SOCKET, by default
// <container driver root>/run/nvidia-fabricmanager/socket.
fabricmanager::Address FabricManagerAddressFromEnv(const std::filesystem::path& container_driver_root);

// Whether the node has an NVSwitch fabric FM manages, as upstream decides:
// <host root>/proc/driver/nvidia-nvswitch/devices is a non-empty folder.
bool NodeHasNvSwitchFabric(const std::filesystem::path& host_root);

class FmFabricPartitions final : public FabricPartitions {
 public:
  // Loads libnvfm from the driver root, connects once and reads the
  // partition table. Errors name the library or FM's address.
  static common::StatusOr<std::unique_ptr<FmFabricPartitions>> Open(const fabricmanager::LibraryOptions& library,
                                                                   fabricmanager::Address address,
                                                                   std::chrono::milliseconds timeout);
  const PartitionTable& table() const override { return table_; }
  common::Status Activate(std::uint32_t id) override;
  common::Status Deactivate(std::uint32_t id) override;
  common::StatusOr<std::vector<fabricmanager::Partition>> ListNow() override;

 private:
  FmFabricPartitions(std::unique_ptr<fabricmanager::Library> library, fabricmanager::Address address,
                     std::chrono::milliseconds timeout, PartitionTable table)
      : library_(std::move(library)), address_(std::move(address)), timeout_(timeout), table_(std::move(table)) {}

  std::unique_ptr<fabricmanager::Library> library_;
  const fabricmanager::Address address_;
  const std::chrono::milliseconds timeout_;
  const PartitionTable table_;
};

}  // namespace nvdra::gpu
