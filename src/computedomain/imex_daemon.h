#pragma once

// ImexDaemon: the body of `compute-domain-daemon run` for a node with a
// clique ID. It joins the clique (CliqueMembership: its pod carries the
// clique label and its status, and the controller writes the clique's
// entries from the pods; gate ComputeDomainCliques off, its own entry in the
// ComputeDomain's status.nodes), writes imexd.cfg and the nodes file,
// follows that object with an informer (one object, by name), maps peers to
// nvidia-imex, supervises nvidia-imex, and mirrors its readiness into its
// published status.
//
// Peers, DNS-names mode (gate IMEXDaemonsWithDNSNames, the default): a
// static nodes file of kDnsNamePrefix names 0..max-1; /etc/hosts maps the
// names of same-clique entries that carry an index to their IPs. nvidia-imex
// starts once this node's own entry has an index (the index writer — the
// controller — sets it; the daemon never does) and gets SIGUSR1 when the
// mapping changes later. nvidia-imex ignores a SIGUSR1 that comes within 5 s
// of the previous one, so a change inside that window is signalled when the
// window ends instead of being lost (upstream sends it and loses it).
// Peers, IP mode: once the ComputeDomain lists spec.numNodes entries (when
// set), the nodes file lists the IPs of same-clique entries; nvidia-imex is
// restarted when that list changes.
//
// Supervision: nvidia-imex's exit is seen at once through its pidfd (no 1 s
// ticker); the entry turns NotReady right away and the process is restarted
// after a backoff (100 ms doubling to 10 s; reset once it ran 30 s). At
// shutdown: the status turns NotReady first (gate off: the entry is
// removed), so peers stop counting on us, then SIGTERM, and SIGKILL after
// the grace period.
//
// Readiness: `nvidia-imex-ctl -c imexd.cfg -q` printing exactly "READY\n"
// (the probe's rule). nvidia-imex has no way to push its state, so a thread
// asks: every 25 ms while not ready (after a start the entry turns Ready
// within one interval of the daemon becoming ready), then every
// `ready_poll_interval` to catch a ready daemon that stops being ready
// without exiting. A crash needs no poll (pidfd). The status is written
// only when it changes.
//
// Fabric health (with `read_fabric`): at each of those polls the poller also
// reads the GPUs' NVLink fabric info (NVML has no event for it; one call per
// GPU). While a GPU is unfit (fabric_health.h) the entry says NotReady even
// if nvidia-imex is READY, with reason kReasonFabricUnhealthy and a message
// naming the GPUs, health summary and mask; Ready again once healthy. Each
// change is logged once; LIMITED_CAPACITY only logs a warning.
//
// Metrics (daemon_metrics.h, with `metrics`): nvidia-imex's state at each
// poll, its starts and reloads, the time to its first READY, the published
// readiness, the clique's entries by status, the peers given to
// nvidia-imex, file writes, failed API calls and unhealthy GPUs.
//
// Ownership: owns the informer, the nvidia-imex child and the poller
// thread; borrows the Client and options.metrics, which must outlive it.
// Thread-safety: Run is called once, from one thread (the loop runs there);
// the informer and poller threads only hand it events.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/child_process.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/unique_fd.h"
#include "computedomain/clique_membership.h"
#include "computedomain/daemon_metrics.h"
#include "computedomain/fabric_health.h"
#include "k8s/client.h"

namespace nvdra::k8s::cache {
class Informer;
}  // namespace nvdra::k8s::cache

namespace nvdra::computedomain {

struct ImexDaemonOptions {
  DaemonIdentity identity;
  // Gate ComputeDomainCliques off: entries in the ComputeDomain's status.
  MembershipStore store = MembershipStore::kClique;
  std::string compute_domain_name;       // for kComputeDomainStatus
  std::string compute_domain_namespace;  // for kComputeDomainStatus
  bool dns_names = true;  // gate IMEXDaemonsWithDNSNames
  int max_nodes = 18;     // --max-nodes-per-imex-domain
  std::filesystem::path imexd_dir = "/imexd";
  std::filesystem::path hosts_file = "/etc/hosts";
  // Read when <imexd_dir>/imexd.cfg.tmpl is absent.
  std::filesystem::path config_template = "/templates/compute-domain-daemon-config.tmpl.cfg";
  std::string imex_binary = "nvidia-imex";
  std::string imex_ctl_binary = "nvidia-imex-ctl";
  std::chrono::milliseconds ready_poll_interval{1000};
  // The node's GPUs' fabric info, read at each readiness poll (on the
  // poller thread); empty: no fabric check (no NVML).
  FabricReader read_fabric{};
  std::chrono::milliseconds stop_grace{10000};
  // How long the entry's removal may take at shutdown (upstream: 10 s).
  std::chrono::milliseconds leave_timeout{10000};
  // Where the daemon's series go; null: a registry of its own, never served.
  DaemonMetrics* metrics = nullptr;
};

class ImexDaemon {
 public:
  ImexDaemon(k8s::Client& client, ImexDaemonOptions options);
  ~ImexDaemon();
  ImexDaemon(const ImexDaemon&) = delete;
  ImexDaemon& operator=(const ImexDaemon&) = delete;

