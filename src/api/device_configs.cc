#include "api/device_configs.h"

#include <array>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "api/fabric_topology.h"
#include "common/json_fields.h"

namespace nvdra::api {

using common::JsonFind;
using common::JsonString;
using common::Status;
using common::StatusOr;
using nlohmann::json;

namespace {

std::string KindList(const std::vector<ConfigKind>& kinds) {
  std::string out;
  for (ConfigKind kind : kinds) out += fmt::format("{}{}", out.empty() ? "" : ", ", ConfigKindName(kind));
  return out;
}

// One config's problem, or nullopt when it is valid.
std::optional<std::string> CheckOne(const DriverConfigKinds& driver, const json& parameters, const std::string& where,
                                    const common::FeatureGates& gates) {
  StatusOr<OpaqueConfig> decoded = DecodeOpaqueConfig(parameters, where);
  if (!decoded.ok()) return std::string(decoded.status().message());
  bool fits = false;
  for (ConfigKind kind : driver.kinds) fits = fits || kind == decoded->kind;
  if (!fits) {
    return fmt::format("{}.kind: {} is not a configuration of driver {} (its kinds: {}); set opaque.driver to {}",
                       where, ConfigKindName(decoded->kind), driver.driver, KindList(driver.kinds),
                       driver.other_driver);
  }
  if (Status valid = ValidateConfig(*decoded, where, gates); !valid.ok()) return std::string(valid.message());
  return std::nullopt;
}

// The chart's DeviceClasses of gpu.nvidia.com and the config kind their
// devices take.
std::optional<ConfigKind> KindOfClass(std::string_view device_class) {
  if (device_class == "gpu.nvidia.com") return ConfigKind::kGpuConfig;
  if (device_class == "mig.nvidia.com") return ConfigKind::kMigDeviceConfig;
  if (device_class == "vfio.gpu.nvidia.com") return ConfigKind::kVfioDeviceConfig;
  return std::nullopt;
}

// Request name ("gpu", or "gpu/sub" of firstAvailable) -> its DeviceClass,
// from a claim spec's devices.requests (an allocation has none).
std::map<std::string, std::string> RequestClasses(const json& devices) {
  std::map<std::string, std::string> out;
  const json* requests = devices.is_object() ? JsonFind(devices, "requests") : nullptr;
  if (requests == nullptr || !requests->is_array()) return out;
  for (const json& request : *requests) {
    const std::string name = JsonString(request, "name");
    if (const json* exactly = JsonFind(request, "exactly"); exactly != nullptr) {
      out[name] = JsonString(*exactly, "deviceClassName");
    }
    if (const json* first = JsonFind(request, "firstAvailable"); first != nullptr && first->is_array()) {
      for (const json& sub : *first) out[name + "/" + JsonString(sub, "name")] = JsonString(sub, "deviceClassName");
    }
  }
  return out;
}

// What a claim spec says that no single config shows: a VFIO config kind
// that does not fit the class of a request it names (VFIO config on a MIG or
// full-GPU request, a GpuConfig on a VFIO request), and more than one
// VfioDeviceConfig (a claim holds at most one VFIO device group, as
// upstream's).
void CheckAgainstRequests(const json& devices, const json& configs, std::string_view where,
                          std::vector<std::string>& problems) {
  const std::map<std::string, std::string> classes = RequestClasses(devices);
  std::vector<std::string> vfio_configs;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const json* opaque = JsonFind(configs[i], "opaque");
    if (opaque == nullptr || JsonString(*opaque, "driver") != kGpuDriverName) continue;
    const json* parameters = JsonFind(*opaque, "parameters");
    if (parameters == nullptr) continue;
    StatusOr<OpaqueConfig> decoded = DecodeOpaqueConfig(*parameters, "");
    if (!decoded.ok()) continue;  // reported by CheckOne
    const std::string path = fmt::format("{}.config[{}]", where, i);
    if (decoded->kind == ConfigKind::kVfioDeviceConfig) vfio_configs.push_back(path);
    const json* requests = JsonFind(configs[i], "requests");
    if (requests == nullptr || !requests->is_array()) continue;
    for (const json& request : *requests) {
      if (!request.is_string()) continue;
      auto it = classes.find(request.get<std::string>());
      if (it == classes.end()) continue;
      const std::optional<ConfigKind> wanted = KindOfClass(it->second);
      if (!wanted || *wanted == decoded->kind) continue;
      // Only where VFIO is involved: a GpuConfig next to a MigDeviceConfig
      // is judged per device at Prepare, as before.
      if (*wanted != ConfigKind::kVfioDeviceConfig && decoded->kind != ConfigKind::kVfioDeviceConfig) continue;
      problems.push_back(fmt::format(
          "{}.opaque.parameters.kind: a {} cannot apply to request {}, whose class {} gives devices that take a {}{}",
          path, ConfigKindName(decoded->kind), it->first, it->second, ConfigKindName(*wanted),
          decoded->kind == ConfigKind::kVfioDeviceConfig
              ? "; VFIO passes whole GPUs through: request DeviceClass vfio.gpu.nvidia.com"
              : ""));
    }
  }
  if (vfio_configs.size() > 1) {
    problems.push_back(fmt::format(
        "{}: {} VfioDeviceConfigs ({}); a claim takes at most one VFIO device group: use one config for all its "
        "VFIO requests",
        where, vfio_configs.size(), fmt::join(vfio_configs, ", ")));
  }
}

}  // namespace

