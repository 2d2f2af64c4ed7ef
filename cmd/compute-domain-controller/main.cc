// compute-domain-controller: the cluster-wide controller that turns
// ComputeDomains into IMEX daemons, claim templates and status
// (src/computedomain/controller/controller.h). Flags as upstream's; with
// leader election, only the Lease holder reconciles, and losing the lease
// ends the process (the pod restarts and stands by again).

#include <chrono>
#include <memory>
#include <random>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/feature_gates.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/metrics_server.h"
#include "common/signals.h"
#include "computedomain/config.h"
#include "computedomain/controller/controller.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/leader_election.h"

namespace {

using namespace nvdra;

// The kernel's IMEX channel count.
constexpr int kMaxChannels = 2048;

// Beyond upstream's flags (upstream hard-codes /templates and channel 0).
struct ExtraFlags {
  std::string templates_dir = "/templates";  // --templates-dir (TEMPLATES_DIR)
  int imex_channel_count = 128;              // --imex-channel-count (IMEX_CHANNEL_COUNT)
  int workers = 4;                           // --workers (WORKERS)
};

void AddExtraFlags(CLI::App& app, ExtraFlags& flags) {
  common::WithEnv(app.add_option("--templates-dir", flags.templates_dir,
                                 "Folder with the compute-domain-*.tmpl.yaml templates")
                      ->capture_default_str(),
                  {"TEMPLATES_DIR"});
  common::WithEnv(app.add_option("--imex-channel-count", flags.imex_channel_count,
                                 "With --imex-isolation=channel: ComputeDomains get channels 1..N-1")
                      ->capture_default_str(),
                  {"IMEX_CHANNEL_COUNT"});
  common::WithEnv(app.add_option("--workers", flags.workers, "ComputeDomains reconciled in parallel")
                      ->capture_default_str(),
                  {"WORKERS"});
}

std::string RandomSuffix() {
  std::random_device device;
  return fmt::format("{:08x}{:08x}", device(), device());
}

int Run(const CLI::App& app, const computedomain::ControllerConfig& config, const ExtraFlags& extra,
        common::FeatureGates gates) {
  if (extra.imex_channel_count < 2 || extra.imex_channel_count > kMaxChannels) {
    return common::ExitForBadFlags(
        app, common::InvalidArgumentError(fmt::format("--imex-channel-count: {} is not within 2..{}",
                                                      extra.imex_channel_count,
                                                      kMaxChannels)));
  }
  if (config.imex.host_managed()) {
    // As upstream: host-managed IMEX has no per-domain daemons, no cliques
    // and no DNS names.
    auto forced = gates.WithOverrides({{std::string(common::kIMEXDaemonsWithDNSNames), false},
                                       {std::string(common::kComputeDomainCliques), false}});
    if (forced.ok()) gates = std::move(*forced);
  }
  auto templates = computedomain::controller::Templates::Load(extra.templates_dir);
  if (!templates.ok() && !config.imex.host_managed()) {
    LOG_ERROR("cannot read the templates", {{"err", templates.status()}});
    return 1;
  }
  auto signals = common::ShutdownSignals::Install();
  if (!signals.ok()) {
    LOG_ERROR("cannot watch shutdown signals", {{"err", signals.status()}});
    return 1;
  }
  common::LogStartup(computedomain::kControllerBinaryName, app, gates);

  auto rest = k8s::LoadConfig(k8s::ConfigSourcesFromEnvironment(config.kube_client));
  if (!rest.ok()) {
    LOG_ERROR("cannot load the API server configuration", {{"err", rest.status()}});
    return 1;
  }
  k8s::ClientOptions client_options;
  // Below the renew deadline, so one hung request cannot keep a stale leader.
  client_options.request_timeout = std::chrono::seconds(8);
  auto client = k8s::Client::New(*rest, client_options);
  if (!client.ok()) {
    LOG_ERROR("cannot create the API client", {{"err", client.status()}});
    return 1;
  }

  // Served by every replica (standbys report nothing but are scrapable).
  common::MetricsRegistry metrics;
  std::unique_ptr<common::MetricsServer> metrics_server;
  if (!config.metrics.http_endpoint.empty()) {
    auto started = common::MetricsServer::Start(metrics, config.metrics.http_endpoint, config.metrics.metrics_path);
    if (!started.ok()) {
      LOG_ERROR("cannot start the metrics server", {{"err", started.status()}});
      return 1;
    }
    metrics_server = *std::move(started);
    LOG_INFO(0, "serving metrics", {{"address", metrics_server->address()}, {"path", metrics_server->path()}});
  }

  computedomain::controller::ControllerOptions options{
      .driver_namespace = config.driver_namespace,
      .additional_namespaces = config.additional_namespaces,
      .image_name = config.image_name,
      .image_pull_secret_names = config.cd_daemon_image_pull_secret_names,
      .log_verbosity_cd_daemon = config.log_verbosity_cd_daemon,
      .max_nodes_per_imex_domain = config.max_nodes_per_imex_domain,
      .host_managed = config.imex.host_managed(),
      .channel_isolation = config.imex.isolation == "channel",
      .imex_channel_count = extra.imex_channel_count,
      .cliques_enabled = gates.Enabled(common::kComputeDomainCliques),
      .daemon_feature_gates = gates.ToString(),
      .templates = templates.ok() ? *templates : computedomain::controller::Templates{},
      .instance = config.pod_name,
      .workers = extra.workers,
      .metrics = &metrics,
  };
  // Runs one controller until `stop`; a failed start ends the process.
  common::Status outcome = common::OkStatus();
  auto lead = [&](std::stop_token stop) {
    auto controller = computedomain::controller::Controller::New(**client, options);
    if (!controller.ok()) {
      outcome = controller.status();
      (*signals)->RequestStop();
      return;
    }
    common::Status status = (*controller)->Run(stop);
    if (!status.ok()) {
      outcome = status;
      (*signals)->RequestStop();
    }
  };

  if (!config.leader_election.enabled) {
    lead((*signals)->token());
  } else {
    const auto& le = config.leader_election;
    k8s::LeaderElectionConfig election;
    election.lease_namespace = le.lease_lock_namespace;
    election.lease_name = le.lease_lock_name;
    election.identity = config.pod_name + "_" + RandomSuffix();
    election.lease_duration = std::chrono::duration_cast<std::chrono::milliseconds>(le.lease_duration);
    election.renew_deadline = std::chrono::duration_cast<std::chrono::milliseconds>(le.renew_deadline);
    election.retry_period = std::chrono::duration_cast<std::chrono::milliseconds>(le.retry_period);
    election.release_on_cancel = true;
    election.field_manager = std::string(computedomain::controller::kFieldManager);
    election.on_started_leading = lead;
    election.on_new_leader = [](const std::string& identity) { LOG_INFO(0, "leader", {{"identity", identity}}); };
    auto elector = k8s::LeaderElector::New(client->get(), std::move(election));
    if (!elector.ok()) {
      LOG_ERROR("cannot set up leader election", {{"err", elector.status()}});
      return 1;
    }
    common::Status status = (*elector)->Run((*signals)->token());
    if (!status.ok() && outcome.ok()) outcome = status;
  }
  if (!outcome.ok()) {
    LOG_ERROR("controller stopped", {{"err", outcome}});
    common::FlushLogs();
    return 1;
  }
  LOG_INFO(0, "shutdown complete");
  common::FlushLogs();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Reconciles ComputeDomains into IMEX daemons, claim templates and status",
               std::string(computedomain::kControllerBinaryName));
  common::CommonFlags common_flags;
  computedomain::ControllerConfig config;
  ExtraFlags extra;
  common::AddCommonFlags(app, common_flags, computedomain::kControllerBinaryName);
  computedomain::AddControllerFlags(app, config);
  AddExtraFlags(app, extra);
  if (auto exit_code = common::ParseFlags(app, argc, argv)) return *exit_code;

  common::StatusOr<common::FeatureGates> gates = common::ApplyCommonFlags(common_flags);
  if (!gates.ok()) return common::ExitForBadFlags(app, gates.status());
  if (common::Status status = config.Validate(*gates); !status.ok()) {
    return common::ExitForBadFlags(app, status);
  }
  return Run(app, config, extra, *gates);
}
