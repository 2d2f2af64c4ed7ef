#pragma once

// The claim preparation engine both kubelet plugins share: the driver-neutral
// half of NodePrepareResources and NodeUnprepareResources.
//
// For each claim it reads the ResourceClaim (ClaimReader: the API server),
// checks the UID the kubelet sent, resolves this driver's allocation results
// to their decoded and validated opaque configs (ClaimView,
// claim_device_backend.h), then, holding the node-wide `pu.lock` and its own
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
// Ownership: borrows the claim reader and the backend, which must outlive it.
// Thread-safety: thread-safe; one claim operation runs at a time on the node
// (pu.lock across processes, a mutex within this one).

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "kubeletplugin/checkpoint.h"
#include "kubeletplugin/claim_device_backend.h"
#include "kubeletplugin/device_metadata.h"
#include "kubeletplugin/dra_service.h"
#include "kubeletplugin/plugin_metrics.h"
#include "kubeletplugin/node_lock.h"

namespace nvdra::k8s {
class Client;
}  // namespace nvdra::k8s

namespace nvdra::kubeletplugin {

// Where the preparer reads ResourceClaims: the API server in the plugins,
// a fixed set in the preparer's unit tests. Thread-safe.
class ClaimReader {
 public:
  virtual ~ClaimReader() = default;
  // The claim as the server sent it (key order kept: its status goes into
  // the checkpoint, whose checksum the Go driver recomputes over its own
  // struct-ordered encoding). kNotFound when it does not exist; other
  // errors when it cannot be read.
  virtual common::StatusOr<nlohmann::ordered_json> Read(const std::string& ns, const std::string& name) const = 0;
};

// Reads claims from the API server. Borrows the client.
class ApiClaimReader final : public ClaimReader {
 public:
  explicit ApiClaimReader(k8s::Client& client) : client_(client) {}
  common::StatusOr<nlohmann::ordered_json> Read(const std::string& ns, const std::string& name) const override;

 private:
  k8s::Client& client_;
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
  // Deadlines (ready_wait) and PrepareAborted ages; must outlive the preparer.
  const common::Clock* clock = &common::RealClock();
  // The plugin's feature gates: a config whose feature's gate is off fails
  // validation (api::ValidateConfig).
  common::FeatureGates gates = common::FeatureGates::Defaults();
  // Gate DeviceMetadata: metadata files and their CDI specs for each
  // prepared claim (device_metadata.h), in cdi_root.
  bool device_metadata = false;
  std::filesystem::path cdi_root{};
};

class ClaimPreparer final : public DraDriver {
 public:
  // Loads (and, after a reboot, resets) the checkpoint.
  static common::StatusOr<std::unique_ptr<ClaimPreparer>> Create(ClaimPreparerOptions options,
                                                                 const ClaimReader& claims,
                                                                 ClaimDeviceBackend& backend);

  std::map<std::string, PrepareResult> PrepareResourceClaims(const std::vector<ClaimRef>& claims) override;
  std::map<std::string, std::string> UnprepareResourceClaims(const std::vector<ClaimRef>& claims) override;

  // Unprepares checkpointed claims whose ResourceClaim is gone or has another
  // UID, then lets the backend sweep what it keeps for claims the checkpoint
  // does not hold (ClaimDeviceBackend::SweepLeftovers). Entries whose claim cannot be read (API down) are kept. With
  // record_aborted, PrepareAborted entries are not looked up but dropped once
  // older than aborted_ttl (or without a readable abortedAt). Returns how many
  // entries were unprepared or dropped.
  common::StatusOr<int> Reconcile();

  // Whether start-up discarded the claims of a checkpoint written before a
  // reboot (what they prepared is gone with the boot).
  bool DiscardedClaimsOfAnEarlierBoot() const { return discarded_earlier_boot_; }

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
  ClaimPreparer(ClaimPreparerOptions options, const ClaimReader& claims, ClaimDeviceBackend& backend);

  class RequestRecord;  // one kubelet request in the metrics

  PrepareResult PrepareOne(const ClaimRef& ref);
  // One attempt under the node locks: the recorded devices, or the backend's
  // status (kUnavailable: the caller may wait and try again).
  common::StatusOr<std::vector<PreparedDevice>> PrepareLocked(const ClaimView& view,
                                                              const nlohmann::ordered_json& status,
                                                              const std::optional<std::string>& pod_claim_name,
                                                              RequestRecord& record);
  // The kubelet's answer for prepared `groups`: their devices, with each
  // request's metadata CDI device id when DeviceMetadata is on (the files
  // are written first; a failure there is logged, as upstream's helper does).
  std::vector<PreparedDevice> Answer(const ClaimRef& ref, const std::optional<std::string>& pod_claim_name,
                                     const std::vector<PreparedDeviceGroup>& groups) const;
  common::StatusOr<int> DropExpiredAborted();
  common::Status UnprepareOne(const std::string& uid, RequestRecord& record);
  // Writes the checkpoint, then recomputes the prepared-devices metric from it.
  common::Status StoreCheckpoint(const Checkpoint& checkpoint) const;
  // The claim's allocation resolved to its configs, each validated.
  common::StatusOr<ClaimView> ResolveValidatedView(const ClaimRef& ref, const nlohmann::ordered_json& status) const;
  // The entry with its allocation resolved again, and the devices the
  // checkpoint's other completed claims hold, for the backend.
  RecordedClaim Recorded(const std::string& uid, const CheckpointedClaim& entry, const Checkpoint& checkpoint) const;
  // The overlap guard of Prepare: kFailedPrecondition naming the device and
  // the claim that holds it.
  common::Status CheckNoOverlap(const ClaimView& view, const Checkpoint& checkpoint) const;

  std::optional<DeviceMetadataWriter> metadata_;

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

  // What one claim operation holds while it runs: the mutex, then the node
  // locks, the kubelet request's in-flight mark (none for the preparer's own
  // passes), and the checkpoint as read under them. Released in reverse.
  struct Held {
    std::unique_lock<std::mutex> guard;
    NodeLocks node;
    std::optional<PluginMetrics::InFlight> in_flight;
    Checkpoint checkpoint;
  };
  // `record`: the kubelet request, told whether the node locks were taken;
  // nullptr for the preparer's own passes.
  common::StatusOr<Held> Hold(RequestRecord* record) const;

  const ClaimPreparerOptions options_;
  const ClaimReader& claims_;
  ClaimDeviceBackend& backend_;
  bool discarded_earlier_boot_ = false;  // set by Create
  // With pu.lock: one claim operation at a time. It guards no member (what
  // it protects is the checkpoint on disk, together with the file locks),
  // so it carries no annotation; Hold() returns it held with the rest.
  mutable std::mutex mu_;
};

}  // namespace nvdra::kubeletplugin