const DriverConfigKinds* ConfigKindsOfDriver(std::string_view driver) {
  static const std::array<DriverConfigKinds, 2> table{
      DriverConfigKinds{kGpuDriverName,
                        {ConfigKind::kGpuConfig, ConfigKind::kMigDeviceConfig, ConfigKind::kVfioDeviceConfig},
                        kComputeDomainDriverName},
      DriverConfigKinds{kComputeDomainDriverName,
                        {ConfigKind::kComputeDomainChannelConfig, ConfigKind::kComputeDomainDaemonConfig},
                        kGpuDriverName},
  };
  for (const DriverConfigKinds& entry : table) {
    if (entry.driver == driver) return &entry;
  }
  return nullptr;
}

StatusOr<const json*> DeviceConfigList(const json& devices, std::string_view where) {
  static const json* const kEmpty = new json(json::array());
  if (devices.is_null()) return kEmpty;
  if (!devices.is_object()) return common::InvalidArgumentError(fmt::format("{}: must be an object", where));
  const json* config = JsonFind(devices, "config");
  if (config == nullptr) return kEmpty;
  if (!config->is_array()) return common::InvalidArgumentError(fmt::format("{}.config: must be a list", where));
  return config;
}

Status ValidateDeviceConfigs(const json& devices, std::string_view where, const common::FeatureGates& gates,
                             std::string_view only_driver) {
  ASSIGN_OR_RETURN(const json* const config_list, DeviceConfigList(devices, where));
  const json& configs = *config_list;
  std::vector<std::string> problems;
  std::size_t class_index = 0;
  std::size_t claim_index = 0;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    // An allocation's entries say where they came from: named by their
    // place in that list, as ResolveDeviceConfigs names them.
    const std::string source = JsonString(configs[i], "source");
    std::string path = fmt::format("{}.config[{}].opaque.parameters", where, i);
    if (source == "FromClass") path = fmt::format("device class config[{}].opaque.parameters", class_index++);
    if (source == "FromClaim") path = fmt::format("claim config[{}].opaque.parameters", claim_index++);
    const json* opaque = JsonFind(configs[i], "opaque");
    if (opaque == nullptr) continue;
    const std::string name = JsonString(*opaque, "driver");
    const DriverConfigKinds* driver = ConfigKindsOfDriver(name);
    if (driver == nullptr || (!only_driver.empty() && name != only_driver)) continue;
    const json* parameters = JsonFind(*opaque, "parameters");
    if (auto problem = CheckOne(*driver, parameters != nullptr ? *parameters : json(), path, gates)) {
      problems.push_back(std::move(*problem));
    }
  }
  if (only_driver.empty() || only_driver == kGpuDriverName) CheckAgainstRequests(devices, configs, where, problems);
  if (problems.empty()) return common::OkStatus();
  // Bounded: the message goes back to the client and into logs and Events,
  // and a problem can quote the input (an unknown key).
  constexpr std::size_t kListed = 10;
  constexpr std::size_t kProblemChars = 1024;
  std::string joined;
  for (std::size_t i = 0; i < problems.size() && i < kListed; ++i) {
    std::string_view problem = problems[i];
    joined += fmt::format("{}{}{}", i == 0 ? "" : "; ", problem.substr(0, kProblemChars),
                          problem.size() > kProblemChars ? "..." : "");
  }
  if (problems.size() > kListed) joined += fmt::format("; and {} more", problems.size() - kListed);
  return common::InvalidArgumentError(fmt::format("{} configs failed to validate: {}", problems.size(), joined));
}

std::vector<std::string> DeviceConfigWarnings(const json& devices, std::string_view where) {
  std::vector<std::string> warnings;
  StatusOr<const json*> configs = DeviceConfigList(devices, where);
  if (!configs.ok()) return warnings;
  constexpr std::size_t kMostWarnings = 10;
  for (std::size_t i = 0; i < (*configs)->size() && warnings.size() < kMostWarnings; ++i) {
    const json* opaque = JsonFind((**configs)[i], "opaque");
    if (opaque == nullptr || JsonString(*opaque, "driver") != kGpuDriverName) continue;
    const json* parameters = JsonFind(*opaque, "parameters");
    if (parameters == nullptr) continue;
    const std::string path = fmt::format("{}.config[{}].opaque.parameters", where, i);
    StatusOr<OpaqueConfig> decoded = DecodeOpaqueConfig(*parameters, path);
    if (!decoded.ok()) continue;
    for (std::string& warning : FabricTopologyWarnings(decoded->object, path)) {
      if (warnings.size() < kMostWarnings) warnings.push_back(std::move(warning));
    }
  }
  return warnings;
}

}  // namespace nvdra::api
