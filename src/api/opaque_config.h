#pragma once

// The driver's opaque device configurations (resource.nvidia.com/v1beta1):
// strict decoding of what users put in `spec.devices.config[].opaque
// .parameters` of claims and classes, and the precedence rules that pick one
// configuration per allocated device (upstream-inventory.md section 2.7).
// Both kubelet plugins and (later) the webhook use this, so a config is
// judged the same way everywhere; the plugins never rely on the webhook.
//
// Decoding is strict like upstream's StrictDecoder: apiVersion and kind must
// name a known kind, and any unknown field fails with its JSON path. Errors
// name the field and the fix.
// Thread-safety: values and pure functions.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/feature_gates.h"
#include "common/status.h"

namespace nvdra::api {

inline constexpr std::string_view kGroupName = "resource.nvidia.com";
inline constexpr std::string_view kGroupVersion = "resource.nvidia.com/v1beta1";

enum class ConfigKind {
  kGpuConfig,
  kMigDeviceConfig,
  kVfioDeviceConfig,
  kComputeDomainChannelConfig,
  kComputeDomainDaemonConfig,
};
std::string_view ConfigKindName(ConfigKind kind);

// A decoded configuration. `object` is the decoded JSON (known fields only,
// normalised); kinds that need typed access parse it where they act.
struct OpaqueConfig {
  ConfigKind kind = ConfigKind::kGpuConfig;
  nlohmann::json object;
};

// Decodes `parameters` strictly. `where` prefixes error messages
// ("spec.devices.config[0].opaque.parameters").
common::StatusOr<OpaqueConfig> DecodeOpaqueConfig(const nlohmann::json& parameters, std::string_view where);

// A config with no fields set: the built-in default of its kind.
OpaqueConfig DefaultConfig(ConfigKind kind);

// Checks a decoded config against the feature gates of the component that
// judges it (the webhook's and the plugin's gates are the chart's one
// featureGates value). kInvalidArgument names the field for values that are
// wrong in any setting; kFailedPrecondition names the feature gate (and the
// chart value) a sharing strategy or a VfioDeviceConfig needs.
common::Status ValidateConfig(const OpaqueConfig& config, std::string_view where,
                              const common::FeatureGates& gates);

// A VfioDeviceConfig's iommu settings, normalised as upstream's (backendPolicy
// LegacyOnly and no API device when left out). Defaults for other kinds.
struct VfioSettings {
  bool prefer_iommufd = false;     // backendPolicy PreferIommuFD
  bool enable_api_device = false;  // enableAPIDevice: /dev/iommu or /dev/vfio/vfio too
};
VfioSettings VfioSettingsOf(const OpaqueConfig& config);

// upstream's TimeSliceInterval: the value nvidia-smi compute-policy
// --set-timeslice takes.
enum class TimeSliceInterval { kDefault = 0, kShort = 1, kMedium = 2, kLong = 3 };
std::string_view TimeSliceIntervalName(TimeSliceInterval interval);

// sharing.strategy TimeSlicing (timeSlicingConfig.interval, Default when
// left out, as upstream's Normalize). On a MigDeviceConfig it has no
// interval and changes nothing, as upstream.
struct TimeSlicing {
  TimeSliceInterval interval = TimeSliceInterval::kDefault;
  friend bool operator==(const TimeSlicing&, const TimeSlicing&) = default;
};
// sharing.strategy MPS: mpsConfig's settings, as upstream's MpsConfig.
// Limits are in bytes (quantities' values); ValidateConfig checks the
// percentage (0..100) and that every limit is at least 1 MiB, the smallest
// value nvidia-cuda-mps-control takes (it is given megabytes).
struct MpsSharing {
  std::optional<int> default_active_thread_percentage;
  std::optional<std::int64_t> default_pinned_device_memory_limit;
  // defaultPerDevicePinnedMemoryLimit: keyed by a device UUID or by an index
  // into the group's devices, as written; resolved against the devices at
  // Prepare (MpsPinnedMemoryLimits).
  std::map<std::string, std::int64_t> per_device_pinned_memory_limit;
  bool multi_user = false;
  friend bool operator==(const MpsSharing&, const MpsSharing&) = default;
};

// The pinned memory limit per device UUID for a group whose devices have
// `uuids` (in allocation order), as upstream's Normalize: the default limit
// for every device, then each per-device entry, keyed by UUID or index.
// Values in nvidia-cuda-mps-control's form, whole megabytes ("10240M").
// kInvalidArgument naming the key for one that is neither a UUID of the
// group nor an index into it.
common::StatusOr<std::map<std::string, std::string>> MpsPinnedMemoryLimits(const MpsSharing& mps,
                                                                           const std::vector<std::string>& uuids,
                                                                           std::string_view where);
using Sharing = std::variant<TimeSlicing, MpsSharing>;

// The sharing a GpuConfig or MigDeviceConfig asks for; nullopt for exclusive
// use and for other kinds. For a config that passed ValidateConfig.
std::optional<Sharing> SharingOf(const OpaqueConfig& config);

// One entry of a claim's status.allocation.devices.results for this driver.
struct AllocatedDevice {
  std::string request;  // "<request>" or "<request>/<subrequest>"
  std::string pool;
  std::string device;
  bool admin_access = false;
  std::optional<std::string> share_id;  // "shareID": a consumable-capacity share

  friend bool operator==(const AllocatedDevice&, const AllocatedDevice&) = default;
};

// Allocated devices of this driver and the config chosen for them.
struct ConfiguredResults {
  OpaqueConfig config;
  std::string source;                    // "default", or where the config came from
  std::vector<AllocatedDevice> results;  // in the allocation's order
};

// Picks a config for every result of `driver` in a claim's allocation
// (status.allocation.devices), as upstream does: defaults first, then all
// class configs, then all claim configs; for each result the last entry that
// names its request wins, or the last entry without requests whose kind fits
// the device. `kind_of_device` says which config kind fits a device name
// (GpuConfig for a GPU, MigDeviceConfig for a MIG device, ...); it returns
// kNotFound for unknown devices. A config naming a request whose device needs
// another kind fails ("cannot apply GpuConfig to device gpu-0-mig-...").
// Configs of other drivers are skipped; a non-opaque entry fails.
common::StatusOr<std::vector<ConfiguredResults>> ResolveDeviceConfigs(
    const nlohmann::json& allocation_devices, std::string_view driver, const std::vector<ConfigKind>& defaults,
    const std::function<common::StatusOr<ConfigKind>(const std::string& device)>& kind_of_device);

}  // namespace nvdra::api
