#pragma once

// DaemonMetrics: the compute-domain daemon's own Prometheus series, updated by
// ImexDaemon and CliqueMembership and served by `compute-domain-daemon run`
// with --http-endpoint (docs/monitoring.md). Upstream's daemon serves none.
// Every label takes values from a fixed set (states, reasons, file names,
// verbs), so each daemon pod has a bounded number of series.
//
// Defines: DaemonMetrics, kImexStates, ImexStateFromCtlAnswer(),
// ImexStartReason, DaemonFile, CountListWatchErrors().
//
// Ownership: registers its families in the registry, which must outlive it.
// Thread-safety: thread-safe (each update is one registry update; the
// registry is thread-safe).

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "common/metrics.h"
#include "k8s/cache/list_watch.h"

namespace nvdra::computedomain {

struct CliqueMember;

// What `nvidia-imex-ctl -q` prints, one word (NVIDIA's IMEX guide; the
// simulated nvidia-imex of test/simimex prints the same), and two of ours:
// NOT_RUNNING (no nvidia-imex process: before its start, between a crash and
// the restart) and UNKNOWN (nvidia-imex-ctl failed or printed something else).
inline constexpr std::array<std::string_view, 10> kImexStates = {
    "INITIALIZING", "STARTING_AUTH_SERVER", "WAITING_FOR_PEERS", "WAITING_FOR_RECOVERY", "INIT_GPU",
    "READY",        "SHUTTING_DOWN",        "UNAVAILABLE",       "NOT_RUNNING",          "UNKNOWN"};

// The state `nvidia-imex-ctl -q` reported in `output` (one word of
// kImexStates, trailing whitespace ignored); "UNKNOWN" for anything else.
std::string_view ImexStateFromCtlAnswer(std::string_view output);

// Why nvidia-imex was (re)started: the first start, after it exited on its
// own, or (IP mode) because the peer list changed.
enum class ImexStartReason { kInitial, kExited, kPeersChanged };

// The files the daemon writes for nvidia-imex.
enum class DaemonFile { kConfig, kNodes, kHosts };

class DaemonMetrics {
 public:
  explicit DaemonMetrics(common::MetricsRegistry& registry);
  DaemonMetrics(const DaemonMetrics&) = delete;
  DaemonMetrics& operator=(const DaemonMetrics&) = delete;

  // nvdra_compute_domain_daemon_imex_state{state}: 1 for `state`, 0 for
  // the others of kImexStates; a state not in the list counts as UNKNOWN.
  void SetImexState(std::string_view state);
  // nvdra_compute_domain_daemon_imex_starts_total{reason}.
  void CountImexStart(ImexStartReason reason);
  // nvdra_compute_domain_daemon_imex_reloads_total: SIGUSR1s sent.
  void CountImexReload();
  // nvdra_compute_domain_daemon_imex_first_ready_seconds: the first call
  // sets it; later ones (READY again after a restart) leave it.
  void SetFirstReady(std::chrono::duration<double> since_start);
  // nvdra_compute_domain_daemon_ready: 1 when the status this daemon last
  // published is Ready, else 0. No series until the first call (ImexDaemon
  // makes it at its start), so a daemon on a node without a clique ID,
  // which runs no IMEX and has nothing to be ready for, never reports 0.
  void SetPublishedReady(bool ready);
  // nvdra_compute_domain_daemon_clique_daemons{status}: the entries of
  // `members` in clique `clique_id`, by status (Ready; NotReady for any
  // other value).
  void SetCliqueDaemons(const std::vector<CliqueMember>& members, std::string_view clique_id);
  // nvdra_compute_domain_daemon_imex_peers: the peers nvidia-imex was given
  // (names mapped in the hosts file, or IPs in the nodes file), own included.
  void SetImexPeers(std::size_t peers);
  // nvdra_compute_domain_daemon_file_writes_total{file,result}.
  void CountFileWrite(DaemonFile file, bool ok);
  // nvdra_compute_domain_daemon_api_errors_total{verb}: a failed API call
  // ("get", "list", "watch", "patch", "apply"); cancellations are not errors.
  void CountApiError(std::string_view verb);
  // nvdra_compute_domain_daemon_fabric_unhealthy_gpus.
  void SetFabricUnhealthyGpus(std::size_t gpus);

 private:
  common::GaugeFamily imex_state_;
  common::CounterFamily imex_starts_;
  common::Counter imex_reloads_;
  common::GaugeFamily first_ready_seconds_;  // no series until the first READY
  common::GaugeFamily ready_;  // no series until SetPublishedReady
  common::GaugeFamily clique_daemons_;
  common::Gauge imex_peers_;
  common::CounterFamily file_writes_;
  common::CounterFamily api_errors_;
  common::Gauge fabric_unhealthy_gpus_;
  std::once_flag first_ready_once_;
};

// `inner` with every failed List, ListEach and Watch call (not a
// cancellation) counted in `metrics` as verb "list" or "watch". `metrics`
// must outlive the result.
std::unique_ptr<k8s::cache::ListWatch> CountListWatchErrors(std::unique_ptr<k8s::cache::ListWatch> inner,
                                                            DaemonMetrics& metrics);

}  // namespace nvdra::computedomain
