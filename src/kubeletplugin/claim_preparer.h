#pragma once

// The claim preparation engine both kubelet plugins share: the driver-neutral
// half of NodePrepareResources and NodeUnprepareResources.
//
// For each claim it fetches the ResourceClaim from the API server (and checks
// the UID the kubelet sent), then, holding the node-wide `pu.lock` and its own
// mutex:
//   Prepare:   completed claim -> its stored devices (idempotent);
//              overlap guard (a device of another completed claim fails it);
//              a PrepareStarted leftover -> the backend rolls it back first;
//              checkpoint PrepareStarted (status, name, namespace);
//              backend prepares (configs, CDI spec) -> checkpoint PrepareCompleted.
//   Unprepare: unknown claim -> no-op; otherwise the backend undoes whatever
//              the entry records, in any state, and the entry is removed.
// Reconcile() compares **every** checkpointed claim with the API server and
// unprepares those whose claim is gone or was replaced (another UID),
// whatever their state (upstream only looks at PrepareStarted entries and
// leaks completed ones, its issues #1278 and #1346).
//
// Crash safety: the checkpoint is written atomically before and after the
// backend's work; a crash in between leaves a PrepareStarted entry that the
// next Prepare of the claim rolls back, or Reconcile removes once the claim
// is gone.
//
// Waiting outside the locks (the compute-domain plugin's channel claims wait
// for their domain's IMEX daemon on this node): a backend whose
// PrepareDevices fails because something outside the node is not ready yet
// returns kUnavailable. The preparer then releases pu.lock, cp.lock and its
// mutex and calls the backend's AwaitRetry, which blocks until the awaited
// state is there (the CD backend is woken by its informers' watch events, not
// by a timer) or a deadline; on true the locked attempt runs again. So one
// waiting claim never holds up another claim's Prepare or Unprepare, and an
// Unprepare that arrives meanwhile is seen by the retried attempt (with
// record_aborted it finds PrepareAborted and fails as stale). Claims of one
// NodePrepareResources call are prepared concurrently for the same reason.
// The alternative, failing at once and letting the kubelet retry, would tie
// the latency to the kubelet's backoff instead of the watch event.
//
// PrepareAborted (option record_aborted, the CD plugin as upstream): an
// Unprepare of a PrepareStarted entry keeps it as PrepareAborted (devices
// cleared, abortedAt set) instead of removing it, and a later Prepare whose
// claim status equals the recorded one fails permanently as stale (the
// kubelet gave up on it; preparing now would leak the channel, upstream
// #1162). Reconcile drops PrepareAborted entries older than aborted_ttl.
//
// Ownership: borrows the client and the backend, which must outlive it.
// Thread-safety: thread-safe; one claim operation runs at a time on the node
// (pu.lock across processes, a mutex within this one).

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "kubeletplugin/checkpoint.h"
#include "kubeletplugin/dra_service.h"
#include "kubeletplugin/plugin_metrics.h"
#include "kubeletplugin/node_lock.h"

namespace nvdra::k8s {
class Client;
}  // namespace nvdra::k8s

namespace nvdra::kubeletplugin {

// The driver-specific half. Called with pu.lock held, one call at a time,
// except AwaitRetry, which runs with no lock held and concurrently with the
// others.
class ClaimDeviceBackend {
 public:
  virtual ~ClaimDeviceBackend() = default;

  // Prepares this driver's devices of an allocated claim (configs, CDI spec)
  // and returns the checkpoint's device groups in the driver's upstream JSON
  // shape: [{"devices": [{"<kind>": {..., "device": {"Requests", "PoolName",
  // "DeviceName", "CDIDeviceIDs"}}}], "configState": {...}}]. Must be safe to
  // repeat after a crash part-way (overwrite, not append).
  virtual common::StatusOr<nlohmann::ordered_json> PrepareDevices(const nlohmann::ordered_json& claim) = 0;

  // Undoes what an entry records, completed or not (then prepared_devices may
  // be null and the claim's status says what was allocated). Missing pieces
  // (a CDI file already gone) are not errors.
  virtual common::Status UnprepareDevices(const std::string& claim_uid, const CheckpointedClaim& entry) = 0;

  // A PrepareStarted leftover of the same claim (a crash, a failed or a
  // not-ready attempt) before PrepareDevices runs again. The default undoes
  // it (UnprepareDevices). A backend whose PrepareDevices simply redoes the
  // same work may keep it, e.g. the CD plugin, whose rollback would remove the
  // node label its DaemonSet pod depends on.
  virtual common::Status RollBackLeftover(const std::string& claim_uid, const CheckpointedClaim& entry) {
    return UnprepareDevices(claim_uid, entry);
  }

