#pragma once

// compute-domain-controller's reconciler: turns each ComputeDomain into its
// IMEX daemon DaemonSet and claim templates, assigns IMEX indexes (the single
// writer of `index`, see clique_membership.h), keeps the global status and
// tears everything down in order when the domain is deleted.
// Defines: ControllerOptions, Controller, and the names it uses.
//
// Event-driven: informers on ComputeDomains (all namespaces), cliques and
// daemon pods (driver namespace) and the DaemonSets and claim templates it
// owns (label-selected) feed one rate-limited work queue keyed by
// "<namespace>/<name>" of the ComputeDomain; a change to any of them
// reconciles its domain at once (no periodic status poll). Every write is
// made only when the cached state differs from the wanted one.
//
// Reconcile of a live domain (driverManaged): finalizer; channel ID (channel
// isolation); daemon claim template and DaemonSet in the driver namespace;
// workload claim template in the domain's namespace; indexes; status.
// hostManaged: finalizer, workload claim template, status Ready.
// Deletion: workload template, DaemonSet, daemon template deleted; node
// labels removed; their finalizers removed and their absence checked on the
// server; cliques deleted; then the domain's finalizer removed.
//
// Ownership: borrows the Client (must outlive it); owns its informers,
// queue, event recorder and worker threads. Thread-safety: Run is called
// once; the rest is internal.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/metrics.h"
#include "common/status.h"
#include "computedomain/controller/templates.h"
#include "k8s/cache/informer.h"
#include "k8s/client.h"
#include "k8s/event_recorder.h"
#include "k8s/workqueue/workqueue.h"

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
  std::chrono::seconds sync_timeout{120};
  // Borrowed, may be null: nvidia_dra_compute_domain_info{status} (as
  // upstream) and nvdra_compute_domain_controller_{reconciles,api_writes}_total.
  common::MetricsRegistry* metrics = nullptr;
  // Stale-object cleanup after start, repeated this often (0: start only).
  std::chrono::seconds cleanup_interval{600};
};

// Counters since start, for tests and logs.
struct ControllerStats {
  std::uint64_t reconciles = 0;
  std::uint64_t failures = 0;
  std::uint64_t writes = 0;  // creates, updates, patches, applies, deletes
};

