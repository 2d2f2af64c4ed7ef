#pragma once

// What the compute-domain kubelet plugin knows about ComputeDomains and their
// ComputeDomainCliques: informers on ComputeDomains (cluster-wide, indexed by
// UID), the ComputeDomainCliques of this node's clique ID in the driver
// namespace when the gate ComputeDomainCliques is on (selected by their
// resource.nvidia.com/computeDomain.cliqueID label, which upstream's daemons
// and our controller both set: a rack of several cliques sends each plugin
// only its own clique's writes; none while the node has no clique ID; a new
// clique ID starts a new informer), and the IMEX daemon pods on this node; the
// readiness of this node's IMEX daemon in a domain, read from their caches,
// and the domains whose daemon runs here (the unused-label check); and this
// node's own Node object, whose domain label a channel claim's prepare reads
// from the cache instead of GETting the Node (the controller labels the node
// when it sees the claim allocated, so the label is usually there first:
// one request per node less in a domain's formation, bench/README.md).
//
// Readiness, as upstream's isCurrentNodeReady: the clique
// "<cdUID>.<cliqueID>" has a daemons[] entry for this node with status
// Ready, or (fallback, and the only source with the gate off) the
// ComputeDomain's status.nodes[] entry for this node says Ready. Beyond
// upstream, with cliques: this node's live daemon pod of the domain, in the
// clique, whose status annotation says Ready. That is what the controller
// copies into the clique entry; reading it from the pod saves the
// controller's write and its watch event on the way to the waiting claim
// (bench/README.md). The pod informer is not waited for at start: without
// read access to pods (an older ClusterRole) readiness comes from the clique
// as before.
//
// Waiting: WaitFor blocks on a condition variable that every informer event
// notifies, so a waiter wakes when the watch delivers the change, not on a
// timer. Cancel() ends every wait (shutdown).
//
// Ownership: owns the informers and their threads; borrows the client, which
// must outlive it. Thread-safety: thread-safe.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "k8s/cache/informer.h"
#include "k8s/client.h"
#include "k8s/objects/compute_domain.h"

namespace nvdra::computedomain {

struct DomainWatchOptions {
  std::string node_name;
  std::string clique_id;           // this node's clique ID at start ("": none yet)
  std::string driver_namespace;  // where the cliques live (--namespace)
  bool cliques_enabled = true;   // gate ComputeDomainCliques
  std::chrono::seconds sync_timeout{60};
};

class DomainWatch {
 public:
  // Starts the informers and waits for their first lists. kDeadlineExceeded
  // when they do not sync within sync_timeout (CRDs missing, no access).
  static common::StatusOr<std::unique_ptr<DomainWatch>> Start(k8s::Client& client, DomainWatchOptions options);
  // Makes the list-watch of each clique informer (one per clique ID).
  using ListWatchSource = std::function<std::unique_ptr<k8s::cache::ListWatch>()>;
  // The same over given list-watches (tests): `cliques` may be empty when
  // options.cliques_enabled is false; `daemon_pods` (this node's daemon
  // pods in the driver namespace) and `node` (this node) may be null.
  // Readiness reads the daemon pods only with cliques enabled.
  static common::StatusOr<std::unique_ptr<DomainWatch>> StartWith(std::unique_ptr<k8s::cache::ListWatch> domains,
                                                                  ListWatchSource cliques,
                                                                  std::unique_ptr<k8s::cache::ListWatch> daemon_pods,
                                                                  DomainWatchOptions options,
                                                                  std::unique_ptr<k8s::cache::ListWatch> node = nullptr);
  ~DomainWatch();
  DomainWatch(const DomainWatch&) = delete;
  DomainWatch& operator=(const DomainWatch&) = delete;

  // The cached ComputeDomain with this UID; nullopt when unknown.
  std::optional<k8s::ComputeDomain> FindByUid(const std::string& uid) const;

  // Whether this node's daemon is Ready in domain `cd` (see the file comment).
  bool NodeReady(const k8s::ComputeDomain& cd, const std::string& clique_id) const EXCLUDES(cliques_mu_);

  // This node's clique ID changed: the cliques of the new ID are watched
  // from now on (the old informer stops). An empty ID watches none.
  void SetCliqueId(const std::string& clique_id) EXCLUDES(cliques_mu_);

  // UIDs of the domains with a live (not terminating) daemon pod on this
  // node, from the pod cache; empty without the pod informer.
  std::set<std::string> DaemonDomains() const;

  // The value of this node's ComputeDomain label in the Node cache ("" when
  // unlabelled); nullopt when there is no node informer, it has not synced
  // or the Node is not in it. The cache may lag a write: a caller that must
  // not act on an old value confirms it with a read.
  std::optional<std::string> CachedNodeDomainLabel() const;

  // Blocks until `condition()` is true (checked now and after every informer
  // event), `deadline`, or Cancel(). Returns the last value of condition().
  // `condition` runs with an internal mutex held and must only read caches.
  bool WaitFor(const std::function<bool()>& condition, std::chrono::steady_clock::time_point deadline)
      EXCLUDES(mu_);

  // Ends every current and future WaitFor. Idempotent.
  void Cancel() EXCLUDES(mu_);

  // Calls `handler` on the informer's dispatch thread after a ComputeDomain
  // was deleted (the cache no longer holds it). Replaces an earlier handler;
  // an empty one removes it, returning after a call in progress finished.
  // `handler` must be quick and must not call back into this method.
  void SetDomainDeletedHandler(std::function<void()> handler) EXCLUDES(handler_mu_);

 private:
  explicit DomainWatch(DomainWatchOptions options);
  void Notify() EXCLUDES(mu_);

  void DomainDeleted() EXCLUDES(handler_mu_);
  // A started informer on the cliques labelled with `clique_id`; null
  // without cliques or for "".
  std::shared_ptr<k8s::cache::Informer> StartCliqueInformer(const std::string& clique_id) const;
  // This node's live daemon pod of `cd` in `clique_id` says Ready.
  bool DaemonPodReady(const k8s::ComputeDomain& cd, const std::string& clique_id) const;

  const DomainWatchOptions options_;
  common::Mutex handler_mu_;  // guards deleted_handler_ and its calls
  std::function<void()> deleted_handler_ GUARDED_BY(handler_mu_);
  common::Mutex mu_;  // guards cancelled_; pairs with changed_
  std::condition_variable changed_;
  bool cancelled_ GUARDED_BY(mu_) = false;
  ListWatchSource clique_source_;         // set once in StartWith
  k8s::cache::EventHandler notify_;       // set once in StartWith: wakes WaitFor
  mutable common::Mutex cliques_mu_;  // guards the clique informer and its ID (taken after mu_)
  std::string clique_id_ GUARDED_BY(cliques_mu_);
  // Last: they stop (joining their threads) before the members above go.
  std::unique_ptr<k8s::cache::Informer> domains_;
  // Shared: a reader keeps the informer it read while SetCliqueId swaps it.
  std::shared_ptr<k8s::cache::Informer> cliques_ GUARDED_BY(cliques_mu_);
  std::unique_ptr<k8s::cache::Informer> daemon_pods_;
  std::unique_ptr<k8s::cache::Informer> node_;
};

}  // namespace nvdra::computedomain
