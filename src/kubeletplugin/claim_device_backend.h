#pragma once

// The driver-specific half of claim preparation, and the typed claim it works
// on. The ClaimPreparer (claim_preparer.h) reads the ResourceClaim, resolves
// this driver's allocation results to their opaque configs (upstream's
// precedence, api::ResolveDeviceConfigs, with the backend saying which config
// kind fits which device) and hands the backend a ClaimView; the backend
// returns typed device groups (prepared_devices.h), which the framework
// records in the checkpoint and answers the kubelet with. A backend never
// sees JSON of the claim or of the checkpoint.
//
// Defines: ClaimView, RecordedClaim, ClaimDeviceBackend, ResolveClaimView.
//
// Ownership: ClaimView and RecordedClaim are values (RecordedClaim borrows
// the checkpoint entry for the duration of one call). Thread-safety: see
// ClaimDeviceBackend.

#include <chrono>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/opaque_config.h"
#include "common/status.h"
#include "kubeletplugin/checkpoint.h"
#include "kubeletplugin/dra_service.h"
#include "kubeletplugin/prepared_devices.h"

namespace nvdra::kubeletplugin {

// A claim as a backend sees it: who it is, and this driver's allocated
// devices grouped by the opaque config that applies to them (decoded
// strictly; each group's config already passed api::ValidateConfig when the
// view is handed to PrepareDevices).
struct ClaimView {
  ClaimRef ref;
  std::vector<api::ConfiguredResults> groups;
};

// A checkpoint entry handed back to the backend for undoing.
struct RecordedClaim {
  ClaimRef ref;  // name and namespace empty for entries of old files
  const CheckpointedClaim& entry;
  // The recorded allocation resolved again; an error when it does not
  // resolve (the claim failed at that step and prepared nothing) or when the
  // entry has no allocation.
  common::StatusOr<ClaimView> view;
  // Devices (by name) that other claims of the checkpoint still hold: a
  // shared device's state (a time slice) stays while another claim uses it.
  std::set<std::string> held_by_other_claims{};
};

// Called by the ClaimPreparer with pu.lock held, one call at a time, except
// AwaitRetry (no lock held, concurrently with the others) and the two const
// config-matching methods (thread-safe).
class ClaimDeviceBackend {
 public:
  virtual ~ClaimDeviceBackend() = default;

  // The config kinds applied when no class or claim config names a device,
  // in upstream's order (the last one that fits a device wins).
  virtual std::vector<api::ConfigKind> DefaultConfigKinds() const = 0;
  // The config kind a device of this node takes; kNotFound for a device
  // this node does not have (the message says so), or another error for a
  // device this node has but cannot prepare in its mode.
  virtual common::StatusOr<api::ConfigKind> ConfigKindOf(const std::string& device) const = 0;

  // Prepares the claim's devices (configs, CDI spec) and returns what the
  // checkpoint records. Must be safe to repeat after a crash part-way
  // (overwrite, not append). kUnavailable: something outside the node is not
  // ready yet; the preparer calls AwaitRetry and tries again.
  virtual common::StatusOr<std::vector<PreparedDeviceGroup>> PrepareDevices(const ClaimView& claim) = 0;

  // Undoes what an entry records, in any state (a PrepareStarted entry has
  // no groups; its view says what was allocated). Missing pieces (a CDI
  // file already gone) are not errors.
  virtual common::Status UnprepareDevices(const RecordedClaim& claim) = 0;

  // A PrepareStarted leftover of the same claim (a crash, a failed or a
  // not-ready attempt) before PrepareDevices runs again. The default undoes
  // it (UnprepareDevices). A backend whose PrepareDevices simply redoes the
  // same work may keep it, e.g. the CD plugin, whose rollback would remove the
  // node label its DaemonSet pod depends on.
  virtual common::Status RollBackLeftover(const RecordedClaim& claim) { return UnprepareDevices(claim); }

  // An Unprepare of a claim the checkpoint does not know: removes what the
  // backend may still keep of it outside the checkpoint (the GPU plugin's CDI
  // spec, left when an operator moved a corrupt checkpoint aside). Missing
  // pieces are not errors. The default has nothing to remove: OK.
  virtual common::Status ForgetUnknownClaim(const std::string& claim_uid) {
    (void)claim_uid;
    return common::OkStatus();
  }

  // Whether a device that a completed claim holds may serve another claim
  // too, when both claims' configs for it are equal (upstream's rule for
  // consumable shares). The default, and without consumable capacity: no,
  // one claim per device.
  virtual bool SharesDevicesWithEqualConfigs() const { return false; }

  // Removes what the backend keeps outside the checkpoint (the GPU plugin's
  // MPS daemons and dynamic MIG devices) that `checkpoint`'s claims do not
  // hold. Called by ClaimPreparer::Reconcile with pu.lock held, so no
  // Prepare runs meanwhile. The default keeps nothing outside: OK.
  virtual common::Status SweepLeftovers(const Checkpoint& checkpoint) {
    (void)checkpoint;
    return common::OkStatus();
  }

  // Called with no lock held after PrepareDevices failed with kUnavailable
  // (`failure`). Blocks until what the claim waits for is there (return true:
  // the preparer retries at once), or until `deadline` or shutdown (false:
  // the preparer reports `failure`). The default waits for nothing: false.
  virtual bool AwaitRetry(const ClaimView& claim, const common::Status& failure,
                          std::chrono::steady_clock::time_point deadline) {
    (void)claim;
    (void)failure;
    (void)deadline;
    return false;
  }
};

// Resolves `status` (a ResourceClaimStatus) for `driver` with the backend's
// config matching. Errors name the config or device at fault: a config that
// does not decode (kInvalidArgument), a device this node does not have
// (kNotFound). A status without an allocation gives a view with no groups.
// Does not call api::ValidateConfig.
common::StatusOr<ClaimView> ResolveClaimView(const ClaimRef& ref, const nlohmann::ordered_json& status,
                                             std::string_view driver, const ClaimDeviceBackend& backend);

}  // namespace nvdra::kubeletplugin
