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
// The kernel's IMEX channel count (upstream hard-codes it too).
inline constexpr int kMaxImexChannelCount = 2048;
// The daemon pods' metrics container port (the chart's PodMonitor scrapes it
// by this name; at most 15 characters, as every port name).
inline constexpr std::string_view kDaemonMetricsPortName = "metrics-daemon";

// Who owns the host's nvidia-imex daemon, and how workloads are isolated.
struct ImexFlags {
  std::string mode = "driverManaged";  // --imex-mode (IMEX_MODE): driverManaged|hostManaged
  std::string isolation = "domain";  // --imex-isolation (IMEX_ISOLATION): domain|channel

  // kInvalidArgument naming the flag: an unknown mode or isolation, or
  // hostManaged without gate HostManagedIMEXDaemon.
  [[nodiscard]] common::Status Validate(const common::FeatureGates& gates) const;
  [[nodiscard]] bool host_managed() const { return mode == "hostManaged"; }
  [[nodiscard]] bool channel_isolation() const { return isolation == "channel"; }
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
  // --imex-channel-count (IMEX_CHANNEL_COUNT): channels published with
  // --imex-isolation=channel, 1..kMaxImexChannelCount.
  int imex_channel_count = 128;

  [[nodiscard]] common::Status Validate(const common::FeatureGates& gates) const;
};
void AddFlags(CLI::App& app, PluginConfig& config);

struct ControllerConfig {
  // Defaults 20/40, not client-go's 5/10 (upstream's, kept by the other
  // binaries): the controller alone writes what upstream's daemons and
  // plugins each wrote with their own budget (every clique entry, and node
  // labels at allocation), and at 18 nodes it makes ~47 writes in 7 s, which
  // 5/s would pace (bench/README.md). kube-controller-manager's own default
  // is 20.
  common::KubeClientFlags kube_client{.kubeconfig = "", .qps = 20, .burst = 40};
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
  // Beyond upstream's flags (upstream hard-codes /templates and channel 0):
  std::string templates_dir = "/templates";  // --templates-dir (TEMPLATES_DIR)
  // --imex-channel-count (IMEX_CHANNEL_COUNT): with --imex-isolation=channel,
  // domains get channels 1..N-1; 2..kMaxImexChannelCount.
  int imex_channel_count = 128;
  int workers = 4;  // --workers (WORKERS): ComputeDomains reconciled in parallel
  // --cd-daemon-http-endpoint (CD_DAEMON_HTTP_ENDPOINT) and
  // --cd-daemon-metrics-path (CD_DAEMON_METRICS_PATH): the daemons' metrics
  // endpoint (their --http-endpoint/--metrics-path), with a container port
  // named kDaemonMetricsPortName; empty endpoint: daemons serve no metrics.
  std::string cd_daemon_http_endpoint;
  std::string cd_daemon_metrics_path = "/metrics";

  [[nodiscard]] common::Status Validate(const common::FeatureGates& gates) const;
};
void AddFlags(CLI::App& app, ControllerConfig& config);

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

  // Beyond upstream, which only knows the in-cluster config: --kubeconfig
  // (KUBECONFIG), --kube-api-qps, --kube-api-burst, for a daemon outside a
  // pod (tests, debugging). Empty kubeconfig: in-cluster.
  common::KubeClientFlags kube_client;
  // --http-endpoint (HTTP_ENDPOINT), --metrics-path (METRICS_PATH): `run`
  // serves its metrics there (daemon_metrics.h); empty endpoint: off, as
  // the other binaries. Beyond upstream, whose daemon serves none.
  common::MetricsFlags metrics;
  // Where the pod's files are. Upstream hard-codes these; the defaults are its
  // paths, and tests point them into a folder per simulated node.
  std::string imexd_dir = "/imexd";  // --imexd-dir (IMEXD_DIR): imexd.cfg, nodes.cfg
  std::string hosts_file = "/etc/hosts";  // --hosts-file (HOSTS_FILE)
  std::string imex_binary = "nvidia-imex";  // --imex-binary (IMEX_BINARY), PATH lookup
  std::string imex_ctl_binary = "nvidia-imex-ctl";  // --imex-ctl-binary (IMEX_CTL_BINARY)
  // --imex-config-template (IMEX_CONFIG_TEMPLATE): read when the kubelet
  // plugin did not put <imexd-dir>/imexd.cfg.tmpl there (it copies the same
  // file, shipped in the image at /templates).
  std::string imex_config_template = "/templates/compute-domain-daemon-config.tmpl.cfg";
  // --imex-ready-poll-interval-ms (IMEX_READY_POLL_INTERVAL_MS): how often a
  // Ready nvidia-imex is asked again (not-ready ones are asked every 25 ms).
  int imex_ready_poll_interval_ms = 1000;
  // --imex-stop-grace-seconds (IMEX_STOP_GRACE_SECONDS): SIGTERM to SIGKILL.
  int imex_stop_grace_seconds = 10;
  // --container-driver-root (DRIVER_ROOT_CTR_PATH, the plugins' name): where
  // NVML is loaded from to read the NVLink fabric health. The daemon claim's
  // CDI edits mount the driver's libraries at their usual paths, so "/" in
  // the pod; tests point it at a mock driver root.
  std::string container_driver_root = "/";

  // For the `run` subcommand. kFailedPrecondition when COMPUTE_DOMAIN_UUID is
  // missing: the container runtime did not apply the CDI edits that set it.
  // kInvalidArgument naming the flag for a negative or zero count or
  // interval, a --metrics-path not starting with '/', and, with a clique ID, for missing pod or node identity or
  // (with `dns_names`) --max-nodes-per-imex-domain of 0.
  [[nodiscard]] common::Status ValidateForRun(bool dns_names = false) const;
};
void AddFlags(CLI::App& app, DaemonConfig& config);

}  // namespace nvdra::computedomain
