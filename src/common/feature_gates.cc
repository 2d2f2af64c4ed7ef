#include "common/feature_gates.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include <fmt/format.h>

namespace nvdra::common {
namespace {

using Kind = FeatureDependency::Kind;

// Names, defaults, stages and "since" releases match upstream's registry
// (FabricTopologySupport, from seed 002, is ours alone).
constexpr std::array kDriverSpecs = {
    FeatureSpec{kTimeSlicingSettings, false, Maturity::kAlpha, "0.2", false,
                "GpuConfig time-slicing strategy and interval"},
    FeatureSpec{kMPSSupport, false, Maturity::kAlpha, "0.2", false,
                "MPS sharing strategy and MPS control daemons"},
    FeatureSpec{kIMEXDaemonsWithDNSNames, true, Maturity::kBeta, "0.2", false,
                "IMEX daemons address peers by DNS name (nodes.cfg plus /etc/hosts)"},
    FeatureSpec{kPassthroughSupport, false, Maturity::kAlpha, "0.3", false,
                "VFIO passthrough devices (vfio-pci rebinding, host-root mounts)"},
    FeatureSpec{kDynamicMIG, false, Maturity::kAlpha, "0.3", false,
                "partitionable devices with MIG slices created on demand"},
    FeatureSpec{kNVMLDeviceHealthCheck, false, Maturity::kAlpha, "0.3", false,
                "NVML event monitoring and device taints"},
    FeatureSpec{kComputeDomainCliques, true, Maturity::kBeta, "0.3", false,
                "ComputeDomainClique objects instead of ComputeDomain status.nodes"},
    FeatureSpec{kCrashOnNVLinkFabricErrors, true, Maturity::kBeta, "0.3", false,
                "exit on NVLink fabric errors instead of falling back to non-fabric mode"},
    FeatureSpec{kDeviceMetadata, false, Maturity::kAlpha, "0.4", false,
                "KEP-5304 device metadata files for prepared devices"},
    FeatureSpec{kDRAListTypeAttributes, false, Maturity::kAlpha, "0.4", false,
                "list-valued device attributes (numaNode as an int list)"},
    FeatureSpec{kFabricManagerPartitioning, false, Maturity::kAlpha, "0.5", false,
                "Fabric Manager partition attributes and activation"},
    FeatureSpec{kHostManagedIMEXDaemon, false, Maturity::kAlpha, "0.5", false,
                "allows --imex-mode=hostManaged"},
    FeatureSpec{kConsumableShares, false, Maturity::kAlpha, "0.5", false,
                "consumable capacity and multiple allocations per device"},
    FeatureSpec{kFabricTopologySupport, false, Maturity::kAlpha, "0.6", false,
                "GpuConfig fabricTopologyConfig: NVLink-topology-aware Fabric Manager partitions"},
    // component-base logging gates (Kubernetes releases, not driver releases).
    // Upstream turns ContextualLogging on; our logging has no other mode.
    FeatureSpec{kLoggingAlphaOptions, false, Maturity::kAlpha, "1.24", false,
                "alpha logging options (accepted for compatibility)"},
    FeatureSpec{kLoggingBetaOptions, true, Maturity::kBeta, "1.24", false,
                "beta logging options (accepted for compatibility)"},
    FeatureSpec{kContextualLogging, true, Maturity::kBeta, "1.30", false,
                "contextual logging (accepted for compatibility)"},
};

// Upstream's ValidateFeatureGates rules (at the inventory's pinned commit), in
// its order, so the first broken rule reported is the same.
constexpr std::array kDriverDependencies = {
    FeatureDependency{Kind::kRequires, kComputeDomainCliques, kIMEXDaemonsWithDNSNames},
    FeatureDependency{Kind::kExcludes, kDynamicMIG, kPassthroughSupport},
    FeatureDependency{Kind::kExcludes, kDynamicMIG, kNVMLDeviceHealthCheck},
    FeatureDependency{Kind::kExcludes, kDynamicMIG, kMPSSupport},
    FeatureDependency{Kind::kExcludes, kPassthroughSupport, kNVMLDeviceHealthCheck},
    FeatureDependency{Kind::kRequires, kDeviceMetadata, kPassthroughSupport},
};

constexpr std::string_view kAllAlpha = "AllAlpha";
constexpr std::string_view kAllBeta = "AllBeta";

std::string_view Trim(std::string_view text) {
  constexpr std::string_view kSpace = " \t\n\r";
  const auto begin = text.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  const auto end = text.find_last_not_of(kSpace);
  return text.substr(begin, end - begin + 1);
}

const FeatureSpec* FindSpec(std::span<const FeatureSpec> specs, std::string_view name) {
  for (const FeatureSpec& spec : specs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

std::string KnownNames(std::span<const FeatureSpec> specs) {
  std::vector<std::string_view> names;
  names.reserve(specs.size());
  for (const FeatureSpec& spec : specs) names.push_back(spec.name);
  std::sort(names.begin(), names.end());
  return fmt::format("{}", fmt::join(names, ", "));
}

// Applies explicit values over `values`: checks names and locks.
Status ApplyExplicit(std::span<const FeatureSpec> specs,
                     const std::map<std::string, bool, std::less<>>& explicit_values,
                     std::map<std::string, bool, std::less<>>& values) {
  for (const auto& [name, value] : explicit_values) {
    const FeatureSpec* spec = FindSpec(specs, name);
    if (spec == nullptr) {
      return InvalidArgumentError(fmt::format(
          "unknown feature gate \"{}\" in --feature-gates; known gates: {}", name,
          KnownNames(specs)));
    }
    if (spec->locked_to_default && value != spec->default_value) {
      return InvalidArgumentError(fmt::format(
          "feature gate {} is locked to {} ({}) and cannot be set to {}; remove it from "
          "--feature-gates",
          name, spec->default_value, MaturityName(spec->maturity), value));
    }
    values[name] = value;
  }
  return OkStatus();
}

}  // namespace

std::string_view MaturityName(Maturity maturity) {
  switch (maturity) {
    case Maturity::kAlpha: return "ALPHA";
    case Maturity::kBeta: return "BETA";
    case Maturity::kGA: return "GA";
    case Maturity::kDeprecated: return "DEPRECATED";
  }
  return "UNKNOWN";
}

std::span<const FeatureSpec> DriverFeatureSpecs() { return kDriverSpecs; }
std::span<const FeatureDependency> DriverFeatureDependencies() { return kDriverDependencies; }

StatusOr<bool> ParseGoBool(std::string_view text) {
  if (text == "1" || text == "t" || text == "T" || text == "true" || text == "TRUE" ||
      text == "True") {
    return true;
  }
  if (text == "0" || text == "f" || text == "F" || text == "false" || text == "FALSE" ||
      text == "False") {
    return false;
  }
  return InvalidArgumentError(fmt::format("invalid boolean \"{}\" (want true or false)", text));
}

StatusOr<FeatureGates> FeatureGates::Parse(std::string_view text) {
  return Parse(text, DriverFeatureSpecs(), DriverFeatureDependencies());
}

StatusOr<FeatureGates> FeatureGates::Parse(std::string_view text,
                                           std::span<const FeatureSpec> specs,
                                           std::span<const FeatureDependency> dependencies) {
  std::map<std::string, bool, std::less<>> explicit_values;
  std::optional<bool> all_alpha;
  std::optional<bool> all_beta;
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string_view entry = Trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (entry.empty()) continue;
    const auto equals = entry.find('=');
    const std::string_view name = Trim(entry.substr(0, equals));
    if (equals == std::string_view::npos) {
      return InvalidArgumentError(fmt::format(
          "feature gate \"{}\" in --feature-gates has no value; write {}=true or {}=false", name,
          name, name));
    }
    const std::string_view raw_value = Trim(entry.substr(equals + 1));
    StatusOr<bool> value = ParseGoBool(raw_value);
    if (!value.ok()) {
      return InvalidArgumentError(fmt::format(
          "feature gate {} in --feature-gates: invalid value \"{}\" (want true or false)", name,
          raw_value));
    }
    if (name == kAllAlpha) {
      all_alpha = *value;
    } else if (name == kAllBeta) {
      all_beta = *value;
    } else {
      explicit_values[std::string(name)] = *value;
    }
  }

  std::map<std::string, bool, std::less<>> values;
  for (const FeatureSpec& spec : specs) {
    bool value = spec.default_value;
    if (!spec.locked_to_default) {
      if (spec.maturity == Maturity::kAlpha && all_alpha) value = *all_alpha;
      if (spec.maturity == Maturity::kBeta && all_beta) value = *all_beta;
    }
    values.emplace(std::string(spec.name), value);
  }
  RETURN_IF_ERROR(ApplyExplicit(specs, explicit_values, values));
  FeatureGates gates(std::move(values), specs, dependencies);
  RETURN_IF_ERROR(gates.CheckDependencies());
  return gates;
}

FeatureGates FeatureGates::Defaults() {
  StatusOr<FeatureGates> gates = Parse("");
  // The driver's defaults satisfying its own rules is an invariant.
  if (!gates.ok()) internal::StatusOrDie("feature gate defaults are inconsistent", gates.status());
  return *std::move(gates);
}

bool FeatureGates::Enabled(std::string_view name) const {
  const auto it = values_.find(name);
  if (it == values_.end()) {
    std::fprintf(stderr, "fatal: FeatureGates::Enabled(\"%.*s\"): no such feature gate\n",
                 static_cast<int>(name.size()), name.data());
    std::abort();
  }
  return it->second;
}

StatusOr<FeatureGates> FeatureGates::WithOverrides(
    const std::map<std::string, bool, std::less<>>& overrides) const {
  std::map<std::string, bool, std::less<>> values = values_;
  RETURN_IF_ERROR(ApplyExplicit(specs_, overrides, values));
  FeatureGates gates(std::move(values), specs_, dependencies_);
  RETURN_IF_ERROR(gates.CheckDependencies());
  return gates;
}

Status FeatureGates::CheckDependencies() const {
  for (const FeatureDependency& rule : dependencies_) {
    const bool gate_on = Enabled(rule.gate);
    const bool other_on = Enabled(rule.other);
    if (rule.kind == Kind::kRequires && gate_on && !other_on) {
      return InvalidArgumentError(fmt::format(
          "feature gate {} requires feature gate {}: set {}=true or {}=false in --feature-gates",
          rule.gate, rule.other, rule.other, rule.gate));
    }
    if (rule.kind == Kind::kExcludes && gate_on && other_on) {
      return InvalidArgumentError(fmt::format(
          "feature gates {} and {} cannot both be enabled: set one of them to false in "
          "--feature-gates",
          rule.gate, rule.other));
    }
  }
  return OkStatus();
}

std::string FeatureGates::ToString() const {
  std::string out;
  for (const auto& [name, value] : values_) {
    if (!out.empty()) out.push_back(',');
    out.append(name).append(value ? "=true" : "=false");
  }
  return out;
}

std::string FeatureGates::KnownFeaturesHelp() {
  std::string out;
  for (const FeatureSpec& spec : DriverFeatureSpecs()) {
    fmt::format_to(std::back_inserter(out), "\n  {}=true|false ({} - default={}){}", spec.name,
                   MaturityName(spec.maturity), spec.default_value,
                   spec.locked_to_default ? " locked" : "");
  }
  fmt::format_to(std::back_inserter(out), "\n  {}=true|false (sets every ALPHA gate)", kAllAlpha);
  fmt::format_to(std::back_inserter(out), "\n  {}=true|false (sets every BETA gate)", kAllBeta);
  return out;
}

}  // namespace nvdra::common