  // Runs until `stop`, then leaves the clique and stops nvidia-imex. Errors
  // that make running pointless end it early: the config cannot be rendered
  // or written (kInvalidArgument, errno codes), the eventfd cannot be made.
  // API errors are retried with backoff, not returned.
  common::Status Run(std::stop_token stop);

 private:
  using Clock = std::chrono::steady_clock;

  common::Status WriteStaticFiles();
  // Loop steps (the Run thread).
  void OnCliqueChanged(const nlohmann::json* clique);
  void UpdatePeersDnsNames(const std::vector<CliqueMember>& members);
  // `num_nodes` > 0: act only when exactly that many entries exist (all
  // cliques counted), as upstream's IP mode.
  void UpdatePeersIps(const std::vector<CliqueMember>& members, std::int64_t num_nodes);
  void StartImex(ImexStartReason reason);
  void StopImex();
  void OnImexExited();
  // Drops the child (gone or stopped) and tells the poller: not running, not
  // ready, and answers about the old process no longer count.
  void ForgetImex();
  void PublishIfNeeded();
  // Whether the running nvidia-imex has answered a query (so it handles SIGUSR1).
  bool ImexAnswered() EXCLUDES(mutex_);
  void Wake();
  // The poller thread.
  void PollReadiness(std::stop_token stop);
  void CheckFabric();

  // Whether `status` is OK; counts a write of `file` by its result.
  bool CountWrite(DaemonFile file, const common::Status& status);

  k8s::Client& client_;
  const ImexDaemonOptions options_;
  // Used when options_.metrics is null; metrics_ points at one or the other.
  std::unique_ptr<common::MetricsRegistry> own_registry_;
  std::unique_ptr<DaemonMetrics> own_metrics_;
  DaemonMetrics* metrics_ = nullptr;
  CliqueMembership membership_;
  const std::filesystem::path config_path_;
  const std::filesystem::path nodes_path_;
  common::UniqueFd wake_fd_;

  // Set before the poller starts, then read-only.
  Clock::time_point run_started_at_{};

  // Confined to the Run thread.
  std::optional<common::ChildProcess> imex_;
  ImexStartReason next_start_reason_ = ImexStartReason::kInitial;
  Clock::time_point imex_started_at_{};
  std::optional<Clock::time_point> restart_at_;
  std::chrono::milliseconds restart_backoff_{100};
  std::optional<Clock::time_point> reload_at_;  // a SIGUSR1 held back by the 5 s window
  std::optional<Clock::time_point> last_reload_;
  std::optional<Clock::time_point> publish_retry_at_;
  std::chrono::milliseconds publish_backoff_{100};
  std::map<std::int64_t, std::string> ip_by_index_;  // DNS mode: what /etc/hosts says
  std::vector<std::string> peer_ips_;                // IP mode: what nodes.cfg says
  bool own_index_known_ = false;
  bool peers_known_ = false;          // IP mode: our own IP is in the clique
  DaemonStatus published_;  // what the API server has; status "" before the first write
  bool entry_missing_ = true;    // the last clique seen lacks our entry, or it differs from what we wrote
  bool clique_deleted_ = false;  // the informer saw the clique deleted: do not re-create it
  std::int64_t processed_version_ = 0;  // newest resourceVersion acted on (watch events or our apply)

  // Shared with the informer and poller threads.
  common::Mutex mutex_;  // guards the members below
  std::condition_variable_any poll_cv_;
  std::optional<nlohmann::json> clique_ GUARDED_BY(mutex_);  // the latest object; nullopt after a delete
  bool clique_dirty_ GUARDED_BY(mutex_) = false;
  std::uint64_t imex_generation_ GUARDED_BY(mutex_) = 0;  // bumped at each start and exit
  bool imex_running_ GUARDED_BY(mutex_) = false;
  std::uint64_t ready_generation_ GUARDED_BY(mutex_) = 0;  // the generation `ready_` is about
  std::uint64_t answered_generation_ GUARDED_BY(mutex_) = 0;  // the newest generation that answered a query
  bool ready_ GUARDED_BY(mutex_) = false;
  std::string fabric_problem_ GUARDED_BY(mutex_);  // FabricHealth::Message(); "" when healthy

  // Confined to the poller thread.
  FabricHealth fabric_seen_;

  // Last: stopped before the state they use goes.
  std::unique_ptr<k8s::cache::Informer> informer_;
  std::jthread poller_;
};

}  // namespace nvdra::computedomain
