#include "api/opaque_config.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "api/fabric_topology.h"
#include "common/json_fields.h"
#include "k8s/quantity.h"

namespace nvdra::api {

using common::JsonBool;
using common::JsonMember;
using common::JsonString;
using common::JsonStrings;
using common::Status;
using common::StatusOr;
using nlohmann::json;

namespace {

// The shape of a kind, for strict decoding: which fields exist and what JSON
// type each has. Deliberately a small table rather than a type per kind: the
// plugins act on few fields, and the webhook must judge exactly the same way.
struct Field {
  enum class Type { kString, kInt, kNumber, kBool, kObject, kStringMap, kQuantity, kStringList, kStringOrInt };
  Type type = Type::kString;
  std::map<std::string, Field> fields;  // for kObject
};

using Type = Field::Type;

Field Object(std::map<std::string, Field> fields) { return Field{Type::kObject, std::move(fields)}; }
Field Scalar(Type type) { return Field{type, {}}; }

Field MpsConfigShape() {
  return Object({{"defaultActiveThreadPercentage", Scalar(Type::kInt)},
                 {"defaultPinnedDeviceMemoryLimit", Scalar(Type::kQuantity)},
                 {"defaultPerDevicePinnedMemoryLimit", Scalar(Type::kStringMap)},
                 {"multiUser", Scalar(Type::kBool)}});
}

// Seed 002's fields (api/fabric_topology.h), on GpuConfig and
// VfioDeviceConfig.
void AddFabricTopologyShape(std::map<std::string, Field>& top) {
  top["fabricTopologyConfig"] = Object({{"strategy", Scalar(Type::kString)},
                                        {"partitionSize", Scalar(Type::kInt)},
                                        {"virtualizationModel", Scalar(Type::kString)},
                                        {"minBandwidth", Scalar(Type::kNumber)},
                                        {"maxLatency", Scalar(Type::kNumber)},
                                        {"partitionIDs", Scalar(Type::kStringList)}});
  top["fabricPartitionID"] = Scalar(Type::kStringOrInt);
}

Field KindShape(ConfigKind kind) {
  std::map<std::string, Field> top{{"apiVersion", Scalar(Type::kString)}, {"kind", Scalar(Type::kString)}};
  switch (kind) {
    case ConfigKind::kGpuConfig:
      top["sharing"] = Object({{"strategy", Scalar(Type::kString)},
                               {"timeSlicingConfig", Object({{"interval", Scalar(Type::kString)}})},
                               {"mpsConfig", MpsConfigShape()}});
      AddFabricTopologyShape(top);
      break;
    case ConfigKind::kMigDeviceConfig:
      top["sharing"] = Object({{"strategy", Scalar(Type::kString)}, {"mpsConfig", MpsConfigShape()}});
      break;
    case ConfigKind::kVfioDeviceConfig:
      top["iommu"] = Object({{"backendPolicy", Scalar(Type::kString)}, {"enableAPIDevice", Scalar(Type::kBool)}});
      AddFabricTopologyShape(top);
      break;
    case ConfigKind::kComputeDomainChannelConfig:
      top["domainID"] = Scalar(Type::kString);
      top["allocationMode"] = Scalar(Type::kString);
      break;
    case ConfigKind::kComputeDomainDaemonConfig:
      top["domainID"] = Scalar(Type::kString);
      break;
  }
  return Object(std::move(top));
}

std::string_view TypeName(Type type) {
  switch (type) {
    case Type::kString: return "a string";
    case Type::kInt: return "an integer";
    case Type::kNumber: return "a number";
    case Type::kStringList: return "a list of strings";
    case Type::kStringOrInt: return "a string or an integer";
    case Type::kBool: return "true or false";
    case Type::kObject: return "an object";
    case Type::kStringMap: return "an object of quantities";
    case Type::kQuantity: return "a quantity such as \"1Gi\"";
  }
  return "?";
}

// null is accepted for any field, as Go's decoder leaves the field unset.
Status CheckShape(const json& value, const Field& shape, const std::string& path) {
  if (value.is_null()) return common::OkStatus();
  bool ok = false;
  switch (shape.type) {
    case Type::kString: ok = value.is_string(); break;
    case Type::kInt: ok = value.is_number_integer(); break;
    case Type::kNumber: ok = value.is_number(); break;
    case Type::kStringOrInt: ok = value.is_string() || value.is_number_integer(); break;
    case Type::kStringList:
      ok = value.is_array() && std::all_of(value.begin(), value.end(), [](const json& item) { return item.is_string(); });
      break;
    case Type::kBool: ok = value.is_boolean(); break;
    case Type::kQuantity: ok = value.is_string() || value.is_number(); break;
    case Type::kObject:
    case Type::kStringMap: ok = value.is_object(); break;
  }
  if (!ok) {
    return common::InvalidArgumentError(
        fmt::format("{}: must be {}, not {}", path, TypeName(shape.type), value.type_name()));
  }
  if (shape.type == Type::kStringMap) {
    for (const auto& [key, item] : value.items()) {
      RETURN_IF_ERROR(CheckShape(item, Scalar(Type::kQuantity), fmt::format("{}.{}", path, key)));
    }
  }
  if (shape.type != Type::kObject) return common::OkStatus();
  for (const auto& [key, item] : value.items()) {
    auto field = shape.fields.find(key);
    if (field == shape.fields.end()) {
      std::string known;
      for (const auto& [name, unused] : shape.fields) known += (known.empty() ? "" : ", ") + name;
      // The key is the user's input: quoted in full only when short.
      constexpr std::size_t kKeyChars = 64;
      return common::InvalidArgumentError(
          fmt::format("{}.{}{}: unknown field (known fields here: {})", path, std::string_view(key).substr(0, kKeyChars),
                      key.size() > kKeyChars ? "..." : "", known));
    }
    RETURN_IF_ERROR(CheckShape(item, field->second, fmt::format("{}.{}", path, key)));
  }
  return common::OkStatus();
}

const std::map<std::string, ConfigKind, std::less<>>& KindsByName() {
  static const auto* kinds = new std::map<std::string, ConfigKind, std::less<>>{
      {"GpuConfig", ConfigKind::kGpuConfig},
      {"MigDeviceConfig", ConfigKind::kMigDeviceConfig},
      {"VfioDeviceConfig", ConfigKind::kVfioDeviceConfig},
      {"ComputeDomainChannelConfig", ConfigKind::kComputeDomainChannelConfig},
      {"ComputeDomainDaemonConfig", ConfigKind::kComputeDomainDaemonConfig},
  };
  return *kinds;
}

constexpr std::string_view kTimeSlicingStrategy = "TimeSlicing";
constexpr std::string_view kMpsStrategy = "MPS";

constexpr std::pair<std::string_view, TimeSliceInterval> kIntervals[] = {
    {"Default", TimeSliceInterval::kDefault},
    {"Short", TimeSliceInterval::kShort},
    {"Medium", TimeSliceInterval::kMedium},
    {"Long", TimeSliceInterval::kLong},
};

std::optional<TimeSliceInterval> ParseInterval(std::string_view name) {
  for (const auto& [known, interval] : kIntervals) {
    if (known == name) return interval;
  }
  return std::nullopt;
}

constexpr std::int64_t kMebibyte = 1024 * 1024;

// A pinned memory limit: a quantity of at least 1 MiB (nvidia-cuda-mps-control
// takes whole megabytes; upstream refuses smaller ones at Prepare).
StatusOr<std::int64_t> PinnedLimit(const json& value, std::string_view field) {
  const std::string text = value.is_string() ? value.get<std::string>() : value.dump();
  StatusOr<std::int64_t> bytes = k8s::ParseQuantityValue(text);
  if (!bytes.ok()) return common::InvalidArgumentError(fmt::format("{}: {}", field, bytes.status().message()));
  if (*bytes < kMebibyte) {
    return common::InvalidArgumentError(
        fmt::format("{}: {} is below the smallest limit MPS takes, 1Mi; give a value such as 512Mi or 10Gi",
                    field, text));
  }
  return bytes;
}

// upstream's MpsConfig.Validate (the percentage) plus the limits, which
// upstream only finds wrong at Prepare.
Status ValidateMps(const json& mps, const std::string& where) {
  if (!mps.is_object()) return common::OkStatus();
  if (const json& percentage = JsonMember(mps, "defaultActiveThreadPercentage"); percentage.is_number_integer()) {
    const auto value = percentage.get<std::int64_t>();
    if (value < 0 || value > 100) {
      return common::InvalidArgumentError(fmt::format(
          "{}.defaultActiveThreadPercentage: {} is out of range; give a percentage from 0 to 100", where, value));
    }
  }
  if (const json& limit = JsonMember(mps, "defaultPinnedDeviceMemoryLimit"); !limit.is_null()) {
    RETURN_IF_ERROR(PinnedLimit(limit, where + ".defaultPinnedDeviceMemoryLimit").status());
  }
  const json& per_device = JsonMember(mps, "defaultPerDevicePinnedMemoryLimit");
  if (per_device.is_object()) {
    for (const auto& [device, limit] : per_device.items()) {
      const std::string field = fmt::format("{}.defaultPerDevicePinnedMemoryLimit[{}]", where, device);
      if (device.empty()) {
        return common::InvalidArgumentError(
            field + ": empty device key; use a device UUID (GPU-... or MIG-...) or an index into the request's devices");
      }
      RETURN_IF_ERROR(PinnedLimit(limit, field).status());
    }
  }
  return common::OkStatus();
}

// upstream's GpuSharing/MigDeviceSharing Validate, plus what upstream only
// finds at Prepare (mpsConfig under TimeSlicing and the reverse) or not at
// all (timeSlicingConfig without an interval panics there).
Status ValidateSharing(const json& object, std::string_view where,
                       const common::FeatureGates& gates) {
  auto sharing = object.find("sharing");
  if (sharing == object.end() || sharing->is_null()) return common::OkStatus();
  const std::string strategy = JsonString(*sharing, "strategy");
  const std::string_view gate = strategy == kTimeSlicingStrategy ? common::kTimeSlicingSettings
                                : strategy == kMpsStrategy       ? common::kMPSSupport
                                                                 : std::string_view();
  if (gate.empty()) {
    return common::InvalidArgumentError(fmt::format(
        "{}.sharing.strategy: unknown strategy \"{}\"; use TimeSlicing or MPS, or leave sharing out for "
        "exclusive access",
        where, strategy));
  }
  if (!gates.Enabled(gate)) {
    return common::FailedPreconditionError(fmt::format(
        "{}.sharing.strategy: {} needs the feature gate {}: enable it on the driver (chart value "
        "featureGates.{}=true), or leave sharing out for exclusive access",
        where, strategy, gate, gate));
  }
  const bool has_time_slicing = sharing->contains("timeSlicingConfig") && !(*sharing)["timeSlicingConfig"].is_null();
  const bool has_mps = sharing->contains("mpsConfig") && !(*sharing)["mpsConfig"].is_null();
  if (strategy == kTimeSlicingStrategy) {
    if (has_mps) {
      return common::InvalidArgumentError(fmt::format(
          "{}.sharing.mpsConfig: only with strategy MPS; remove it or set strategy: MPS", where));
    }
    if (!has_time_slicing) return common::OkStatus();
    // Only GpuConfig's shape has timeSlicingConfig (decoding refused it on MIG).
    const json& time_slicing = (*sharing)["timeSlicingConfig"];
    if (!time_slicing.contains("interval") || time_slicing["interval"].is_null()) {
      return common::InvalidArgumentError(fmt::format(
          "{}.sharing.timeSlicingConfig.interval: must be set to Default, Short, Medium or Long (or leave "
          "timeSlicingConfig out for Default)",
          where));
    }
    const std::string interval = time_slicing["interval"].get<std::string>();
    if (!ParseInterval(interval)) {
      return common::InvalidArgumentError(fmt::format(
          "{}.sharing.timeSlicingConfig.interval: unknown interval \"{}\"; use Default, Short, Medium or Long",
          where, interval));
    }
    return common::OkStatus();
  }
  if (has_time_slicing) {
    return common::InvalidArgumentError(fmt::format(
        "{}.sharing.timeSlicingConfig: only with strategy TimeSlicing; remove it or set strategy: TimeSlicing",
        where));
  }
  return ValidateMps(JsonMember(*sharing, "mpsConfig"), fmt::format("{}.sharing.mpsConfig", where));
}

// A Kubernetes UID in RFC 4122 text form (8-4-4-4-12 hex digits), as the API
// server writes metadata.uid.
bool IsKubernetesUid(std::string_view text) {
  if (text.size() != 36) return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? text[i] != '-' : !std::isxdigit(static_cast<unsigned char>(text[i]))) return false;
  }
  return true;
}

