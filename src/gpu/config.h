#pragma once

// Configuration of gpu-kubelet-plugin: every flag (upstream's names and env
// twins), its default, and the checks that need no I/O.
// Ownership: plain values. Thread-safety: thread-compatible.

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/feature_gates.h"
#include "common/flags.h"
#include "common/status.h"
#include "kubeletplugin/flags.h"

namespace CLI {
class App;
}  // namespace CLI

namespace nvdra::gpu {

inline constexpr std::string_view kBinaryName = "gpu-kubelet-plugin";

struct PluginConfig {
  kubeletplugin::KubeletPluginFlags plugin;
  common::KubeClientFlags kube_client;
  common::MetricsFlags metrics;
  std::string host_root = "/host-root";  // --host-root (HOST_ROOT)
  std::string image_name;  // --image-name (IMAGE_NAME), required: MPS control daemons
  std::vector<std::string> image_pull_secrets;  // --image-pull-secrets (IMAGE_PULL_SECRETS), comma-separated
  std::string image_pull_policy;  // --image-pull-policy (IMAGE_PULL_POLICY)
  std::string service_account_name;  // --service-account-name (SERVICE_ACCOUNT_NAME)
  std::string additional_xids_to_ignore;  // --additional-xids-to-ignore (ADDITIONAL_XIDS_TO_IGNORE), CSV
  std::string consumable_shares = "disabled";  // --consumable-shares (CONSUMABLE_SHARES)
  // --fabric-topology-node-label (FABRIC_TOPOLOGY_NODE_LABEL): with
  // FabricTopologySupport on, the gate holds on this node only when its Node
  // has this label set to "true" (read at start-up). Empty: every node.
  std::string fabric_topology_node_label;

  // kInvalidArgument naming the flag. Checks needing the file system (the
  // host root being mounted) belong to the plugin's start-up, not here.
  [[nodiscard]] common::Status Validate(const common::FeatureGates& gates) const;
};

void AddFlags(CLI::App& app, PluginConfig& config);

// Which XIDs the device health check (gpu/device_health.h) counts as
// application errors: tainted with effect None (seen, but the GPU stays
// schedulable and healthy), as upstream.
class XidPolicy {
 public:
  // Upstream's defaults (13, 31, 43, 45, 68, 109) plus `additional`
  // (--additional-xids-to-ignore: comma-separated unsigned integers, spaces
  // allowed); kInvalidArgument naming the flag otherwise.
  static common::StatusOr<XidPolicy> Parse(std::string_view additional);
  [[nodiscard]] bool IsApplicationXid(std::uint64_t xid) const { return ignored_.contains(xid); }
  [[nodiscard]] const std::set<std::uint64_t>& ignored() const { return ignored_; }

 private:
  std::set<std::uint64_t> ignored_;
};

}  // namespace nvdra::gpu
