#include "gpu/fabric_partitions.h"

#include <cstdlib>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/log.h"

namespace nvdra::gpu {

using common::Status;
using common::StatusOr;

namespace {

std::set<std::uint32_t> ModulesOf(const fabricmanager::Partition& partition) {
  std::set<std::uint32_t> modules;
  for (const fabricmanager::PartitionGpu& gpu : partition.gpus) modules.insert(gpu.physical_id);
  return modules;
}

}  // namespace

StatusOr<PartitionTable> PartitionTable::From(std::vector<fabricmanager::Partition> partitions) {
  std::set<std::uint32_t> ids;
  for (const fabricmanager::Partition& partition : partitions) {
    if (!ids.insert(partition.id).second) {
      return common::FailedPreconditionError(
          fmt::format("Fabric Manager lists partition {} twice; check FM's partition configuration", partition.id));
    }
    if (partition.gpus.empty()) {
      return common::FailedPreconditionError(fmt::format("Fabric Manager partition {} has no GPU", partition.id));
    }
    if (ModulesOf(partition).size() != partition.gpus.size()) {
      return common::FailedPreconditionError(
          fmt::format("Fabric Manager partition {} lists a GPU module id twice", partition.id));
    }
  }
  PartitionTable table;
  table.partitions_ = std::move(partitions);
  return table;
}

StatusOr<std::map<std::size_t, std::uint32_t>> PartitionTable::BySize(std::uint32_t module) const {
  std::map<std::size_t, std::uint32_t> by_size;
  for (const fabricmanager::Partition& partition : partitions_) {
    if (!ModulesOf(partition).contains(module)) continue;
    const std::size_t size = partition.gpus.size();
    if (auto [it, added] = by_size.emplace(size, partition.id); !added) {
      return common::FailedPreconditionError(fmt::format(
          "GPU module {} is in two Fabric Manager partitions of {} GPUs ({} and {}): attribute partition{} would be "
          "ambiguous",
          module, size, it->second, partition.id, size));
    }
  }
  return by_size;
}

std::optional<std::uint32_t> PartitionTable::Exactly(const std::set<std::uint32_t>& modules) const {
  for (const fabricmanager::Partition& partition : partitions_) {
    if (ModulesOf(partition) == modules) return partition.id;
  }
  return std::nullopt;
}

fabricmanager::Address FabricManagerAddressFromEnv(const std::filesystem::path& container_driver_root) {
  if (const char* address = std::getenv("NVIDIA_FABRICMANAGER_ADDRESS"); address != nullptr) {
    return fabricmanager::Address::Tcp(*address == '\0' ? "127.0.0.1" : address);
  }
  if (const char* socket = std::getenv("NVIDIA_FABRICMANAGER_UNIX_SOCKET"); socket != nullptr && *socket != '\0') {
    return fabricmanager::Address::UnixSocket(socket);
  }
  return fabricmanager::Address::UnixSocket((container_driver_root / "run/nvidia-fabricmanager/socket").string());
}

bool NodeHasNvSwitchFabric(const std::filesystem::path& host_root) {
  std::error_code ec;
  const std::filesystem::path devices = host_root / "proc/driver/nvidia-nvswitch/devices";
  return std::filesystem::is_directory(devices, ec) && !std::filesystem::is_empty(devices, ec);
}

StatusOr<std::unique_ptr<FmFabricPartitions>> FmFabricPartitions::Open(const fabricmanager::LibraryOptions& library,
                                                                      fabricmanager::Address address,
                                                                      std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(std::unique_ptr<fabricmanager::Library> fm, fabricmanager::Library::Open(library));
  ASSIGN_OR_RETURN(const fabricmanager::Connection connection, fm->Connect(address, timeout));
  ASSIGN_OR_RETURN(std::vector<fabricmanager::Partition> partitions, connection.SupportedPartitions());
  ASSIGN_OR_RETURN(PartitionTable table, PartitionTable::From(std::move(partitions)));
  return std::unique_ptr<FmFabricPartitions>(
      new FmFabricPartitions(std::move(fm), std::move(address), timeout, std::move(table)));
}

Status FmFabricPartitions::Activate(std::uint32_t id) {
  ASSIGN_OR_RETURN(const fabricmanager::Connection connection, library_->Connect(address_, timeout_));
  RETURN_IF_ERROR(connection.Activate(id));
  LOG_INFO(1, "Fabric Manager partition active", {{"partition", id}, {"address", address_.ToString()}});
  return common::OkStatus();
}

Status FmFabricPartitions::Deactivate(std::uint32_t id) {
  ASSIGN_OR_RETURN(const fabricmanager::Connection connection, library_->Connect(address_, timeout_));
  RETURN_IF_ERROR(connection.Deactivate(id));
  LOG_INFO(1, "Fabric Manager partition inactive", {{"partition", id}, {"address", address_.ToString()}});
  return common::OkStatus();
}

StatusOr<std::set<std::uint32_t>> FmFabricPartitions::ActiveNow() {
  ASSIGN_OR_RETURN(const fabricmanager::Connection connection, library_->Connect(address_, timeout_));
  ASSIGN_OR_RETURN(const std::vector<fabricmanager::Partition> partitions, connection.SupportedPartitions());
  std::set<std::uint32_t> active;
  for (const fabricmanager::Partition& partition : partitions) {
    if (partition.is_active) active.insert(partition.id);
  }
  return active;
}

}  // namespace nvdra::gpu
