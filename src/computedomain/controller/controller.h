#pragma once

// compute-domain-controller's reconciler: turns each ComputeDomain into its
// IMEX daemon DaemonSet and claim templates, assigns IMEX indexes, keeps the
// global status and tears everything down in order when the domain is
// deleted. Defines: ControllerStats, Controller.
//
// Event-driven: informers (caches.h) on ComputeDomains, cliques, daemon
// pods, workload claims, labelled nodes and the objects it owns feed one
// rate-limited work queue of WorkItems (work_item.h); a change to any of them
// reconciles its domain at once (no periodic status poll). Every write is
// made only when the cached state differs from the wanted one.
//
// The work is split by what each part owns:
//   DomainObjectRenderer + EnsureOwnedObject  DaemonSet and claim templates
//   ChannelRegistry                           IMEX channels (channel isolation)
//   CliqueEntryWriter                         clique entries and indexes
//   DomainStatusUpdater                       the domain's status
//   NodeLabeler                               node labels
//   DomainCleaner                             teardown and stale objects
// The Controller wires them to the informers and the queue, and owns the
// domain's lifecycle: finalizer, then (driverManaged) channel, daemon
// objects, workload template, indexes, status; hostManaged: finalizer,
// workload template, status Ready; on deletion DomainCleaner's cascade.
//
// Ownership: borrows the Client (must outlive it); owns the caches, the
// parts, the queue and the worker threads (joined before Run returns).
// Thread-safety: Run is called once; stats() from any thread.

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>

#include "common/mutex.h"
#include "common/status.h"
#include "computedomain/controller/api_writer.h"
#include "computedomain/controller/caches.h"
#include "computedomain/controller/channel_registry.h"
#include "computedomain/controller/clique_entries.h"
#include "computedomain/controller/cleanup.h"
#include "computedomain/controller/controller_options.h"
#include "computedomain/controller/domain_status.h"
#include "computedomain/controller/node_labeler.h"
#include "computedomain/controller/object_renderer.h"
#include "computedomain/controller/work_item.h"
#include "k8s/cache/informer.h"
#include "k8s/client.h"
#include "k8s/objects/compute_domain.h"
#include "k8s/workqueue/workqueue.h"

namespace nvdra::computedomain::controller {

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
  Controller(k8s::Client& client, ControllerOptions options, std::unique_ptr<ApiWriter> writer);

  // A short hold gathers a burst of daemon changes into one clique write.
  static constexpr std::chrono::milliseconds kCliqueBatchDelay{20};
  // How long a clique change waits before the domain's status follows it.
  static constexpr std::chrono::milliseconds kStatusBatchDelay{100};
  // How long an object of an unknown domain waits before it is swept: a
  // domain just created is cached by then.
  static constexpr std::chrono::seconds kGoneDelay{2};
  // The longest wait before an item that failed on a precondition someone
  // else must fix (kFailedPrecondition) is looked at again.
  static constexpr std::chrono::seconds kOutsideFixRecheck{10};

  // Event handlers -> queue.
  void AddEventHandlers();
  void EnqueueDomain(const k8s::cache::ObjectPtr& object);
  // Queues the domain the object belongs to (by its domain label) after
  // `domain_delay`, and its cliques work item; a sweep when it has none.
  void EnqueueByLabel(const k8s::cache::ObjectPtr& object,
                      std::chrono::milliseconds domain_delay = std::chrono::milliseconds(0));
  void OnDomainDeleted(const k8s::cache::ObjectPtr& object);

  // Start-up: caches synced, then what they tell about the past.
  common::Status StartCaches();
  void LearnFromCaches(std::stop_token stop);
  void RunWorkers(std::stop_token stop);

  // Queue -> parts.
  void Work(std::stop_token stop);
  common::Status Process(const WorkItem& item, std::stop_token stop);
  common::Status ReconcileDomain(const std::string& key, std::stop_token stop);
  common::Status ReconcileLive(const k8s::ComputeDomain& cached, std::stop_token stop);
  common::Status EnsureFinalizer(const k8s::ComputeDomain& cd, std::stop_token stop);
  // The domain's IMEX channel (nullopt without channel isolation); a new
  // one is recorded in its status first, and `cd` becomes that write's result.
  common::StatusOr<std::optional<int>> EnsureChannel(k8s::ComputeDomain& cd, std::stop_token stop);
  common::Status EnsureDaemonObjects(const k8s::ComputeDomain& cd, std::stop_token stop);
  // Drops every part's memory of domain `uid` once its objects are gone.
  void ForgetDomain(const std::string& uid);

  k8s::Client& client_;
  const ControllerOptions options_;
  const std::unique_ptr<ApiWriter> writer_;
  // Created with the controller, started by Run, stopped first by the
  // destructor so that no handler runs into the members below.
  const std::unique_ptr<ControllerCaches> caches_;
  const DomainObjectRenderer renderer_;
  ChannelRegistry channels_;
  CliqueEntryWriter entries_;
  DomainStatusUpdater status_;
  NodeLabeler labeler_;
  DomainCleaner cleaner_;
  k8s::workqueue::WorkQueue<WorkItem, WorkItemHash> queue_;

  mutable common::Mutex lifecycle_mu_;
  // UIDs whose teardown finished and whose delete event is pending
  std::set<std::string> torn_down_ GUARDED_BY(lifecycle_mu_);
  ControllerStats stats_ GUARDED_BY(lifecycle_mu_);  // reconciles and failures (writes: ApiWriter)
};

}  // namespace nvdra::computedomain::controller
