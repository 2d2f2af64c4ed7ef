#include "gpu/fabric_partitions.h"

#include <cmath>
#include <cstdlib>
#include <limits>
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

PartitionFigures PartitionFiguresOf(const fabricmanager::Partition& partition) {
  PartitionFigures figures;
  bool first = true;
  for (const fabricmanager::PartitionGpu& gpu : partition.gpus) {
    if (first || gpu.num_nvlinks_available < figures.weakest_links) {
      figures.weakest_links = gpu.num_nvlinks_available;
      figures.line_rate_mbps = gpu.nvlink_line_rate_mbps;
    }
    first = false;
  }
  figures.bandwidth_gbps = 2.0 * figures.weakest_links * figures.line_rate_mbps / 1000.0;
  figures.latency_ms =
      figures.weakest_links == 0 ? std::numeric_limits<double>::infinity() : kNvSwitchHopLatencyMs;
  return figures;
}

namespace {

std::string DescribeFigures(const fabricmanager::Partition& partition, const PartitionFigures& figures) {
  return fmt::format("partition {} (GPU modules {}) gives {:.1f} GB/s ({} NVLinks x {} MB/s x 2 directions on its "
                     "weakest GPU) and {} ms",
                     partition.id, fmt::join(ModulesOf(partition), ","), figures.bandwidth_gbps, figures.weakest_links,
                     figures.line_rate_mbps,
                     std::isinf(figures.latency_ms) ? std::string("no NVLink path, so no latency bound") 
                                                    : fmt::format("{}", figures.latency_ms));
}

Status CheckFigures(const api::FabricTopology& config, const fabricmanager::Partition& partition) {
  const PartitionFigures figures = PartitionFiguresOf(partition);
  if (config.min_bandwidth_gbps > 0 && figures.bandwidth_gbps < config.min_bandwidth_gbps) {
    return common::FailedPreconditionError(fmt::format(
        "{}.minBandwidth: {} GB/s cannot be met: {}; lower minBandwidth, or see kubectl describe node for GPUs "
        "with failed NVLinks",
        config.field, config.min_bandwidth_gbps, DescribeFigures(partition, figures)));
  }
  if (config.max_latency_ms > 0 && figures.latency_ms > config.max_latency_ms) {
    return common::FailedPreconditionError(fmt::format(
        "{}.maxLatency: {} ms cannot be met: {} (the driver's model: one NVSwitch hop, {} ms); raise maxLatency",
        config.field, config.max_latency_ms, DescribeFigures(partition, figures), kNvSwitchHopLatencyMs));
  }
  return common::OkStatus();
}

}  // namespace

