#pragma once

// Feature gates: named booleans that switch optional driver behaviour on or
// off, with upstream's names, defaults and maturity, parsed from
// --feature-gates / FEATURE_GATES ("A=true,B=false").
//
// Defines: Maturity, FeatureSpec, FeatureDependency, the gate names (kDynamicMIG,
// ...), the registries DriverFeatureSpecs() and DriverFeatureDependencies(),
// and FeatureGates, the parsed and validated set.
//
// Ownership: FeatureGates owns its values; registries are static tables.
// Thread-safety: FeatureGates is immutable after Parse (share it freely).

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nvdra::common {

enum class Maturity { kAlpha, kBeta, kGA, kDeprecated };
std::string_view MaturityName(Maturity maturity);  // "ALPHA", "BETA", "GA", "DEPRECATED"

struct FeatureSpec {
  std::string_view name;
  bool default_value = false;
  Maturity maturity = Maturity::kAlpha;
  std::string_view since;  // driver release that added the gate, e.g. "0.3"
  // A locked gate only accepts its default (typical once a gate is GA).
  bool locked_to_default = false;
  std::string_view description;
};

// A rule between two gates, checked after parsing.
struct FeatureDependency {
  enum class Kind {
    kRequires,  // `gate` on needs `other` on
    kExcludes,  // `gate` and `other` may not both be on
  };
  Kind kind = Kind::kRequires;
  std::string_view gate;
  std::string_view other;
};

// Driver gates (upstream pkg/featuregates).
inline constexpr std::string_view kTimeSlicingSettings = "TimeSlicingSettings";
inline constexpr std::string_view kMPSSupport = "MPSSupport";
inline constexpr std::string_view kIMEXDaemonsWithDNSNames = "IMEXDaemonsWithDNSNames";
inline constexpr std::string_view kPassthroughSupport = "PassthroughSupport";
inline constexpr std::string_view kDynamicMIG = "DynamicMIG";
inline constexpr std::string_view kNVMLDeviceHealthCheck = "NVMLDeviceHealthCheck";
inline constexpr std::string_view kComputeDomainCliques = "ComputeDomainCliques";
inline constexpr std::string_view kCrashOnNVLinkFabricErrors = "CrashOnNVLinkFabricErrors";
inline constexpr std::string_view kDeviceMetadata = "DeviceMetadata";
inline constexpr std::string_view kDRAListTypeAttributes = "DRAListTypeAttributes";
inline constexpr std::string_view kFabricManagerPartitioning = "FabricManagerPartitioning";
inline constexpr std::string_view kHostManagedIMEXDaemon = "HostManagedIMEXDaemon";
inline constexpr std::string_view kConsumableShares = "ConsumableShares";
// Seed 002's NVLink-topology-aware Fabric Manager integration
// (GpuConfig.fabricTopologyConfig); not an upstream gate. Also set by the
// environment variable FABRIC_TOPOLOGY_SUPPORT (common/flags.h).
inline constexpr std::string_view kFabricTopologySupport = "FabricTopologySupport";
// Logging gates upstream inherits from Kubernetes component-base; accepted so
// that existing --feature-gates values keep working.
inline constexpr std::string_view kLoggingAlphaOptions = "LoggingAlphaOptions";
inline constexpr std::string_view kLoggingBetaOptions = "LoggingBetaOptions";
inline constexpr std::string_view kContextualLogging = "ContextualLogging";

// Every gate the binaries know, in a stable order.
std::span<const FeatureSpec> DriverFeatureSpecs();
// Upstream's rules (ValidateFeatureGates), in the order they are checked.
std::span<const FeatureDependency> DriverFeatureDependencies();

class FeatureGates {
 public:
  // Parses "Name=bool,Name=bool" against the driver registry and checks the
  // dependencies. Empty text means all defaults. Spaces around names and
  // values are ignored; a later entry for the same gate wins. Values are Go's
  // strconv.ParseBool spellings (true/false/1/0/t/f/TRUE/True/...), as
  // upstream accepts. "AllAlpha=bool" / "AllBeta=bool" set every alpha / beta
  // gate not named explicitly (as component-base does).
  // kInvalidArgument for an unknown gate (the message lists the known ones), a
  // missing or bad value, a locked gate set away from its default, or a
  // dependency rule broken (the message names both gates and the fix).
  static StatusOr<FeatureGates> Parse(std::string_view text);
  // Same, against another registry (tests, future components).
  static StatusOr<FeatureGates> Parse(std::string_view text, std::span<const FeatureSpec> specs,
                                      std::span<const FeatureDependency> dependencies);

  // All gates at their defaults (the driver registry).
  static FeatureGates Defaults();

  // Whether `name` is on. An unknown name is a programmer error and aborts:
  // pass the k* constants.
  [[nodiscard]] bool Enabled(std::string_view name) const;

  // The same gates with `overrides` applied, dependencies checked again.
  // For decisions a binary makes from its own flags (the controller turns
  // the IMEX DNS-name and clique gates off in hostManaged mode).
  // kInvalidArgument for an unknown gate or a broken dependency.
  [[nodiscard]] StatusOr<FeatureGates> WithOverrides(
      const std::map<std::string, bool, std::less<>>& overrides) const;

  // Every gate and its value, sorted by name.
  [[nodiscard]] const std::map<std::string, bool, std::less<>>& values() const { return values_; }
  // "A=true,B=false", sorted by name: for start-up logs and for passing the
  // effective set on to child components (FEATURE_GATES).
  [[nodiscard]] std::string ToString() const;
  // Help text for --feature-gates: one "Name=true|false (STAGE - default=x)"
  // line per gate.
  [[nodiscard]] static std::string KnownFeaturesHelp();

 private:
  FeatureGates(std::map<std::string, bool, std::less<>> values,
               std::span<const FeatureSpec> specs,
               std::span<const FeatureDependency> dependencies)
      : values_(std::move(values)), specs_(specs), dependencies_(dependencies) {}
  [[nodiscard]] Status CheckDependencies() const;

  std::map<std::string, bool, std::less<>> values_;
  // Static tables (DriverFeatureSpecs() or a test's); they outlive every set.
  std::span<const FeatureSpec> specs_;
  std::span<const FeatureDependency> dependencies_;
};

// Go's strconv.ParseBool: "1", "t", "T", "TRUE", "true", "True" and the false
// spellings. kInvalidArgument otherwise.
StatusOr<bool> ParseGoBool(std::string_view text);

}  // namespace nvdra::common