// domainID names a ComputeDomain by UID; anything else (a name, a path)
// would only make the plugin wait for a domain that cannot exist.
Status ValidateDomainId(std::string_view domain_id, std::string_view where) {
  if (domain_id.empty()) {
    return common::InvalidArgumentError(fmt::format("{}.domainID: must be set to the ComputeDomain's UID", where));
  }
  if (!IsKubernetesUid(domain_id)) {
    return common::InvalidArgumentError(fmt::format(
        "{}.domainID: \"{}{}\" is not a UID; set it to the ComputeDomain's metadata.uid (kubectl get "
        "computedomain <name> -o jsonpath='{{.metadata.uid}}')",
        where, domain_id.substr(0, 64), domain_id.size() > 64 ? "..." : ""));
  }
  return common::OkStatus();
}

}  // namespace

std::string_view ConfigKindName(ConfigKind kind) {
  for (const auto& [name, k] : KindsByName()) {
    if (k == kind) return name;
  }
  return "unknown";
}

OpaqueConfig DefaultConfig(ConfigKind kind) {
  return OpaqueConfig{kind, json{{"apiVersion", kGroupVersion}, {"kind", ConfigKindName(kind)}}};
}

StatusOr<OpaqueConfig> DecodeOpaqueConfig(const json& parameters, std::string_view where) {
  if (!parameters.is_object()) {
    return common::InvalidArgumentError(
        fmt::format("{}: must be an object with apiVersion and kind, not {}", where, parameters.type_name()));
  }
  const std::string api_version = JsonString(parameters, "apiVersion");
  const std::string kind_name = JsonString(parameters, "kind");
  if (api_version != kGroupVersion) {
    return common::InvalidArgumentError(fmt::format(
        "{}.apiVersion: \"{}\" is not supported; use \"{}\"", where, api_version, kGroupVersion));
  }
  auto kind = KindsByName().find(kind_name);
  if (kind == KindsByName().end()) {
    return common::InvalidArgumentError(fmt::format(
        "{}.kind: unknown kind \"{}\"; one of GpuConfig, MigDeviceConfig, VfioDeviceConfig, "
        "ComputeDomainChannelConfig, ComputeDomainDaemonConfig",
        where, kind_name));
  }
  RETURN_IF_ERROR(CheckShape(parameters, KindShape(kind->second), std::string(where)));
  return OpaqueConfig{kind->second, parameters};
}

