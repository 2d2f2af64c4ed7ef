#pragma once

// compute-domain-controller's settings, from its flags (cmd/compute-domain-
// controller), and the names every part of the controller writes with.
// Defines: ControllerOptions, kFinalizer, kTargetLabel, kFieldManager,
// kReportingController, DaemonObjectName().
//
// Ownership: a value; `metrics` is borrowed. Thread-safety: immutable once
// the controller holds it.

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "common/metrics.h"
#include "computedomain/controller/templates.h"

namespace nvdra::computedomain::controller {

inline constexpr std::string_view kFinalizer = "resource.nvidia.com/computeDomain";
inline constexpr std::string_view kTargetLabel = "resource.nvidia.com/computeDomainTarget";
inline constexpr std::string_view kFieldManager = "compute-domain-controller";
inline constexpr std::string_view kReportingController = "resource.nvidia.com/compute-domain-controller";

// "computedomain-daemon-<uid>": the DaemonSet and the daemon claim template.
std::string DaemonObjectName(std::string_view cd_uid);

struct ControllerOptions {
  std::string driver_namespace = "default";
  // --additional-namespaces: where an earlier installation may have put a
  // domain's DaemonSet. One found there is used instead of creating one in
  // driver_namespace (upstream's migration path), and is removed with the
  // domain or as stale, like ours.
  std::vector<std::string> additional_namespaces;
  std::string image_name;
  std::vector<std::string> image_pull_secret_names;
  int log_verbosity_cd_daemon = 0;
  int max_nodes_per_imex_domain = 18;
  bool host_managed = false;
  // --imex-isolation=channel: a channel per domain, in [1, imex_channel_count).
  bool channel_isolation = false;
  int imex_channel_count = 128;
  bool cliques_enabled = true;  // gate ComputeDomainCliques: entries in cliques, else in status.nodes
  std::string daemon_feature_gates;  // FEATURE_GATES for the daemons; empty: not set
  Templates templates;
  std::string instance;  // this replica (pod name), for Events
  int workers = 4;
  // The daemons' metrics (--cd-daemon-http-endpoint, validated); empty
  // endpoint: none. The port is the endpoint's, for the container port.
  std::string daemon_http_endpoint;
  std::string daemon_metrics_path = "/metrics";
  int daemon_metrics_port = 0;
  std::chrono::seconds sync_timeout{120};
  // Borrowed, may be null: nvidia_dra_compute_domain_info{status} (as
  // upstream) and nvdra_compute_domain_controller_{reconciles,api_writes}_total.
  common::MetricsRegistry* metrics = nullptr;
  // Stale-object cleanup after start, repeated this often (0: start only).
  std::chrono::seconds cleanup_interval{600};

  // Whether daemons and their clique entries are this controller's business
  // (not with --imex-mode=hostManaged).
  bool ManagesDaemons() const { return !host_managed; }
  // Whether clique entries live in ComputeDomainCliques (else in status.nodes).
  bool WritesCliques() const { return cliques_enabled && !host_managed; }
};

}  // namespace nvdra::computedomain::controller
