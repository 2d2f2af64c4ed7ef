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
// Defines: PartitionTable, FabricPartitions (what the device state uses),
// FmFabricPartitions (over libnvfm), FabricManagerAddressFromEnv,
// NodeHasNvSwitchFabric.
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
  // The partitions FM has active now (asked live: FM may have restarted).
  virtual common::StatusOr<std::set<std::uint32_t>> ActiveNow() = 0;
};

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
  common::StatusOr<std::set<std::uint32_t>> ActiveNow() override;

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
