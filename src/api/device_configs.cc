#include "api/device_configs.h"

#include <array>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

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

StatusOr<json> DeviceConfigList(const json& devices, std::string_view where) {
  if (devices.is_null()) return json::array();
  if (!devices.is_object()) return common::InvalidArgumentError(fmt::format("{}: must be an object", where));
  const json* config = JsonFind(devices, "config");
  if (config == nullptr) return json::array();
  if (!config->is_array()) return common::InvalidArgumentError(fmt::format("{}.config: must be a list", where));
  return *config;
}

Status ValidateDeviceConfigs(const json& devices, std::string_view where, const common::FeatureGates& gates,
                             std::string_view only_driver) {
  ASSIGN_OR_RETURN(const json configs, DeviceConfigList(devices, where));
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

}  // namespace nvdra::api