Status ValidateConfig(const OpaqueConfig& config, std::string_view where, const common::FeatureGates& gates) {
  const json& object = config.object;
  switch (config.kind) {
    case ConfigKind::kGpuConfig:
      RETURN_IF_ERROR(ValidateSharing(object, where, gates));
      return ValidateFabricTopology(object, /*vfio=*/false, where, gates);
    case ConfigKind::kMigDeviceConfig:
      return ValidateSharing(object, where, gates);
    case ConfigKind::kVfioDeviceConfig: {
      if (!gates.Enabled(common::kPassthroughSupport)) {
        return common::FailedPreconditionError(fmt::format(
            "{}: VfioDeviceConfig needs the feature gate {}: enable it on the driver (chart value "
            "featureGates.{}=true), or request a full GPU (DeviceClass gpu.nvidia.com) without it",
            where, common::kPassthroughSupport, common::kPassthroughSupport));
      }
      const std::string policy = JsonString(JsonMember(object, "iommu"), "backendPolicy");
      if (!policy.empty() && policy != "LegacyOnly" && policy != "PreferIommuFD") {
        return common::InvalidArgumentError(fmt::format(
            "{}.iommu.backendPolicy: \"{}\" is not one of LegacyOnly, PreferIommuFD", where, policy));
      }
      return ValidateFabricTopology(object, /*vfio=*/true, where, gates);
    }
    case ConfigKind::kComputeDomainChannelConfig: {
      RETURN_IF_ERROR(ValidateDomainId(JsonString(object, "domainID"), where));
      const std::string mode = JsonString(object, "allocationMode");
      if (!mode.empty() && mode != "Single" && mode != "All") {
        return common::InvalidArgumentError(
            fmt::format("{}.allocationMode: \"{}\" is not one of Single, All", where, mode));
      }
      return common::OkStatus();
    }
    case ConfigKind::kComputeDomainDaemonConfig:
      RETURN_IF_ERROR(ValidateDomainId(JsonString(object, "domainID"), where));
      return common::OkStatus();
  }
  return common::OkStatus();
}

