#pragma once

// Configuration of gpu-kubelet-plugin: every flag (upstream's names and env
// twins), its default, and the checks that need no I/O.
// Ownership: plain values. Thread-safety: thread-compatible.

#include <string>
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

  // kInvalidArgument naming the flag. Checks needing the file system (the
  // host root being mounted) belong to the plugin's start-up, not here.
  [[nodiscard]] common::Status Validate(const common::FeatureGates& gates) const;
};

void AddFlags(CLI::App& app, PluginConfig& config);

}  // namespace nvdra::gpu
