#include "computedomain/config.h"

#include <string_view>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/metrics_server.h"

namespace nvdra::computedomain {

using common::FailedPreconditionError;
using common::InvalidArgumentError;
using common::OkStatus;
using common::Status;
using common::WithEnv;

namespace {

// A DNS-1123 label, what a namespace name must be.
bool IsDnsLabel(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  const auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  for (char c : name) {
    if (!alnum(c) && c != '-') return false;
  }
  return true;
}

}  // namespace

Status ImexFlags::Validate(const common::FeatureGates& gates) const {
  if (mode == "hostManaged") {
    if (!gates.Enabled(common::kHostManagedIMEXDaemon)) {
      return InvalidArgumentError(
          "--imex-mode=hostManaged needs feature gate HostManagedIMEXDaemon: set "
          "--feature-gates=HostManagedIMEXDaemon=true or --imex-mode=driverManaged");
    }
  } else if (mode != "driverManaged") {
    return InvalidArgumentError(
        fmt::format("--imex-mode: \"{}\" is not driverManaged or hostManaged", mode));
  }
  if (isolation != "domain" && isolation != "channel" && !isolation.empty()) {
    return InvalidArgumentError(
        fmt::format("--imex-isolation: \"{}\" is not domain or channel", isolation));
  }
  return OkStatus();
}

void AddImexFlags(CLI::App& app, ImexFlags& flags) {
  WithEnv(app.add_option("--imex-mode", flags.mode,
                         "Who runs nvidia-imex: driverManaged (per-domain daemons) or hostManaged")
              ->capture_default_str(),
          {"IMEX_MODE"});
  WithEnv(app.add_option("--imex-isolation", flags.isolation,
                         "IMEX isolation between workloads: domain (channel 0 for every ComputeDomain, as "
                         "upstream) or channel (one channel per ComputeDomain)")
              ->capture_default_str(),
          {"IMEX_ISOLATION"});
}

Status PluginConfig::Validate(const common::FeatureGates& gates) const {
  if (Status status = plugin.Validate(); !status.ok()) return status;
  if (Status status = kube_client.Validate(); !status.ok()) return status;
  if (Status status = metrics.Validate(); !status.ok()) return status;
  if (Status status = imex.Validate(gates); !status.ok()) return status;
  if (imex_channel_count < 1 || imex_channel_count > kMaxImexChannelCount) {
    return InvalidArgumentError(fmt::format("--imex-channel-count: {} is not within 1..{}", imex_channel_count,
                                            kMaxImexChannelCount));
  }
  if (imex.host_managed() && imex_host_socket_path.empty()) {
    return InvalidArgumentError("--imex-host-socket-path is required with --imex-mode=hostManaged");
  }
  return OkStatus();
}

void AddFlags(CLI::App& app, PluginConfig& config) {
  kubeletplugin::AddKubeletPluginFlags(app, config.plugin);
  WithEnv(app.add_flag("--gpu-clique-label-enabled", config.gpu_clique_label_enabled,
                       "Label the node with its GPU clique (nvidia.com/gpu.clique)"),
          {"GPU_CLIQUE_LABEL_ENABLED"});
  AddImexFlags(app, config.imex);
  WithEnv(app.add_option("--imex-host-socket-path", config.imex_host_socket_path,
                         "Control socket of the host's nvidia-imex (hostManaged mode)")
              ->capture_default_str(),
          {"IMEX_HOST_SOCKET_PATH"});
  WithEnv(app.add_option("--imex-channel-count", config.imex_channel_count,
                         "Channels published per node with --imex-isolation=channel (channel-0..channel-<N-1>)")
              ->capture_default_str(),
          {"IMEX_CHANNEL_COUNT"});
  common::AddMetricsFlags(app, config.metrics);
  common::AddKubeClientFlags(app, config.kube_client);
}

Status ControllerConfig::Validate(const common::FeatureGates& gates) const {
  if (pod_name.empty()) return InvalidArgumentError("--pod-name (POD_NAME) is required");
  if (driver_namespace.empty()) return InvalidArgumentError("--namespace must not be empty");
  if (image_name.empty()) return InvalidArgumentError("--image-name (IMAGE_NAME) is required");
  if (log_verbosity_cd_daemon < 0) {
    return InvalidArgumentError(
        "--log-verbosity-cd-daemon (LOG_VERBOSITY_CD_DAEMON) is required and must be >= 0");
  }
  if (max_nodes_per_imex_domain <= 0) {
    return InvalidArgumentError(fmt::format(
        "--max-nodes-per-imex-domain: must be positive, got {}", max_nodes_per_imex_domain));
  }
  if (!pprof_path.empty() && pprof_path.front() != '/') {
    return InvalidArgumentError(
        fmt::format("--pprof-path: \"{}\" must start with '/'", pprof_path));
  }
  for (const std::string& ns : additional_namespaces) {
    if (!IsDnsLabel(ns)) {
      return InvalidArgumentError(fmt::format(
          "--additional-namespaces (ADDITIONAL_NAMESPACES): \"{}\" is not a namespace name (lower-case letters, "
          "digits and '-', at most 63, starting and ending with a letter or digit)",
          ns));
    }
  }
  if (imex_channel_count < 2 || imex_channel_count > kMaxImexChannelCount) {
    return InvalidArgumentError(fmt::format("--imex-channel-count: {} is not within 2..{}", imex_channel_count,
                                            kMaxImexChannelCount));
  }
  if (workers < 1) return InvalidArgumentError(fmt::format("--workers: must be positive, got {}", workers));
  if (!cd_daemon_http_endpoint.empty()) {
    common::StatusOr<int> port = common::MetricsEndpointPort(cd_daemon_http_endpoint);
    if (!port.ok()) {
      return InvalidArgumentError(fmt::format("--cd-daemon-http-endpoint (CD_DAEMON_HTTP_ENDPOINT): {}",
                                              port.status().message()));
    }
    if (*port == 0) {
      return InvalidArgumentError(fmt::format(
          "--cd-daemon-http-endpoint (CD_DAEMON_HTTP_ENDPOINT): \"{}\" has no fixed port; the daemon pods' "
          "metrics container port needs one, e.g. \":8082\"",
          cd_daemon_http_endpoint));
    }
  }
  if (cd_daemon_metrics_path.empty() || cd_daemon_metrics_path.front() != '/') {
    return InvalidArgumentError(fmt::format(
        "--cd-daemon-metrics-path (CD_DAEMON_METRICS_PATH): \"{}\" must start with '/'", cd_daemon_metrics_path));
  }
  if (Status status = kube_client.Validate(); !status.ok()) return status;
  if (Status status = metrics.Validate(); !status.ok()) return status;
  if (Status status = leader_election.Validate(); !status.ok()) return status;
  return imex.Validate(gates);
}

void AddFlags(CLI::App& app, ControllerConfig& config) {
  WithEnv(app.add_option("--pod-name", config.pod_name, "Name of this controller's pod"),
          {"POD_NAME"});
  WithEnv(app.add_option("--namespace", config.driver_namespace, "Namespace of the driver")
              ->capture_default_str(),
          {"NAMESPACE"});
  WithEnv(app.add_option("--image-name", config.image_name,
                         "Image of this driver, used for compute-domain daemons"),
          {"IMAGE_NAME"});
  WithEnv(app.add_option("--cd-daemon-image-pull-secret-names",
                         config.cd_daemon_image_pull_secret_names,
                         "Comma-separated image pull secrets for compute-domain daemons")
              ->delimiter(','),
          {"CD_DAEMON_IMAGE_PULL_SECRET_NAMES"});
  WithEnv(app.add_option("--log-verbosity-cd-daemon", config.log_verbosity_cd_daemon,
                         "-v passed to compute-domain daemons"),
          {"LOG_VERBOSITY_CD_DAEMON"});
  WithEnv(app.add_option("--max-nodes-per-imex-domain", config.max_nodes_per_imex_domain,
                         "Most nodes in one IMEX domain")
              ->capture_default_str(),
          {"MAX_NODES_PER_IMEX_DOMAIN"});
  AddImexFlags(app, config.imex);
  common::AddMetricsFlags(app, config.metrics);
  WithEnv(app.add_option("--pprof-path", config.pprof_path,
                         "HTTP path for profiling data; empty disables it"),
          {"PPROF_PATH"});
  WithEnv(app.add_option("--additional-namespaces", config.additional_namespaces,
                         "Comma-separated namespaces, besides --namespace, for daemon DaemonSets")
              ->delimiter(','),
          {"ADDITIONAL_NAMESPACES"});
  WithEnv(app.add_option("--templates-dir", config.templates_dir,
                         "Folder with the compute-domain-*.tmpl.yaml templates")
              ->capture_default_str(),
          {"TEMPLATES_DIR"});
  WithEnv(app.add_option("--imex-channel-count", config.imex_channel_count,
                         "With --imex-isolation=channel: ComputeDomains get channels 1..N-1")
              ->capture_default_str(),
          {"IMEX_CHANNEL_COUNT"});
  WithEnv(app.add_option("--workers", config.workers, "ComputeDomains reconciled in parallel")->capture_default_str(),
          {"WORKERS"});
  WithEnv(app.add_option("--cd-daemon-http-endpoint", config.cd_daemon_http_endpoint,
                         "Metrics endpoint (host:port) of the compute-domain daemons, with a container port "
                         "named metrics-daemon; empty: daemons serve no metrics"),
          {"CD_DAEMON_HTTP_ENDPOINT"});
  WithEnv(app.add_option("--cd-daemon-metrics-path", config.cd_daemon_metrics_path,
                         "HTTP path of the compute-domain daemons' metrics")
              ->capture_default_str(),
          {"CD_DAEMON_METRICS_PATH"});
  common::AddKubeClientFlags(app, config.kube_client);
  common::AddLeaderElectionFlags(app, config.leader_election);
}

Status DaemonConfig::ValidateForRun(bool dns_names) const {
  if (compute_domain_uuid.empty()) {
    return FailedPreconditionError(
        "--compute-domain-uuid (COMPUTE_DOMAIN_UUID) is empty: the CDI edits of the daemon's "
        "claim were not applied; is CDI enabled in the container runtime?");
  }
  if (max_nodes_per_imex_domain < 0) {
    return InvalidArgumentError(fmt::format(
        "--max-nodes-per-imex-domain: must not be negative, got {}", max_nodes_per_imex_domain));
  }
  if (imex_ready_poll_interval_ms <= 0) {
    return InvalidArgumentError(fmt::format("--imex-ready-poll-interval-ms: must be positive, got {}",
                                            imex_ready_poll_interval_ms));
  }
  if (imex_stop_grace_seconds < 0) {
    return InvalidArgumentError(
        fmt::format("--imex-stop-grace-seconds: must not be negative, got {}", imex_stop_grace_seconds));
  }
  RETURN_IF_ERROR(kube_client.Validate());
  RETURN_IF_ERROR(metrics.Validate());
  if (pod_name.empty() || pod_namespace.empty()) {
    return InvalidArgumentError("--pod-name (POD_NAME) and --pod-namespace (POD_NAMESPACE) are required");
  }
  if (clique_id.empty()) return OkStatus();
  for (const auto& [flag, value] : {std::pair<std::string_view, const std::string&>{"--node-name (NODE_NAME)", node_name},
                                    {"--pod-ip (POD_IP)", pod_ip},
                                    {"--pod-uid (POD_UID)", pod_uid}}) {
    if (value.empty()) return InvalidArgumentError(fmt::format("{} is required with a clique ID", flag));
  }
  if (dns_names && max_nodes_per_imex_domain == 0) {
    return InvalidArgumentError(
        "--max-nodes-per-imex-domain (MAX_NODES_PER_IMEX_DOMAIN) must be set with IMEXDaemonsWithDNSNames: it "
        "sizes the static nodes file");
  }
  return OkStatus();
}

void AddFlags(CLI::App& app, DaemonConfig& config) {
  const auto add = [&app](const std::string& flag, std::string& target, const std::string& help,
                          std::string_view env) {
    WithEnv(app.add_option(flag, target, help), {env});
  };
  add("--cliqueid", config.clique_id, "NVLink clique ID of this node", "CLIQUE_ID");
  add("--compute-domain-uuid", config.compute_domain_uuid, "UID of the ComputeDomain",
      "COMPUTE_DOMAIN_UUID");
  add("--compute-domain-name", config.compute_domain_name, "Name of the ComputeDomain",
      "COMPUTE_DOMAIN_NAME");
  WithEnv(app.add_option("--compute-domain-namespace", config.compute_domain_namespace,
                         "Namespace of the ComputeDomain")
              ->capture_default_str(),
          {"COMPUTE_DOMAIN_NAMESPACE"});
  add("--node-name", config.node_name, "Name of this node", "NODE_NAME");
  add("--pod-ip", config.pod_ip, "IP address of this pod", "POD_IP");
  add("--pod-uid", config.pod_uid, "UID of this pod", "POD_UID");
  add("--pod-name", config.pod_name, "Name of this pod", "POD_NAME");
  add("--pod-namespace", config.pod_namespace, "Namespace of this pod", "POD_NAMESPACE");
  WithEnv(app.add_option("--max-nodes-per-imex-domain", config.max_nodes_per_imex_domain,
                         "Most nodes in one IMEX domain"),
          {"MAX_NODES_PER_IMEX_DOMAIN"});
  common::AddKubeClientFlags(app, config.kube_client);
  common::AddMetricsFlags(app, config.metrics);
  const auto add_path = [&app](const std::string& flag, std::string& target, const std::string& help,
                               std::string_view env) {
    WithEnv(app.add_option(flag, target, help)->capture_default_str(), {env});
  };
  add_path("--imexd-dir", config.imexd_dir, "Folder of imexd.cfg(.tmpl) and nodes.cfg", "IMEXD_DIR");
  add_path("--hosts-file", config.hosts_file, "Hosts file holding the IMEX peers' DNS names", "HOSTS_FILE");
  add_path("--imex-binary", config.imex_binary, "The nvidia-imex binary", "IMEX_BINARY");
  add_path("--imex-ctl-binary", config.imex_ctl_binary, "The nvidia-imex-ctl binary", "IMEX_CTL_BINARY");
  add_path("--imex-config-template", config.imex_config_template,
           "IMEX config template, used when <imexd-dir>/imexd.cfg.tmpl is absent", "IMEX_CONFIG_TEMPLATE");
  WithEnv(app.add_option("--imex-ready-poll-interval-ms", config.imex_ready_poll_interval_ms,
                         "How often a ready nvidia-imex is asked for its state again")
              ->capture_default_str(),
          {"IMEX_READY_POLL_INTERVAL_MS"});
  WithEnv(app.add_option("--imex-stop-grace-seconds", config.imex_stop_grace_seconds,
                         "Seconds from SIGTERM to SIGKILL when stopping nvidia-imex")
              ->capture_default_str(),
          {"IMEX_STOP_GRACE_SECONDS"});
  add_path("--container-driver-root", config.container_driver_root,
           "Where this container sees the NVIDIA driver (NVML, for the NVLink fabric health)", "DRIVER_ROOT_CTR_PATH");
}

}  // namespace nvdra::computedomain