StatusOr<std::vector<ConfiguredResults>> ResolveDeviceConfigs(
    const json& allocation_devices, std::string_view driver, const std::vector<ConfigKind>& defaults,
    const std::function<StatusOr<ConfigKind>(const std::string& device)>& kind_of_device) {
  struct Entry {
    std::vector<std::string> requests;
    OpaqueConfig config;
    std::string source;
  };
  std::vector<Entry> entries;
  for (ConfigKind kind : defaults) entries.push_back(Entry{{}, DefaultConfig(kind), "default"});

  // Class configs first, then claim configs, each in list order.
  const json empty = json::array();
  const json& configs = allocation_devices.contains("config") && allocation_devices["config"].is_array()
                            ? allocation_devices["config"]
                            : empty;
  for (const char* wanted_source : {"FromClass", "FromClaim"}) {
    // Numbered within their source: for claim configs that is the index in
    // the claim's spec.devices.config, which the user wrote.
    std::size_t index_in_source = 0;
    for (std::size_t i = 0; i < configs.size(); ++i) {
      const json& entry = configs[i];
      if (JsonString(entry, "source") != wanted_source) continue;
      const std::string where = fmt::format(
          "{} config[{}].opaque.parameters",
          std::string_view(wanted_source) == "FromClass" ? "device class" : "claim", index_in_source++);
      auto opaque = entry.find("opaque");
      if (opaque == entry.end() || !opaque->is_object()) {
        return common::InvalidArgumentError(
            fmt::format("allocation config[{}]: only opaque configurations are supported", i));
      }
      if (JsonString(*opaque, "driver") != driver) continue;
      ASSIGN_OR_RETURN(OpaqueConfig config, DecodeOpaqueConfig(JsonMember(*opaque, "parameters"), where));
      entries.push_back(Entry{JsonStrings(entry, {"requests"}), std::move(config), where});
    }
  }

  std::vector<ConfiguredResults> grouped;
  std::map<std::size_t, std::size_t> group_of_entry;
  const json& results = allocation_devices.contains("results") && allocation_devices["results"].is_array()
                            ? allocation_devices["results"]
                            : empty;
  for (const json& result : results) {
    if (JsonString(result, "driver") != driver) continue;
    const std::string device = JsonString(result, "device");
    const std::string request = JsonString(result, "request");
    ASSIGN_OR_RETURN(ConfigKind device_kind, kind_of_device(device));
    std::optional<std::size_t> chosen;
    for (std::size_t i = entries.size(); i-- > 0;) {
      const Entry& e = entries[i];
      if (std::find(e.requests.begin(), e.requests.end(), request) != e.requests.end()) {
        if (e.config.kind != device_kind) {
          return common::InvalidArgumentError(fmt::format(
              "{}: cannot apply {} to device {} of request {}: that device needs a {}", e.source,
              ConfigKindName(e.config.kind), device, request, ConfigKindName(device_kind)));
        }
        chosen = i;
        break;
      }
      if (e.requests.empty() && e.config.kind == device_kind) {
        chosen = i;
        break;
      }
    }
    if (!chosen) {
      return common::InvalidArgumentError(
          fmt::format("no configuration applies to device {} ({})", device, ConfigKindName(device_kind)));
    }
    auto [it, inserted] = group_of_entry.try_emplace(*chosen, grouped.size());
    if (inserted) grouped.push_back(ConfiguredResults{entries[*chosen].config, entries[*chosen].source, {}});
    AllocatedDevice allocated{
        .request = request, .pool = JsonString(result, "pool"), .device = device,
        .admin_access = JsonBool(result, {"adminAccess"}), .share_id = std::nullopt};
    if (auto share = result.find("shareID"); share != result.end() && share->is_string()) {
      allocated.share_id = share->get<std::string>();
    }
    grouped[it->second].results.push_back(std::move(allocated));
  }
  return grouped;
}

