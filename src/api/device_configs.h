#pragma once

// The one judgement of a claim's opaque configs that the webhook (at
// admission) and the kubelet plugins (at Prepare) share, so that they always
// agree: every opaque config naming one of our drivers is decoded strictly,
// must be a kind that driver acts on (a GpuConfig under
// compute-domain.nvidia.com, or a ComputeDomainChannelConfig under
// gpu.nvidia.com, is refused rather than ignored), and must pass
// ValidateConfig with the component's feature gates.
//
// Thread-safety: values and pure functions.

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/opaque_config.h"
#include "common/feature_gates.h"
#include "common/status.h"

namespace nvdra::api {

inline constexpr std::string_view kGpuDriverName = "gpu.nvidia.com";
inline constexpr std::string_view kComputeDomainDriverName = "compute-domain.nvidia.com";

// The config kinds one of our drivers acts on, and the driver that takes the
// other kinds (for the fix in the message).
struct DriverConfigKinds {
  std::string_view driver;
  std::vector<ConfigKind> kinds;
  std::string_view other_driver;
};
// nullptr for a driver that is not ours.
const DriverConfigKinds* ConfigKindsOfDriver(std::string_view driver);

// Checks the opaque configs in `devices` (a claim spec's `devices`, or an
// allocation's `devices`: both hold `config[].opaque.{driver,parameters}`)
// whose driver is one of ours, or only `driver`'s when it is not empty.
// `where` is the path of `devices` ("spec.devices"); entries of an
// allocation (with `source`) are named "claim config[i]" and "device class
// config[i]" by their place among their source's entries. kInvalidArgument with
// upstream's message form, "N configs failed to validate: <problem>; ...",
// each problem starting with its field path
// ("spec.devices.config[1].opaque.parameters.sharing.strategy: ...") and
// saying how to fix it; at most ten problems are listed, and quoted input is
// cut short. kInvalidArgument too when `devices` or its `config` has the
// wrong type. Non-opaque entries and other drivers' are not looked at.
// `devices.config`, or an empty list when there is none; kInvalidArgument
// when `devices` is not an object or its `config` not a list.
// A pointer into `devices` (or to a static empty list): never a copy, as a
// hostile object's list can be large.
common::StatusOr<const nlohmann::json*> DeviceConfigList(const nlohmann::json& devices, std::string_view where);

[[nodiscard]] common::Status ValidateDeviceConfigs(const nlohmann::json& devices, std::string_view where,
                                                   const common::FeatureGates& gates,
                                                   std::string_view driver = {});

// Warnings for the admission answer: fields of valid gpu.nvidia.com configs
// in `devices` that their settings ignore (FabricTopologyWarnings), named
// by path as ValidateDeviceConfigs names problems. At most ten.
std::vector<std::string> DeviceConfigWarnings(const nlohmann::json& devices, std::string_view where);

}  // namespace nvdra::api