class Controller {
 public:
  // kInvalidArgument for options that cannot work (no image, max nodes or
  // channel count out of range).
  static common::StatusOr<std::unique_ptr<Controller>> New(k8s::Client& client, ControllerOptions options);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Starts the informers, waits for their first lists (kDeadlineExceeded
  // after sync_timeout: CRDs missing, no access), removes objects of domains
  // that no longer exist, then reconciles until `stop`. Returns OK after
  // `stop`. Call once.
  common::Status Run(std::stop_token stop);

  ControllerStats stats() const;

 private:
  Controller(k8s::Client& client, ControllerOptions options);
  struct Informers;

  void EnqueueDomainKey(const k8s::cache::ObjectPtr& object);
  // Queues the domain the object belongs to (by its domain label) after
  // `domain_delay`, and its cliques work item.
  void EnqueueByLabel(const k8s::cache::ObjectPtr& object,
                      std::chrono::milliseconds domain_delay = std::chrono::milliseconds(0));
  void Work(std::stop_token stop);
  common::Status Reconcile(const std::string& key, std::stop_token stop);
  common::Status ReconcileLive(const nlohmann::json& cd, std::stop_token stop);
  common::Status Teardown(const nlohmann::json& cd, std::stop_token stop);
  common::Status CleanupStale(std::stop_token stop);
  // Queue key "gone/<uid>": removes what a domain that no longer exists left
  // (objects by label, node labels), unless the domain is cached after all.
  common::Status CleanupDomain(const std::string& uid, std::stop_token stop);
  static constexpr std::string_view kGonePrefix = "gone/";
  // Work items "cliques/<ns>/<name>": the domain's clique entries
  // (SyncCliques), apart from the domain's own reconcile, so that writing
  // the domain's objects and status never holds a clique write back.
  static constexpr std::string_view kCliquesPrefix = "cliques/";
  static constexpr std::chrono::milliseconds kCliqueBatchDelay{20};
  // How long a clique change waits before the domain's status follows it.
  static constexpr std::chrono::milliseconds kStatusBatchDelay{100};
  // Work items "allocated/<ns>/<claim>": a workload claim of a domain was
  // allocated (LabelAllocatedNode).
  static constexpr std::string_view kAllocatedPrefix = "allocated/";
  // How long our own node label write stands in for the node cache.
  static constexpr std::chrono::seconds kNodeLabelMemory{10};
  static constexpr std::chrono::seconds kGoneDelay{2};

  // Writes with bookkeeping.
  common::Status EnsureFinalizer(const nlohmann::json& cd, std::stop_token stop);
  common::StatusOr<std::optional<int>> EnsureChannel(const nlohmann::json& cd, std::stop_token stop);
  common::Status EnsureObject(const nlohmann::json& cd, const k8s::ResourceRef& ref, const k8s::cache::Informer& cache,
                              const nlohmann::json& desired, std::stop_token stop);
  // Removes entries (clique daemons[] or status.nodes[]) of daemons whose
  // pod is gone: those recorded by RecordDeparture, still with that IP.
  common::Status PruneDeparted(const nlohmann::json& cd, std::stop_token stop);
  // A daemon pod of domain `uid` on `node` with `ip` was deleted.
  void RecordDeparture(const std::string& uid, const std::string& node, const std::string& ip);
  // At start: entries whose node has no daemon pod of their domain.
  void RecordStartupDepartures();
  // Writes the domain's cliques from its daemon pods: one entry per member
  // pod (scheduled, not terminating, with an IP and the clique label), its
  // IP from the pod, its status from the pod's daemon-status annotation,
  // its index kept or newly assigned; entries of nodes without a member pod
  // go. Creates a clique when its first member appears. The controller is
  // the only writer of clique entries (clique_membership.h says why).
  common::Status SyncCliques(const nlohmann::json& cd, std::stop_token stop);
  // Drops the remembered clique writes of domain `uid` (mu_ held).
  void ForgetCliqueWritesLocked(const std::string& uid);
  common::Status AssignStatusIndexes(const nlohmann::json& cd, std::stop_token stop);
  common::Status UpdateStatus(const nlohmann::json& cd, std::stop_token stop);
  // Deletes (propagation Background); an absent object is OK.
  common::Status DeleteOwned(const k8s::ResourceRef& ref, const std::string& ns, const std::string& name,
                             std::stop_token stop);
  // Removes our finalizer from the object, then checks it is gone;
  // kUnavailable while it is still there.
  common::Status ReleaseOwned(const k8s::ResourceRef& ref, const std::string& ns, const std::string& name,
                              std::stop_token stop);
  common::Status RemoveNodeLabels(const std::string& uid_or_all, std::stop_token stop);
  // The domain's DaemonSets in the additional namespaces (cached).
  std::vector<nlohmann::json> DaemonSetsElsewhere(const std::string& uid) const;
  // Labels the node a domain's workload claim was allocated on for the
  // domain, unless it serves another domain. Why: the DaemonSet places the
  // daemon by that label, and the kubelet plugin only sets it when the
  // kubelet first prepares the claim, ~1 s after the scheduler's allocation
  // at 18 nodes; labelling at allocation starts the daemon that much sooner.
  // The plugin still labels at Prepare (claims not made from the domain's
  // template) and removes the label with the node's last prepared claim of
  // the domain, or at its start when none is prepared there.
  common::Status LabelAllocatedNode(const std::string& claim_key, std::stop_token stop);

  common::StatusOr<nlohmann::json> RenderDaemonSet(const nlohmann::json& cd) const;
  common::StatusOr<nlohmann::json> RenderDaemonClaim(const nlohmann::json& cd) const;
  common::StatusOr<nlohmann::json> RenderWorkloadClaim(const nlohmann::json& cd, std::optional<int> channel) const;

  // Whether `body` is what we last wrote for `key` and the cached object
  // (at `cached_version`) predates that write: then the cache only lags
  // behind our own write, and writing again would change nothing.
  bool AlreadyWritten(const std::string& key, const std::string& cached_version, const nlohmann::json& body) const;
  void RememberWrite(const std::string& key, const std::string& base_version, const std::string& result_version,
                     const nlohmann::json& body);

  // The domain counts under `status` in nvidia_dra_compute_domain_info
  // (moved from its previous status); "" forgets it.
  void ObserveStatus(const std::string& uid, const std::string& status);

  void Emit(const nlohmann::json& cd, k8s::EventType type, std::string_view reason, std::string_view note);
  void CountWrite();

  k8s::Client& client_;
  const ControllerOptions options_;
  std::unique_ptr<k8s::EventRecorder> recorder_;
  k8s::workqueue::WorkQueue<std::string> queue_;

  mutable std::mutex mu_;  // guards the members below
  std::map<std::string, int> channels_;         // domain UID -> channel ID handed out
  std::map<std::string, std::string> last_why_;  // domain UID -> last status explanation emitted
  std::set<std::string> torn_down_;
  // domain UID -> node -> IP of a deleted daemon pod whose entry may remain
  std::map<std::string, std::map<std::string, std::string>> departed_;
  std::map<std::string, std::string> observed_status_;  // domain UID -> status counted in the info gauge  // UIDs whose teardown finished and whose delete event is pending
  struct Written {
    std::string base_version;    // the cached object the write was computed from
    std::string result_version;  // the object the write made
    nlohmann::json body;
  };
  std::map<std::string, Written> written_;  // "status/<uid>" -> last write
  // "<ns>/<name>" of a clique -> the object our last write of it made
  std::map<std::string, nlohmann::json> cliques_written_;
  // node -> (domain UID, when) of our early node label writes
  std::map<std::string, std::pair<std::string, k8s::workqueue::TimePoint>> node_labels_written_;
  std::mutex label_mu_;  // serialises LabelAllocatedNode's check-then-write
  ControllerStats stats_;

  // Last: stopped before the members above go.
  std::unique_ptr<Informers> informers_;
};

}  // namespace nvdra::computedomain::controller