VfioSettings VfioSettingsOf(const OpaqueConfig& config) {
  VfioSettings settings;
  if (config.kind != ConfigKind::kVfioDeviceConfig) return settings;
  const json& iommu = JsonMember(config.object, "iommu");
  settings.prefer_iommufd = JsonString(iommu, "backendPolicy") == "PreferIommuFD";
  if (const json& api = JsonMember(iommu, "enableAPIDevice"); api.is_boolean()) settings.enable_api_device = api.get<bool>();
  return settings;
}

std::string_view TimeSliceIntervalName(TimeSliceInterval interval) {
  for (const auto& [name, known] : kIntervals) {
    if (known == interval) return name;
  }
  return "Default";
}

namespace {

// For a config that passed ValidateMps: every value parses.
MpsSharing DecodeMps(const json& mps) {
  MpsSharing decoded;
  if (!mps.is_object()) return decoded;
  if (const json& percentage = JsonMember(mps, "defaultActiveThreadPercentage"); percentage.is_number_integer()) {
    decoded.default_active_thread_percentage = percentage.get<int>();
  }
  if (const json& limit = JsonMember(mps, "defaultPinnedDeviceMemoryLimit"); !limit.is_null()) {
    decoded.default_pinned_device_memory_limit = PinnedLimit(limit, "").value_or(kMebibyte);
  }
  if (const json& per_device = JsonMember(mps, "defaultPerDevicePinnedMemoryLimit"); per_device.is_object()) {
    for (const auto& [device, limit] : per_device.items()) {
      decoded.per_device_pinned_memory_limit[device] = PinnedLimit(limit, "").value_or(kMebibyte);
    }
  }
  if (const json& multi_user = JsonMember(mps, "multiUser"); multi_user.is_boolean()) {
    decoded.multi_user = multi_user.get<bool>();
  }
  return decoded;
}

std::string Megabytes(std::int64_t bytes) { return fmt::format("{}M", bytes / kMebibyte); }

}  // namespace

