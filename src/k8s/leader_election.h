#pragma once

// Leader election over a coordination.k8s.io/v1 Lease, wire-compatible with
// client-go's LeaseLock: several replicas run a LeaderElector on the same
// Lease and at most one of them runs its leading work at a time (as long as
// clocks run at the same rate; no clock sync is needed).
//
// Defines: LeaseRecord, LeaseAction, DecideLease, LeaderElectionConfig,
// LeaderElector.
//
// The algorithm (dra-wire-facts.md section 6):
//   - GET the Lease; create it when missing.
//   - Whenever the record (spec) differs from the last one seen, note the
//     local monotonic time. Someone else's lease has expired once
//     leaseDurationSeconds have passed on *our* clock since that moment; the
//     remote renewTime is never compared with our clock.
//   - Take over an expired or released lease with a PUT carrying the
//     resourceVersion of the GET (a 409 means another replica won),
//     acquireTime = renewTime = now, leaseTransitions + 1.
//   - While leading, renew (renewTime = now) every retry period; step down
//     when no renewal succeeded within the renew deadline.
//   - With release_on_cancel, a stop request releases the lease (empty
//     holderIdentity, leaseDurationSeconds 1) so a standby takes over at once.
// Attempts are not jittered: the 409 on a lost race keeps it safe.
//
// Ownership: borrows the Client and the clocks, which must outlive the
// elector. Owns the thread that runs on_started_leading while it leads.
// Thread-safety: Run is called once, from one thread; IsLeader and Leader
// may be called from any thread. Callbacks run on Run's thread, except
// on_started_leading (its own thread).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "k8s/client.h"
#include "k8s/micro_time.h"
#include "k8s/workqueue/clock.h"

namespace nvdra::k8s {

// The spec of a Lease as leader election reads it.
struct LeaseRecord {
  std::string holder_identity;
  std::int32_t lease_duration_seconds = 0;
  std::string acquire_time;  // MicroTime as on the wire; compared, never parsed
  std::string renew_time;
  std::int32_t lease_transitions = 0;

  bool operator==(const LeaseRecord&) const = default;
  // From a Lease object; absent fields are zero values.
  static LeaseRecord FromLease(const nlohmann::json& lease);
  // Writes the fields into `lease`'s spec, keeping every other field.
  void ToLease(nlohmann::json& lease) const;
};

enum class LeaseAction {
  kRenew,    // we hold it: renew
  kAcquire,  // free (released or expired): try to take it
  kWait,     // someone else holds a live lease
};

// The pure decision: `observed` is the record last seen, `observed_at` the
// local time it was first seen in that state, `now` the local time.
LeaseAction DecideLease(const LeaseRecord& observed, workqueue::TimePoint observed_at, workqueue::TimePoint now,
                        std::string_view identity);

struct LeaderElectionConfig {
  std::string lease_namespace = "default";
  std::string lease_name;
  std::string identity;  // unique per replica (pod name + random suffix)
  std::chrono::milliseconds lease_duration = std::chrono::seconds(15);
  std::chrono::milliseconds renew_deadline = std::chrono::seconds(10);
  std::chrono::milliseconds retry_period = std::chrono::seconds(2);
  // On a stop request while leading, release the lease for a fast handover.
  // Only safe when the leading work has really stopped by then, which Run
  // guarantees by joining it first.
  bool release_on_cancel = false;
  workqueue::Clock* clock = &workqueue::RealClock();  // expiry, deadlines, waits
  WallClock wall_clock = SystemWallClock();            // acquireTime, renewTime
  std::string field_manager = "nvdra-leader-election";

  // Runs on its own thread once the lease is ours; must return soon after
  // `stop` is requested (leadership lost or shutdown), since Run joins it.
  std::function<void(std::stop_token stop)> on_started_leading;
  // After leading work stopped (and before any release).
  std::function<void()> on_stopped_leading;
  // Whenever the observed holder changes (our own identity included; never
  // for an empty holder). Must not block.
  std::function<void(const std::string& identity)> on_new_leader;
};

class LeaderElector {
 public:
  // kInvalidArgument for an empty name, namespace or identity, a missing
  // on_started_leading, or durations not lease > renew > retry > 0.
  // The Client's request_timeout should be below renew_deadline, so one hung
  // request cannot hold a stale leader past its deadline.
  static common::StatusOr<std::unique_ptr<LeaderElector>> New(Client* client, LeaderElectionConfig config);
  ~LeaderElector();
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  // Tries to acquire until it does or `stop` is requested, then leads until
  // `stop` (returns OK) or until a renewal is overdue (kAborted: leadership
  // lost; the usual reaction is to exit and let the process restart). Call
  // once.
  common::Status Run(std::stop_token stop);

  bool IsLeader() const { return leading_.load(); }
  // The last holder observed ("" when none).
  std::string Leader() const EXCLUDES(mutex_);

 private:
  LeaderElector(Client* client, LeaderElectionConfig config);

  // One GET and, when the decision says so, one create or PUT. True when we
  // hold the lease afterwards.
  bool TryAcquireOrRenew(std::stop_token stop);
  // PUT of a released record if we still hold it per the last observation.
  void Release();
  void Observe(const nlohmann::json& lease, const LeaseRecord& record) EXCLUDES(mutex_);

  Client* const client_;
  const LeaderElectionConfig config_;
  std::atomic<bool> leading_{false};

  // Touched only by Run's thread, except leader_ (under mutex_).
  std::optional<nlohmann::json> observed_lease_;  // the last Lease read or written
  LeaseRecord observed_record_;
  workqueue::TimePoint observed_at_{};
  mutable common::Mutex mutex_;  // guards leader_
  std::string leader_ GUARDED_BY(mutex_);
};

}  // namespace nvdra::k8s
