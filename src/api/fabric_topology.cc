#include "api/fabric_topology.h"

#include <array>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "common/json_fields.h"

namespace nvdra::api {

using common::JsonMember;
using common::JsonString;
using common::Status;
using nlohmann::json;

namespace {

constexpr std::array<std::pair<std::string_view, FabricStrategy>, 3> kStrategies{{
    {"Auto", FabricStrategy::kAuto},
    {"Manual", FabricStrategy::kManual},
    {"Disabled", FabricStrategy::kDisabled},
}};
constexpr std::array<std::pair<std::string_view, VirtualizationModel>, 4> kModels{{
    {"BareMetal", VirtualizationModel::kBareMetal},
    {"FullPassthrough", VirtualizationModel::kFullPassthrough},
    {"SharedNVSwitch", VirtualizationModel::kSharedNVSwitch},
    {"VGPU", VirtualizationModel::kVGPU},
}};

template <typename Enum, std::size_t N>
std::optional<Enum> Lookup(const std::array<std::pair<std::string_view, Enum>, N>& table, std::string_view name) {
  for (const auto& [known, value] : table) {
    if (known == name) return value;
  }
  return std::nullopt;
}

template <typename Enum, std::size_t N>
std::string_view NameOf(const std::array<std::pair<std::string_view, Enum>, N>& table, Enum value) {
  for (const auto& [name, known] : table) {
    if (known == value) return name;
  }
  return "?";
}

bool Present(const json& object, std::string_view key) { return !JsonMember(object, key).is_null(); }

// "N" or "partition-N", N a Fabric Manager partition id (what the
// partition<size> attribute of the GPUs shows); or a JSON integer N.
std::optional<std::uint32_t> ParsePartitionId(const json& value) {
  if (value.is_number_integer()) {
    const auto id = value.get<std::int64_t>();
    if (id >= 0 && id <= 0xffffffffLL) return static_cast<std::uint32_t>(id);
    return std::nullopt;
  }
  if (!value.is_string()) return std::nullopt;
  std::string_view text = value.get_ref<const std::string&>();
  if (text.starts_with("partition-")) text.remove_prefix(10);
  if (text.empty() || text.size() > 10) return std::nullopt;
  std::uint64_t id = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    id = id * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (id > 0xffffffffULL) return std::nullopt;
  return static_cast<std::uint32_t>(id);
}

std::string Quoted(const json& value) {
  const std::string text = value.dump();
  return text.size() > 64 ? text.substr(0, 64) + "..." : text;
}

Status CheckBound(const json& config, std::string_view key, std::string_view unit, const std::string& where) {
  const json& value = JsonMember(config, key);
  if (value.is_null()) return common::OkStatus();
  const double number = value.get<double>();
  if (!std::isfinite(number) || number < 0) {
    return common::InvalidArgumentError(fmt::format(
        "{}.{}: {} is not a bound; give a finite number of {} from 0 up (0 or left out: no bound)", where, key,
        Quoted(value), unit));
  }
  return common::OkStatus();
}

constexpr std::string_view kGateFix =
    "requires the FabricTopologySupport feature gate: set FABRIC_TOPOLOGY_SUPPORT=true on the driver or the chart "
    "value featureGates.FabricTopologySupport=true (and, with fabricTopologySupport.nodeLabel, label the node), or "
    "leave the field out";

}  // namespace

std::string_view FabricStrategyName(FabricStrategy strategy) { return NameOf(kStrategies, strategy); }
std::string_view VirtualizationModelName(VirtualizationModel model) { return NameOf(kModels, model); }

Status ValidateFabricTopology(const json& object, bool vfio, std::string_view where,
                              const common::FeatureGates& gates) {
  const bool has_config = Present(object, "fabricTopologyConfig");
  const bool has_id = Present(object, "fabricPartitionID");
  if (!has_config && !has_id) return common::OkStatus();
  const std::string field = fmt::format("{}.{}", where, has_config ? "fabricTopologyConfig" : "fabricPartitionID");
  if (!gates.Enabled(common::kFabricTopologySupport)) {
    return common::FailedPreconditionError(fmt::format("{}: {}", field, kGateFix));
  }
  if (has_config && has_id) {
    return common::InvalidArgumentError(fmt::format(
        "{}.fabricPartitionID: set either fabricPartitionID or fabricTopologyConfig, not both (fabricPartitionID: N "
        "is fabricTopologyConfig {{strategy: Manual, partitionIDs: [\"N\"]}})",
        where));
  }
  if (has_id) {
    const json& id = JsonMember(object, "fabricPartitionID");
    if (!ParsePartitionId(id)) {
      return common::InvalidArgumentError(fmt::format(
          "{}: {} is not a Fabric Manager partition id; give the id as the GPUs' gpu.nvidia.com/partition<N> "
          "attribute shows it, e.g. 3 or \"partition-3\"",
          field, Quoted(id)));
    }
    return common::OkStatus();
  }
  const json& config = JsonMember(object, "fabricTopologyConfig");
  const std::string strategy_name = JsonString(config, "strategy");
  const std::optional<FabricStrategy> strategy =
      strategy_name.empty() ? FabricStrategy::kAuto : Lookup(kStrategies, strategy_name);
  if (!strategy) {
    return common::InvalidArgumentError(fmt::format(
        "{}.strategy: unknown strategy \"{}\"; use Auto, Manual or Disabled", field, strategy_name.substr(0, 64)));
  }
  const std::string model_name = JsonString(config, "virtualizationModel");
  const std::optional<VirtualizationModel> model = model_name.empty() ? std::optional(VirtualizationModel::kBareMetal)
                                                                      : Lookup(kModels, model_name);
  if (!model) {
    return common::InvalidArgumentError(fmt::format(
        "{}.virtualizationModel: unknown model \"{}\"; use BareMetal, FullPassthrough, SharedNVSwitch or VGPU",
        field, model_name.substr(0, 64)));
  }
  if (*model == VirtualizationModel::kFullPassthrough && !vfio) {
    return common::InvalidArgumentError(fmt::format(
        "{}.virtualizationModel: FullPassthrough hands the GPUs to a VM with vfio-pci, which a GpuConfig's GPUs are "
        "not: put this fabricTopologyConfig in a VfioDeviceConfig for a request of DeviceClass vfio.gpu.nvidia.com, "
        "or use BareMetal",
        field));
  }
  if (const json& size = JsonMember(config, "partitionSize"); !size.is_null()) {
    const auto value = size.get<std::int64_t>();
    if (value != 2 && value != 4 && value != 8) {
      return common::InvalidArgumentError(fmt::format(
          "{}.partitionSize: {} GPUs is not a partition size; use 2, 4 or 8 (or leave it out for the number of GPUs "
          "allocated)",
          field, value));
    }
  }
  RETURN_IF_ERROR(CheckBound(config, "minBandwidth", "GB/s", field));
  RETURN_IF_ERROR(CheckBound(config, "maxLatency", "milliseconds", field));
  const json& ids = JsonMember(config, "partitionIDs");
  for (std::size_t i = 0; ids.is_array() && i < ids.size(); ++i) {
    if (!ParsePartitionId(ids[i])) {
      return common::InvalidArgumentError(fmt::format(
          "{}.partitionIDs[{}]: {} is not a Fabric Manager partition id; write it as the GPUs' "
          "gpu.nvidia.com/partition<N> attribute shows it, e.g. \"3\" or \"partition-3\"",
          field, i, Quoted(ids[i])));
    }
  }
  if (*strategy == FabricStrategy::kManual) {
    if (!ids.is_array() || ids.empty()) {
      return common::InvalidArgumentError(fmt::format(
          "{}.partitionIDs: strategy Manual needs the partitions to activate; list their ids (e.g. [\"3\"]), or use "
          "strategy Auto",
          field));
    }
    if (*model == VirtualizationModel::kVGPU) {
      return common::InvalidArgumentError(fmt::format(
          "{}.virtualizationModel: VGPU applies no fabric constraint, so there is nothing for strategy Manual to "
          "activate; use strategy Disabled with VGPU, or another model with Manual",
          field));
    }
  }
  return common::OkStatus();
}

std::vector<std::string> FabricTopologyWarnings(const json& object, std::string_view where) {
  std::vector<std::string> warnings;
  const json& config = JsonMember(object, "fabricTopologyConfig");
  if (!config.is_object()) return warnings;
  const std::string field = fmt::format("{}.fabricTopologyConfig", where);
  const std::string strategy = JsonString(config, "strategy");
  const bool manual = strategy == "Manual";
  const bool disabled = strategy == "Disabled";
  const bool vgpu = JsonString(config, "virtualizationModel") == "VGPU";
  if (!manual && Present(config, "partitionIDs")) {
    warnings.push_back(fmt::format(
        "{}.partitionIDs: ignored with strategy {} (partitionIDs are for strategy Manual; Auto takes the partition "
        "the scheduler's GPUs form)",
        field, strategy.empty() ? "Auto" : strategy));
  }
  if (disabled || vgpu) {
    for (const char* key : {"partitionSize", "minBandwidth", "maxLatency"}) {
      if (!Present(config, key)) continue;
      warnings.push_back(fmt::format("{}.{}: ignored with {}, which applies no fabric constraint", field, key,
                                     disabled ? "strategy Disabled" : "virtualizationModel VGPU"));
    }
  }
  return warnings;
}

std::optional<FabricTopology> FabricTopologyOf(const json& object, std::string_view where) {
  if (const json& id = JsonMember(object, "fabricPartitionID"); !id.is_null()) {
    FabricTopology topology;
    topology.strategy = FabricStrategy::kManual;
    topology.partition_ids.push_back(ParsePartitionId(id).value_or(0));
    topology.field = fmt::format("{}.fabricPartitionID", where);
    return topology;
  }
  const json& config = JsonMember(object, "fabricTopologyConfig");
  if (config.is_null()) return std::nullopt;
  FabricTopology topology;
  topology.field = fmt::format("{}.fabricTopologyConfig", where);
  topology.strategy = Lookup(kStrategies, JsonString(config, "strategy")).value_or(FabricStrategy::kAuto);
  topology.model = Lookup(kModels, JsonString(config, "virtualizationModel")).value_or(VirtualizationModel::kBareMetal);
  if (const json& size = JsonMember(config, "partitionSize"); size.is_number_integer()) {
    topology.partition_size = size.get<int>();
  }
  if (const json& bandwidth = JsonMember(config, "minBandwidth"); bandwidth.is_number()) {
    topology.min_bandwidth_gbps = bandwidth.get<double>();
  }
  if (const json& latency = JsonMember(config, "maxLatency"); latency.is_number()) {
    topology.max_latency_ms = latency.get<double>();
  }
  if (topology.strategy == FabricStrategy::kManual) {
    const json& ids = JsonMember(config, "partitionIDs");
    for (std::size_t i = 0; ids.is_array() && i < ids.size(); ++i) {
      topology.partition_ids.push_back(ParsePartitionId(ids[i]).value_or(0));
    }
  }
  return topology;
}

}  // namespace nvdra::api
