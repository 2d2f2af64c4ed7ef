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
// Ownership: borrows the client and the backend, which must outlive it.
// Thread-safety: thread-safe; one claim operation runs at a time on the node
// (pu.lock across processes, a mutex within this one).

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "kubeletplugin/checkpoint.h"
#include "kubeletplugin/dra_service.h"
#include "kubeletplugin/node_lock.h"

namespace nvdra::k8s {
class Client;
}  // namespace nvdra::k8s

namespace nvdra::kubeletplugin {

// The driver-specific half. Called with pu.lock held, one call at a time.
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
};

struct ClaimPreparerOptions {
  std::string driver_name;             // "gpu.nvidia.com"
  std::filesystem::path plugin_dir;    // <plugins>/<driver>: checkpoint.json, pu.lock
  std::string boot_id;                 // this boot's id; a checkpoint of another boot is discarded
  std::chrono::milliseconds lock_timeout = std::chrono::seconds(10);
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
  // UID. Entries whose claim cannot be read (API down) are kept. Returns how
  // many were unprepared.
  common::StatusOr<int> Reconcile();

  // Claim UIDs in the checkpoint, by state (tests, metrics).
  common::StatusOr<Checkpoint> ReadCheckpoint() const;

 private:
  ClaimPreparer(ClaimPreparerOptions options, k8s::Client& client, ClaimDeviceBackend& backend);

  PrepareResult PrepareOne(const ClaimRef& ref);
  common::Status UnprepareOne(const std::string& uid);
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