StatusOr<FabricPlan> PlanFabricTopology(const api::FabricTopology& config, const std::set<std::uint32_t>& modules,
                                        const std::vector<fabricmanager::Partition>& partitions, bool check_figures) {
  using api::FabricStrategy;
  using api::VirtualizationModel;
  FabricPlan plan;
  if (config.strategy == FabricStrategy::kDisabled) {
    plan.note = fmt::format("{}: strategy Disabled, no Fabric Manager action for GPU modules {}", config.field,
                            fmt::join(modules, ","));
    return plan;
  }
  if (config.model == VirtualizationModel::kVGPU) {
    plan.note = fmt::format("{}: virtualizationModel VGPU, no fabric constraint applied to GPU modules {} (vGPU "
                            "guests do not use NVSwitch partitions)",
                            config.field, fmt::join(modules, ","));
    return plan;
  }
  std::vector<const fabricmanager::Partition*> chosen;
  if (config.strategy == FabricStrategy::kAuto) {
    const std::size_t size = config.partition_size ? static_cast<std::size_t>(*config.partition_size) : modules.size();
    if (modules.size() != size) {
      return common::FailedPreconditionError(fmt::format(
          "{}.partitionSize: {} GPUs, but {} GPU(s) were allocated under this config; request {} GPUs (count: {}) "
          "with a constraint matchAttribute: gpu.nvidia.com/partition{}",
          config.field, size, modules.size(), size, size, size));
    }
    if (size != 2 && size != 4 && size != 8) {
      return common::FailedPreconditionError(fmt::format(
          "{}: {} GPU(s) were allocated, which is no fabric partition size; request 2, 4 or 8 GPUs with a "
          "constraint matchAttribute: gpu.nvidia.com/partition<count>, or use strategy Disabled",
          config.field, modules.size()));
    }
    for (const fabricmanager::Partition& partition : partitions) {
      if (ModulesOf(partition) == modules) chosen.push_back(&partition);
    }
    if (chosen.empty()) {
      return common::FailedPreconditionError(fmt::format(
          "{}: the allocated GPUs (modules {}) are not one Fabric Manager partition of {}; ask the scheduler for "
          "GPUs of one partition with a constraint matchAttribute: gpu.nvidia.com/partition{}",
          config.field, fmt::join(modules, ","), size, size));
    }
    chosen.resize(1);
  } else {
    std::set<std::uint32_t> covered;
    for (std::uint32_t id : config.partition_ids) {
      const fabricmanager::Partition* found = nullptr;
      for (const fabricmanager::Partition& partition : partitions) {
        if (partition.id == id) found = &partition;
      }
      if (found == nullptr) {
        std::vector<std::uint32_t> ids;
        for (const fabricmanager::Partition& partition : partitions) ids.push_back(partition.id);
        return common::FailedPreconditionError(fmt::format(
            "{}: Fabric Manager has no partition {} on this node (its partitions: {}); use an id from the GPUs' "
            "gpu.nvidia.com/partition<N> attributes",
            config.field, id, fmt::join(ids, ",")));
      }
      if (config.partition_size && found->gpus.size() != static_cast<std::size_t>(*config.partition_size)) {
        return common::FailedPreconditionError(fmt::format(
            "{}: partition {} has {} GPUs, not partitionSize {}", config.field, id, found->gpus.size(),
            *config.partition_size));
      }
      for (std::uint32_t module : ModulesOf(*found)) {
        if (!covered.insert(module).second) {
          return common::FailedPreconditionError(fmt::format(
              "{}: partitions {} overlap on GPU module {}; Fabric Manager activates only disjoint partitions",
              config.field, fmt::join(config.partition_ids, ","), module));
        }
      }
      chosen.push_back(found);
    }
    if (covered != modules) {
      return common::FailedPreconditionError(fmt::format(
          "{}: partitions {} hold GPU modules {}, but the allocated GPUs are modules {}; they must be the same: ask "
          "the scheduler for exactly those GPUs (matchAttribute: gpu.nvidia.com/partition<N>), or use strategy Auto",
          config.field, fmt::join(config.partition_ids, ","), fmt::join(covered, ","), fmt::join(modules, ",")));
    }
  }
  for (const fabricmanager::Partition* partition : chosen) {
    if (check_figures) RETURN_IF_ERROR(CheckFigures(config, *partition));
  }
  std::vector<std::uint32_t> ids;
  for (const fabricmanager::Partition* partition : chosen) ids.push_back(partition->id);
  if (config.model == VirtualizationModel::kFullPassthrough) {
    plan.note = fmt::format("{}: virtualizationModel FullPassthrough, the guest manages partition(s) {}; the driver "
                            "checked them and activates nothing",
                            config.field, fmt::join(ids, ","));
    return plan;
  }
  plan.activate = std::move(ids);
  return plan;
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

StatusOr<std::vector<fabricmanager::Partition>> FmFabricPartitions::ListNow() {
  ASSIGN_OR_RETURN(const fabricmanager::Connection connection, library_->Connect(address_, timeout_));
  return connection.SupportedPartitions();
}

StatusOr<std::set<std::uint32_t>> FabricPartitions::ActiveNow() {
  ASSIGN_OR_RETURN(const std::vector<fabricmanager::Partition> partitions, ListNow());
  std::set<std::uint32_t> active;
  for (const fabricmanager::Partition& partition : partitions) {
    if (partition.is_active) active.insert(partition.id);
  }
  return active;
}

}  // namespace nvdra::gpu
