#include "computedomain/controller/process.h"

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "common/log.h"
#include "common/metrics.h"
#include "common/metrics_server.h"
#include "computedomain/controller/controller.h"
#include "k8s/client_from_flags.h"
#include "k8s/leader_election.h"

namespace nvdra::computedomain::controller {
namespace {

std::string RandomSuffix() {
  std::random_device device;
  return fmt::format("{:08x}{:08x}", device(), device());
}

k8s::LeaderElectionConfig ElectionConfig(const ControllerConfig& config) {
  const common::LeaderElectionFlags& flags = config.leader_election;
  k8s::LeaderElectionConfig election;
  election.lease_namespace = flags.lease_lock_namespace;
  election.lease_name = flags.lease_lock_name;
  election.identity = config.pod_name + "_" + RandomSuffix();
  election.lease_duration = std::chrono::duration_cast<std::chrono::milliseconds>(flags.lease_duration);
  election.renew_deadline = std::chrono::duration_cast<std::chrono::milliseconds>(flags.renew_deadline);
  election.retry_period = std::chrono::duration_cast<std::chrono::milliseconds>(flags.retry_period);
  election.release_on_cancel = true;
  election.field_manager = std::string(kFieldManager);
  election.on_new_leader = [](const std::string& identity) { LOG_INFO(0, "leader", {{"identity", identity}}); };
  return election;
}

}  // namespace

common::Status RunControllerProcess(const ControllerConfig& config, common::FeatureGates gates,
                                    common::ShutdownSignals& signals) {
  if (config.imex.host_managed()) {
    auto forced = gates.WithOverrides({{std::string(common::kIMEXDaemonsWithDNSNames), false},
                                       {std::string(common::kComputeDomainCliques), false}});
    if (forced.ok()) gates = std::move(*forced);
  }
  // Host-managed IMEX runs no daemons, so it needs no templates.
  common::StatusOr<Templates> templates = Templates::Load(config.templates_dir);
  if (!templates.ok() && !config.imex.host_managed()) return templates.status().WithContext("read the templates");

  k8s::ClientOptions client_options;
  // Below the renew deadline, so one hung request cannot keep a stale leader.
  client_options.request_timeout = std::chrono::seconds(8);
  ASSIGN_OR_RETURN(std::unique_ptr<k8s::Client> client, k8s::ClientFromFlags(config.kube_client, "", client_options));

  // Served by every replica (standbys report nothing but are scrapable).
  common::MetricsRegistry metrics;
  ASSIGN_OR_RETURN(std::unique_ptr<common::MetricsServer> metrics_server,
                   common::StartMetricsServerFromFlags(metrics, config.metrics).WithContext("start the metrics server"));

  const ControllerOptions options{
      .driver_namespace = config.driver_namespace,
      .additional_namespaces = config.additional_namespaces,
      .image_name = config.image_name,
      .image_pull_secret_names = config.cd_daemon_image_pull_secret_names,
      .log_verbosity_cd_daemon = config.log_verbosity_cd_daemon,
      .max_nodes_per_imex_domain = config.max_nodes_per_imex_domain,
      .host_managed = config.imex.host_managed(),
      .channel_isolation = config.imex.isolation == "channel",
      .imex_channel_count = config.imex_channel_count,
      .cliques_enabled = gates.Enabled(common::kComputeDomainCliques),
      .daemon_feature_gates = gates.ToString(),
      .templates = templates.ok() ? *templates : Templates{},
      .instance = config.pod_name,
      .workers = config.workers,
      .daemon_http_endpoint = config.cd_daemon_http_endpoint,
      .daemon_metrics_path = config.cd_daemon_metrics_path,
      .daemon_metrics_port = config.cd_daemon_http_endpoint.empty()
                                 ? 0
                                 : common::MetricsEndpointPort(config.cd_daemon_http_endpoint).value_or(0),
      .metrics = &metrics,
  };
  // Runs one controller until `stop`; a failure ends the process.
  common::Status outcome = common::OkStatus();
  auto lead = [&](std::stop_token stop) {
    auto controller = Controller::New(*client, options);
    common::Status status = controller.ok() ? (*controller)->Run(stop) : controller.status();
    if (!status.ok()) {
      outcome = status;
      signals.RequestStop();
    }
  };
  if (!config.leader_election.enabled) {
    lead(signals.token());
    return outcome;
  }
  k8s::LeaderElectionConfig election = ElectionConfig(config);
  election.on_started_leading = lead;
  common::StatusOr<std::unique_ptr<k8s::LeaderElector>> elector =
      k8s::LeaderElector::New(client.get(), std::move(election));
  if (!elector.ok()) return elector.status().WithContext("set up leader election");
  common::Status status = (*elector)->Run(signals.token());
  if (!status.ok() && outcome.ok()) outcome = status;
  return outcome;
}

}  // namespace nvdra::computedomain::controller
