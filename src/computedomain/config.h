#pragma once

// Configuration of the three ComputeDomain binaries: compute-domain-kubelet-plugin,
// compute-domain-controller and compute-domain-daemon. Every flag has upstream's
// name, env twin and default; Validate() performs the checks that need no I/O.
// Ownership: plain values. Thread-safety: thread-compatible.

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

namespace nvdra::computedomain {

inline constexpr std::string_view kPluginBinaryName = "compute-domain-kubelet-plugin";
inline constexpr std::string_view kControllerBinaryName = "compute-domain-controller";
inline constexpr std::string_view kDaemonBinaryName = "compute-domain-daemon";

// Who owns the host's nvidia-imex daemon, and how workloads are isolated.
struct ImexFlags {
  std::string mode = "driverManaged";  // --imex-mode (IMEX_MODE): driverManaged|hostManaged
  std::string isolation = "domain";  // --imex-isolation (IMEX_ISOLATION): domain ("channel" not yet)

  // kInvalidArgument naming the flag: an unknown mode or isolation, hostManaged
  // without gate HostManagedIMEXDaemon, or isolation "channel".
  [[nodiscard]] common::Status Validate(const common::FeatureGates& gates) const;
  [[nodiscard]] bool host_managed() const { return mode == "hostManaged"; }
};
void AddImexFlags(CLI::App& app, ImexFlags& flags);

struct PluginConfig {
  kubeletplugin::KubeletPluginFlags plugin;
  common::KubeClientFlags kube_client;
  common::MetricsFlags metrics;
  ImexFlags imex;
  bool gpu_clique_label_enabled = false;  // --gpu-clique-label-enabled (GPU_CLIQUE_LABEL_ENABLED)
  // --imex-host-socket-path (IMEX_HOST_SOCKET_PATH), hostManaged mode
  std::string imex_host_socket_path = "/etc/nvidia-imex/imex_ctrl.sock";

  [[nodiscard]] common::Status Validate(const common::FeatureGates& gates) const;
};
void AddPluginFlags(CLI::App& app, PluginConfig& config);

struct ControllerConfig {
  common::KubeClientFlags kube_client;
  common::MetricsFlags metrics;
  common::LeaderElectionFlags leader_election;
  ImexFlags imex;
  std::string pod_name;  // --pod-name (POD_NAME), required
  std::string driver_namespace = "default";  // --namespace (NAMESPACE)
  std::string image_name;  // --image-name (IMAGE_NAME), required
  // --cd-daemon-image-pull-secret-names (CD_DAEMON_IMAGE_PULL_SECRET_NAMES), CSV
  std::vector<std::string> cd_daemon_image_pull_secret_names;
  // --log-verbosity-cd-daemon (LOG_VERBOSITY_CD_DAEMON), required; -1 means unset
  int log_verbosity_cd_daemon = -1;
  int max_nodes_per_imex_domain = 18;  // --max-nodes-per-imex-domain (MAX_NODES_PER_IMEX_DOMAIN)
  std::string pprof_path;  // --pprof-path (PPROF_PATH); empty: off
  std::vector<std::string> additional_namespaces;  // --additional-namespaces (ADDITIONAL_NAMESPACES)

  [[nodiscard]] common::Status Validate(const common::FeatureGates& gates) const;
};
void AddControllerFlags(CLI::App& app, ControllerConfig& config);

struct DaemonConfig {
  std::string clique_id;  // --cliqueid (CLIQUE_ID); empty: not on an NVLink fabric
  std::string compute_domain_uuid;  // --compute-domain-uuid (COMPUTE_DOMAIN_UUID)
  std::string compute_domain_name;  // --compute-domain-name (COMPUTE_DOMAIN_NAME)
  std::string compute_domain_namespace = "default";  // (COMPUTE_DOMAIN_NAMESPACE)
  std::string node_name;  // --node-name (NODE_NAME)
  std::string pod_ip;  // --pod-ip (POD_IP)
  std::string pod_uid;  // --pod-uid (POD_UID)
  std::string pod_name;  // --pod-name (POD_NAME)
  std::string pod_namespace;  // --pod-namespace (POD_NAMESPACE)
  int max_nodes_per_imex_domain = 0;  // --max-nodes-per-imex-domain (MAX_NODES_PER_IMEX_DOMAIN)

  // For the `run` subcommand. kFailedPrecondition when COMPUTE_DOMAIN_UUID is
  // missing: the container runtime did not apply the CDI edits that set it.
  [[nodiscard]] common::Status ValidateForRun() const;
};
void AddDaemonFlags(CLI::App& app, DaemonConfig& config);

}  // namespace nvdra::computedomain
