#include "gpu/config.h"

#include <charconv>
#include <cstdint>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "gpu/published_devices.h"

namespace nvdra::gpu {
namespace {

using common::InvalidArgumentError;
using common::OkStatus;
using common::Status;
using common::StatusOr;
using common::WithEnv;

// Application errors: the GPU is fine (upstream's list, from NVIDIA's XID
// catalogue).
constexpr std::uint64_t kApplicationXids[] = {13, 31, 43, 45, 68, 109};

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace

Status PluginConfig::Validate(const common::FeatureGates& gates) const {
  if (Status status = plugin.Validate(); !status.ok()) return status;
  if (Status status = kube_client.Validate(); !status.ok()) return status;
  if (Status status = metrics.Validate(); !status.ok()) return status;
  if (image_name.empty()) return InvalidArgumentError("--image-name (IMAGE_NAME) is required");
  if (!image_pull_policy.empty() && image_pull_policy != "Always" &&
      image_pull_policy != "IfNotPresent" && image_pull_policy != "Never") {
    return InvalidArgumentError(fmt::format(
        "--image-pull-policy: \"{}\" is not one of Always, IfNotPresent, Never", image_pull_policy));
  }
  if (gates.Enabled(common::kPassthroughSupport) && host_root.empty()) {
    return InvalidArgumentError("--host-root is required when PassthroughSupport is enabled");
  }
  if (!fabric_topology_node_label.empty() && !gates.Enabled(common::kFabricTopologySupport)) {
    return InvalidArgumentError(
        "--fabric-topology-node-label (FABRIC_TOPOLOGY_NODE_LABEL) limits FabricTopologySupport to labelled nodes, "
        "but the gate is off: set FABRIC_TOPOLOGY_SUPPORT=true (chart value featureGates.FabricTopologySupport=true) "
        "or leave the label out");
  }
  RETURN_IF_ERROR(XidPolicy::Parse(additional_xids_to_ignore).status());
  ASSIGN_OR_RETURN(const ConsumableShares parsed, ConsumableShares::Parse(consumable_shares));
  const std::string_view shares = consumable_shares;
  if (parsed.enabled() && !gates.Enabled(common::kConsumableShares)) {
    return InvalidArgumentError(fmt::format(
        "--consumable-shares={} needs feature gate ConsumableShares: set "
        "--feature-gates=ConsumableShares=true or --consumable-shares=disabled",
        shares));
  }
  return OkStatus();
}

void AddFlags(CLI::App& app, PluginConfig& config) {
  kubeletplugin::AddKubeletPluginFlags(app, config.plugin);
  WithEnv(app.add_option("--host-root", config.host_root,
                         "Where the host's root file system is mounted (PassthroughSupport)")
              ->capture_default_str(),
          {"HOST_ROOT"});
  WithEnv(app.add_option("--image-name", config.image_name,
                         "Image of this driver, used for MPS control daemons"),
          {"IMAGE_NAME"});
  WithEnv(app.add_option("--image-pull-secrets", config.image_pull_secrets,
                         "Comma-separated image pull secrets for MPS control daemons")
              ->delimiter(','),
          {"IMAGE_PULL_SECRETS"});
  WithEnv(app.add_option("--image-pull-policy", config.image_pull_policy,
                         "Image pull policy for MPS control daemons"),
          {"IMAGE_PULL_POLICY"});
  WithEnv(app.add_option("--service-account-name", config.service_account_name,
                         "Service account for MPS control daemons"),
          {"SERVICE_ACCOUNT_NAME"});
  WithEnv(app.add_option("--additional-xids-to-ignore", config.additional_xids_to_ignore,
                         "Comma-separated XIDs the health check ignores, besides the defaults"),
          {"ADDITIONAL_XIDS_TO_IGNORE"});
  WithEnv(app.add_option("--consumable-shares", config.consumable_shares,
                         "Consumable capacity per device: disabled, memory, unlimited or a "
                         "positive integer (needs ConsumableShares)")
              ->capture_default_str(),
          {"CONSUMABLE_SHARES"});
  WithEnv(app.add_option("--fabric-topology-node-label", config.fabric_topology_node_label,
                         "With FabricTopologySupport on: keep it on only on nodes whose label of this key is "
                         "\"true\" (read at start-up); empty: every node"),
          {"FABRIC_TOPOLOGY_NODE_LABEL"});
  common::AddMetricsFlags(app, config.metrics);
  common::AddKubeClientFlags(app, config.kube_client);
}

StatusOr<XidPolicy> XidPolicy::Parse(std::string_view additional) {
  XidPolicy policy;
  policy.ignored_.insert(std::begin(kApplicationXids), std::end(kApplicationXids));
  while (!Trim(additional).empty()) {
    const auto comma = additional.find(',');
    const std::string_view item = Trim(additional.substr(0, comma));
    std::uint64_t xid = 0;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), xid);
    if (item.empty() || error != std::errc() || end != item.data() + item.size()) {
      return InvalidArgumentError(fmt::format(
          "--additional-xids-to-ignore: \"{}\" is not an XID (ADDITIONAL_XIDS_TO_IGNORE); give comma-separated "
          "unsigned integers such as \"63,64\"",
          item));
    }
    policy.ignored_.insert(xid);
    additional = comma == std::string_view::npos ? std::string_view() : additional.substr(comma + 1);
  }
  return policy;
}

}  // namespace nvdra::gpu
