// compute-domain-daemon: runs next to nvidia-imex in each ComputeDomain's
// daemon pod. `run` labels the pod, joins the ComputeDomainClique and
// supervises nvidia-imex (src/computedomain/imex_daemon.h); `check` is the
// pod's probe: nvidia-imex-ctl -q must answer exactly "READY\n".

#include <chrono>
#include <string>

#include <CLI/CLI.hpp>

#include "common/child_process.h"
#include "common/feature_gates.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/signals.h"
#include "computedomain/clique_membership.h"
#include "computedomain/config.h"
#include "computedomain/imex_daemon.h"
#include "k8s/client.h"
#include "k8s/config.h"

namespace {

using namespace nvdra;

int Run(const CLI::App& app, const computedomain::DaemonConfig& config, const common::FeatureGates& gates) {
  const bool dns_names = gates.Enabled(common::kIMEXDaemonsWithDNSNames);
  if (common::Status status = config.ValidateForRun(dns_names); !status.ok()) {
    LOG_ERROR("cannot start", {{"err", status}});
    return 1;
  }
  auto signals = common::ShutdownSignals::Install();
  if (!signals.ok()) {
    LOG_ERROR("cannot watch shutdown signals", {{"err", signals.status()}});
    return 1;
  }
  common::LogStartup(computedomain::kDaemonBinaryName, app, gates);

  auto rest = k8s::LoadConfig(k8s::ConfigSourcesFromEnvironment(config.kube_client));
  if (!rest.ok()) {
    LOG_ERROR("cannot load the API server configuration", {{"err", rest.status()}});
    return 1;
  }
  // Bounds each call, the shutdown's entry removal included.
  k8s::ClientOptions client_options;
  client_options.request_timeout = std::chrono::seconds(10);
  auto client = k8s::Client::New(*rest, client_options);
  if (!client.ok()) {
    LOG_ERROR("cannot create the API client", {{"err", client.status()}});
    return 1;
  }
  computedomain::ImexDaemonOptions options{
      .identity = {.compute_domain_uid = config.compute_domain_uuid,
                   .clique_id = config.clique_id,
                   .node_name = config.node_name,
                   .pod_name = config.pod_name,
                   .pod_namespace = config.pod_namespace,
                   .pod_uid = config.pod_uid,
                   .pod_ip = config.pod_ip},
      .store = gates.Enabled(common::kComputeDomainCliques) ? computedomain::MembershipStore::kClique
                                                            : computedomain::MembershipStore::kComputeDomainStatus,
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
      .stop_grace = std::chrono::seconds(config.imex_stop_grace_seconds)};
  computedomain::CliqueMembership membership(**client, options.identity);
  // With a clique ID and the clique store, the daemon's first status write
  // carries the label too (one write instead of two per daemon).
  const bool label_now = config.clique_id.empty() || options.store != computedomain::MembershipStore::kClique;
  if (common::Status status = label_now ? membership.LabelPod((*signals)->token()) : common::OkStatus();
      !status.ok()) {
    LOG_ERROR("cannot label this pod with its clique ID", {{"pod", config.pod_namespace + "/" + config.pod_name},
                                                           {"err", status}});
    return 1;
  }
  if (config.clique_id.empty()) {
    // Not on an NVLink fabric: no clique, no IMEX. The controller reads the
    // pod's (empty) label.
    LOG_INFO(0, "no clique ID: not running nvidia-imex; waiting for SIGTERM",
             {{"domain", config.compute_domain_uuid}});
    const int signal_number = (*signals)->WaitForShutdown();
    LOG_INFO(0, "shutdown complete", {{"signal", signal_number}});
    return 0;
  }
  computedomain::ImexDaemon daemon(**client, std::move(options));
  if (common::Status status = daemon.Run((*signals)->token()); !status.ok()) {
    LOG_ERROR("daemon failed", {{"err", status}});
    return 1;
  }
  LOG_INFO(0, "shutdown complete", {{"signal", (*signals)->received_signal()}});
  return 0;
}

int Check(const computedomain::DaemonConfig& config) {
  // Not on an NVLink fabric: nothing to be ready for, as upstream.
  if (config.clique_id.empty()) {
    LOG_INFO(4, "check passed (no clique ID)", {});
    return 0;
  }
  const std::string cfg = config.imexd_dir + "/imexd.cfg";
  auto out = common::RunCommand({.argv = {config.imex_ctl_binary, "-c", cfg, "-q"}}, std::chrono::seconds(30));
  if (!out.ok()) {
    LOG_ERROR("IMEX daemon check failed", {{"err", out.status()}});
    return 1;
  }
  // Upstream compares the combined output, byte for byte.
  if (!out->exit.success() || out->output != "READY\n") {
    LOG_ERROR("IMEX daemon not ready", {{"exit", out->exit.ToString()}, {"output", out->output}});
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Runs and watches nvidia-imex for one ComputeDomain on this node",
               std::string(computedomain::kDaemonBinaryName));
  common::CommonFlags common_flags;
  computedomain::DaemonConfig config;
  common::AddCommonFlags(app, common_flags, computedomain::kDaemonBinaryName);
  computedomain::AddDaemonFlags(app, config);
  CLI::App* run = app.add_subcommand("run", "Run and supervise the IMEX daemon");
  CLI::App* check = app.add_subcommand("check", "Probe: succeed when the IMEX daemon is ready");
  app.require_subcommand(1);
  // Upstream takes global flags after the subcommand too ("run -v 4").
  run->fallthrough();
  check->fallthrough();
  if (auto exit_code = common::ParseFlags(app, argc, argv)) return *exit_code;

  common::StatusOr<common::FeatureGates> gates = common::ApplyCommonFlags(common_flags);
  if (!gates.ok()) return common::ExitForBadFlags(app, gates.status());

  const int exit_code = run->parsed() ? Run(app, config, *gates) : Check(config);
  common::FlushLogs();
  return exit_code;
}