  // Called with no lock held after PrepareDevices failed with kUnavailable
  // (`failure`). Blocks until what the claim waits for is there (return true:
  // the preparer retries at once), or until `deadline` or shutdown (false:
  // the preparer reports `failure`). The default waits for nothing: false.
  virtual bool AwaitRetry(const nlohmann::ordered_json& claim, const common::Status& failure,
                          std::chrono::steady_clock::time_point deadline) {
    (void)claim;
    (void)failure;
    (void)deadline;
    return false;
  }
};

struct ClaimPreparerOptions {
  std::string driver_name;             // "gpu.nvidia.com"
  std::filesystem::path plugin_dir;    // <plugins>/<driver>: checkpoint.json, pu.lock
  std::string boot_id;                 // this boot's id; a checkpoint of another boot is discarded
  std::chrono::milliseconds lock_timeout = std::chrono::seconds(10);
  // PrepareAborted bookkeeping (see the file comment); the GPU plugin's Go
  // twin does not know that state, so it stays off there.
  bool record_aborted = false;
  std::chrono::seconds aborted_ttl{90};  // upstream: 2 x its 45 s retry window
  // How long one Prepare call may wait in AwaitRetry: below the kubelet's
  // 45 s call timeout, so the kubelet gets the reason rather than a timeout.
  std::chrono::milliseconds ready_wait = std::chrono::seconds(40);
  // Optional: upstream's nvidia_dra_* metrics of the kubelet's requests and
  // of the checkpoint's prepared devices. Must outlive the preparer.
  PluginMetrics* metrics = nullptr;
};

// Devices of a checkpoint entry, as the kubelet wants them: every "device"
// object inside the groups' devices, whatever the kind key.
std::vector<PreparedDevice> DevicesFromGroups(const nlohmann::ordered_json& groups);

class ClaimPreparer final : public DraDriver {
 public:
  // Loads (and, after a reboot, resets) the checkpoint.
  static common::StatusOr<std::unique_ptr<ClaimPreparer>> Create(ClaimPreparerOptions options,
                                                                 k8s::Client& client,
                                                                 ClaimDeviceBackend& backend);

  std::map<std::string, PrepareResult> PrepareResourceClaims(const std::vector<ClaimRef>& claims) override;
  std::map<std::string, std::string> UnprepareResourceClaims(const std::vector<ClaimRef>& claims) override;

  // Unprepares checkpointed claims whose ResourceClaim is gone or has another
  // UID. Entries whose claim cannot be read (API down) are kept. With
  // record_aborted, PrepareAborted entries are not looked up but dropped once
  // older than aborted_ttl (or without a readable abortedAt). Returns how many
  // entries were unprepared or dropped.
  common::StatusOr<int> Reconcile();

  // Claim UIDs in the checkpoint, by state (tests, metrics).
  common::StatusOr<Checkpoint> ReadCheckpoint() const;

  // Calls `fn` with the checkpoint while holding what a claim operation
  // holds (the mutex, pu.lock, cp.lock), so that no Prepare or Unprepare
  // runs until it returns: for a backend's node-wide decision that depends
  // on what is prepared (the CD plugin's unused node label). A claim waiting
  // in AwaitRetry holds no lock; its PrepareStarted entry is in the
  // checkpoint. Returns fn's status, or the locks' or the read's error.
  common::Status WithCheckpoint(const std::function<common::Status(const Checkpoint&)>& fn) const;

 private:
  ClaimPreparer(ClaimPreparerOptions options, k8s::Client& client, ClaimDeviceBackend& backend);

  class RequestRecord;  // one kubelet request in the metrics

  PrepareResult PrepareOne(const ClaimRef& ref);
  // One attempt under the node locks: the recorded devices, or the backend's
  // status (kUnavailable: the caller may wait and try again).
  common::StatusOr<std::vector<PreparedDevice>> PrepareLocked(const ClaimRef& ref,
                                                              const nlohmann::ordered_json& claim,
                                                              RequestRecord& record);
  common::StatusOr<int> DropExpiredAborted();
  common::Status UnprepareOne(const std::string& uid, RequestRecord& record);
  // Writes the checkpoint, then recomputes the prepared-devices metric from it.
  common::Status StoreCheckpoint(const Checkpoint& checkpoint) const;
  common::StatusOr<nlohmann::ordered_json> FetchClaim(const std::string& ns, const std::string& name) const;

  std::filesystem::path CheckpointPath() const { return options_.plugin_dir / "checkpoint.json"; }
  std::filesystem::path LockPath() const { return options_.plugin_dir / "pu.lock"; }
  std::filesystem::path CheckpointLockPath() const { return options_.plugin_dir / "cp.lock"; }

  // pu.lock, then cp.lock: the Go driver takes cp.lock around each checkpoint
  // read-modify-write, and during a rolling switch between the two drivers
  // both may run on a node at once.
  struct NodeLocks {
    FileLock prepare;
    FileLock checkpoint;
  };
  common::StatusOr<NodeLocks> LockNode() const;

  const ClaimPreparerOptions options_;
  k8s::Client& client_;
  ClaimDeviceBackend& backend_;
  mutable std::mutex mu_;  // with pu.lock: one claim operation at a time
};

}  // namespace nvdra::kubeletplugin
