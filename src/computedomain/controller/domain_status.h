#pragma once

// A ComputeDomain's global status (status.status, and with cliques
// status.nodes mirrored from them): computed from the caches, written when
// it differs, announced by an Event on each change of reason, and counted in
// nvidia_dra_compute_domain_info{status}.
// Defines: DomainStatusReport, ComputeDomainStatus(), StatusWriteMemo,
// NodesWritePacer, DomainStatusUpdater.
//
// Ownership: DomainStatusUpdater borrows the ApiWriter, the caches and the
// options (all must outlive it) and owns its per-domain memory.
// Thread-safety: ComputeDomainStatus is pure; StatusWriteMemo and
// NodesWritePacer are thread-compatible; DomainStatusUpdater is thread-safe.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/mutex.h"
#include "common/status.h"
#include "computedomain/controller/api_writer.h"
#include "computedomain/controller/caches.h"
#include "computedomain/controller/controller_options.h"
#include "k8s/cache/informer.h"
#include "k8s/objects/compute_domain.h"

namespace nvdra::computedomain::controller {

struct DomainStatusReport {
  std::string status = "Ready";  // "Ready" or "NotReady"
  // Why NotReady, for the Event: "<category>: <details>"; "" when Ready.
  std::string why;
  // status.nodes as it should read, sorted by name. With cliques: every
  // clique entry (its reason and message included), then daemons on nodes
  // without a fabric (index -1). Else the domain's own status.nodes (the
  // daemons write them). `why` adds an entry's message to its node's name.
  nlohmann::json nodes = nlohmann::json::array();

  // What an Event is sent for on change: "Ready", or the reason's category.
  std::string Category() const { return status == "Ready" ? "Ready" : why.substr(0, why.find(':')); }
};

// The status `cd` should have given its cliques and daemon pods (cached).
// Ready when spec.numNodes daemons joined and all say Ready; always Ready
// with hostManaged.
DomainStatusReport ComputeDomainStatus(const k8s::ComputeDomain& cd,
                                       const std::vector<k8s::ComputeDomainClique>& cliques,
                                       const std::vector<k8s::cache::ObjectPtr>& daemon_pods,
                                       const ControllerOptions& options);

// Remembers the controller's last status write per domain, so that a
// reconcile running before the write's watch event does not repeat it.
class StatusWriteMemo {
 public:
  // Whether `body` is what we last wrote for `uid` and the cached object
  // (at `cached_version`) predates that write: then the cache only lags
  // behind our own write, and writing again would change nothing.
  bool AlreadyWritten(const std::string& uid, const std::string& cached_version, const nlohmann::json& body) const;
  void Remember(const std::string& uid, const std::string& base_version, const std::string& result_version,
                const nlohmann::json& body);
  void Forget(const std::string& uid) { written_.erase(uid); }

 private:
  struct Written {
    std::string base_version;    // the cached object the write was computed from
    std::string result_version;  // the object the write made
    nlohmann::json body;
  };
  std::map<std::string, Written> written_;  // domain UID -> last write
};

// Paces writes that change only status.nodes (not status.status) to one per
// domain per `interval`. Every write of the status is watched by each
// node's kubelet plugin, and a forming domain's daemons change their entries
// one by one: unpaced, N entries cost N writes seen by N plugins. A change
// of status.status (Ready, NotReady) is never held back.
class NodesWritePacer {
 public:
  using Clock = std::chrono::steady_clock;
  explicit NodesWritePacer(std::chrono::milliseconds interval) : interval_(interval) {}
  // How long a nodes-only write of `uid` must wait at `now`; zero: write.
  std::chrono::milliseconds Wait(const std::string& uid, Clock::time_point now) const;
  // A write carrying status.nodes of `uid` went out at `now`.
  void Wrote(const std::string& uid, Clock::time_point now) { last_[uid] = now; }
  void Forget(const std::string& uid) { last_.erase(uid); }

 private:
  const std::chrono::milliseconds interval_;
  std::map<std::string, Clock::time_point> last_;
};

class DomainStatusUpdater {
 public:
  // Called with a domain's key and a delay when a paced write is held back:
  // the domain must be reconciled again after it.
  using LookAgain = std::function<void(const std::string& key, std::chrono::milliseconds after)>;
  // The least time between two writes of a domain's status.nodes alone.
  static constexpr std::chrono::milliseconds kNodesWriteInterval{1000};

  DomainStatusUpdater(ApiWriter& writer, const ControllerCaches& caches, const ControllerOptions& options,
                      LookAgain look_again)
      : writer_(writer), caches_(caches), options_(options), look_again_(std::move(look_again)) {}

  // Computes the domain's status, emits an Event when its reason changed,
  // and patches status (status subresource) when it differs. API errors as
  // they come (a conflict is retried by the caller).
  common::Status Update(const k8s::ComputeDomain& cd, std::stop_token stop);

  // The domain counts under `status` in nvidia_dra_compute_domain_info
  // (moved from its previous status); "" forgets it.
  void ObserveStatus(const std::string& uid, const std::string& status);
  // Drops what is remembered of `uid`'s writes and Events (not the gauge).
  void Forget(const std::string& uid);

 private:
  ApiWriter& writer_;
  const ControllerCaches& caches_;
  const ControllerOptions& options_;

  mutable common::Mutex status_mu_;
  std::map<std::string, std::string> last_category_ GUARDED_BY(status_mu_);    // domain UID -> last Event's category
  // domain UID -> status counted in the info gauge
  std::map<std::string, std::string> observed_status_ GUARDED_BY(status_mu_);
  StatusWriteMemo written_ GUARDED_BY(status_mu_);
  const LookAgain look_again_;
  NodesWritePacer nodes_pacer_ GUARDED_BY(status_mu_){kNodesWriteInterval};
};

}  // namespace nvdra::computedomain::controller
