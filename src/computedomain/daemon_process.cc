#include "computedomain/daemon_process.h"

#include <chrono>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "common/child_process.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/metrics_server.h"
#include "computedomain/clique_membership.h"
#include "computedomain/daemon_metrics.h"
#include "computedomain/fabric_health.h"
#include "computedomain/imex_daemon.h"
#include "k8s/client_from_flags.h"
#include "nvml/library.h"

namespace nvdra::computedomain {

common::Status RunDaemonProcess(const DaemonConfig& config, const common::FeatureGates& gates,
                                common::ShutdownSignals& signals) {
  const bool dns_names = gates.Enabled(common::kIMEXDaemonsWithDNSNames);
  RETURN_IF_ERROR(config.ValidateForRun(dns_names));
  // Before the client: a malformed --http-endpoint is refused first. The
  // registry and metrics are declared before what updates them, the server
  // after them (it stops before they go).
  common::MetricsRegistry registry;
  DaemonMetrics metrics(registry);
  ASSIGN_OR_RETURN(std::unique_ptr<common::MetricsServer> metrics_server,
                   common::StartMetricsServerFromFlags(registry, config.metrics).WithContext("--http-endpoint"));
  // Bounds each call, the shutdown's entry removal included.
  k8s::ClientOptions client_options;
  client_options.request_timeout = std::chrono::seconds(10);
  ASSIGN_OR_RETURN(std::unique_ptr<k8s::Client> client, k8s::ClientFromFlags(config.kube_client, "", client_options));

  ImexDaemonOptions options{
      .identity = {.compute_domain_uid = config.compute_domain_uuid,
                   .clique_id = config.clique_id,
                   .node_name = config.node_name,
                   .pod_name = config.pod_name,
                   .pod_namespace = config.pod_namespace,
                   .pod_uid = config.pod_uid,
                   .pod_ip = config.pod_ip},
      .store = gates.Enabled(common::kComputeDomainCliques) ? MembershipStore::kClique
                                                            : MembershipStore::kComputeDomainStatus,
      .compute_domain_name = config.compute_domain_name,
      .compute_domain_namespace = config.compute_domain_namespace,
      .dns_names = dns_names,
      .max_nodes = config.max_nodes_per_imex_domain,
      .imexd_dir = config.imexd_dir,
      .hosts_file = config.hosts_file,
      .config_template = config.imex_config_template,
      .imex_binary = config.imex_binary,
      .imex_ctl_binary = config.imex_ctl_binary,
      .ready_poll_interval = std::chrono::milliseconds(config.imex_ready_poll_interval_ms),
      .stop_grace = std::chrono::seconds(config.imex_stop_grace_seconds),
      .metrics = &metrics};
  CliqueMembership membership(*client, options.identity, MembershipStore::kClique, "", "", &metrics);
  // With a clique ID and the clique store, the daemon's first status write
  // carries the label too (one write instead of two per daemon).
  if (config.clique_id.empty() || options.store != MembershipStore::kClique) {
    if (common::Status status = membership.LabelPod(signals.token()); !status.ok()) {
      return std::move(status).WithContext(
          fmt::format("label pod {}/{} with its clique ID", config.pod_namespace, config.pod_name));
    }
  }
  if (config.clique_id.empty()) {
    // Not on an NVLink fabric: no clique, no IMEX. The controller reads the
    // pod's (empty) label.
    LOG_INFO(0, "no clique ID: not running nvidia-imex; waiting for SIGTERM",
             {{"domain", config.compute_domain_uuid}});
    signals.WaitForShutdown();
    return common::OkStatus();
  }
  // NVML for the fabric health; without it the daemon runs as before (its
  // readiness is nvidia-imex's alone). Declared before the daemon, which
  // reads through it until it is destroyed.
  std::unique_ptr<nvml::Library> nvml;
  auto opened = nvml::Library::Open({.driver_root = config.container_driver_root, .library_path = std::nullopt});
  if (opened.ok()) {
    nvml = *std::move(opened);
    LOG_INFO(1, "NVML loaded: the NVLink fabric health counts for readiness", {{"library", nvml->path()}});
    options.read_fabric = [library = nvml.get()] { return ReadNodeFabric(*library); };
  } else {
    LOG_WARNING("NVML not available: the NVLink fabric health is not checked",
                {{"driverRoot", config.container_driver_root}, {"err", opened.status()}});
  }
  ImexDaemon daemon(*client, std::move(options));
  return daemon.Run(signals.token());
}

common::Status CheckImexReady(const DaemonConfig& config) {
  if (config.clique_id.empty()) {
    LOG_INFO(4, "check passed (no clique ID)", {});
    return common::OkStatus();
  }
  const std::string cfg = config.imexd_dir + "/imexd.cfg";
  auto out = common::RunCommand({.argv = {config.imex_ctl_binary, "-c", cfg, "-q"}}, std::chrono::seconds(30));
  if (!out.ok()) return out.status().WithContext("IMEX daemon check");
  // Upstream compares the combined output, byte for byte.
  if (!out->exit.success() || out->output != "READY\n") {
    return common::UnavailableError(
        fmt::format("IMEX daemon not ready: {}, output: {}", out->exit.ToString(), out->output));
  }
  return common::OkStatus();
}

}  // namespace nvdra::computedomain