StatusOr<std::map<std::string, std::string>> MpsPinnedMemoryLimits(const MpsSharing& mps,
                                                                   const std::vector<std::string>& uuids,
                                                                   std::string_view where) {
  std::map<std::string, std::string> limits;
  if (mps.default_pinned_device_memory_limit) {
    for (const std::string& uuid : uuids) limits[uuid] = Megabytes(*mps.default_pinned_device_memory_limit);
  }
  for (const auto& [key, bytes] : mps.per_device_pinned_memory_limit) {
    std::string uuid;
    if (std::find(uuids.begin(), uuids.end(), key) != uuids.end()) {
      uuid = key;
    } else if (!key.empty() && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
               key.size() < 6 && std::stoul(key) < uuids.size()) {
      uuid = uuids[std::stoul(key)];
    } else {
      return common::InvalidArgumentError(fmt::format(
          "{}.sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit[{}]: no such device in this request; use the UUID of "
          "one of its {} device(s) or an index from 0 to {}",
          where, key, uuids.size(), uuids.empty() ? 0 : uuids.size() - 1));
    }
    limits[uuid] = Megabytes(bytes);
  }
  return limits;
}

std::optional<Sharing> SharingOf(const OpaqueConfig& config) {
  if (config.kind != ConfigKind::kGpuConfig && config.kind != ConfigKind::kMigDeviceConfig) return std::nullopt;
  auto sharing = config.object.find("sharing");
  if (sharing == config.object.end() || !sharing->is_object()) return std::nullopt;
  const std::string strategy = JsonString(*sharing, "strategy");
  if (strategy == kMpsStrategy) return DecodeMps(JsonMember(*sharing, "mpsConfig"));
  if (strategy != kTimeSlicingStrategy) return std::nullopt;
  TimeSlicing time_slicing;
  if (const std::string interval = JsonString(JsonMember(*sharing, "timeSlicingConfig"), "interval"); !interval.empty()) {
    time_slicing.interval = ParseInterval(interval).value_or(TimeSliceInterval::kDefault);
  }
  return time_slicing;
}

}  // namespace nvdra::api
