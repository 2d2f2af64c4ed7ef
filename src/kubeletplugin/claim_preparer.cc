#include "kubeletplugin/claim_preparer.h"

#include <chrono>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "api/device_configs.h"
#include "api/opaque_config.h"
#include "common/crash_point.h"
#include "common/json_depth.h"
#include "common/json_fields.h"
#include "common/log.h"
#include "k8s/api_error.h"
#include "k8s/client.h"
#include "kubeletplugin/checkpoint_store.h"
#include "kubeletplugin/node_lock.h"

namespace nvdra::kubeletplugin {

using common::JsonMember;
using common::JsonString;
using common::Status;
using common::StatusOr;
using nlohmann::ordered_json;

namespace {

// Equal as JSON values, key order aside, as upstream's semantic DeepEqual
// compares the decoded structs.
bool SameValue(const ordered_json& a, const ordered_json& b) { return nlohmann::json(a) == nlohmann::json(b); }

std::string ClaimString(const ClaimRef& ref) { return fmt::format("{}/{} ({})", ref.ns, ref.name, ref.uid); }

}  // namespace

// One kubelet request in the plugin metrics (no-ops without them), timed as
// upstream times it: from before the node locks to the answer, waits included.
// In flight while an attempt holds the locks. A record not marked Succeeded
// counts as an error when it ends: lock_acquire when its last lock attempt
// failed, else prepare_devices / unprepare_devices; nothing when it never got
// to the locks (the claim could not be read or does not match: upstream's
// helper rejects those before its driver code, which holds the metrics).
class ClaimPreparer::RequestRecord {
 public:
  RequestRecord(PluginMetrics* metrics, ClaimOperation operation)
      : metrics_(metrics), operation_(operation), start_(std::chrono::steady_clock::now()) {}
  ~RequestRecord() {
    if (metrics_ == nullptr || succeeded_ || !tried_lock_) return;
    if (lock_failed_) {
      metrics_->CountError(operation_, kErrorLockAcquire);
    } else {
      metrics_->CountError(operation_, operation_ == ClaimOperation::kPrepare ? kErrorPrepareDevices
                                                                             : kErrorUnprepareDevices);
    }
  }
  RequestRecord(const RequestRecord&) = delete;
  RequestRecord& operator=(const RequestRecord&) = delete;

  // After an attempt to take the node locks; keep the result while they are held.
  [[nodiscard]] std::optional<PluginMetrics::InFlight> Locked(bool ok) {
    tried_lock_ = true;
    lock_failed_ = !ok;
    if (metrics_ == nullptr || !ok) return std::nullopt;
    return metrics_->TrackInFlight(operation_);
  }
  // The driver's part failed before the locks were taken (the claim's
  // configs do not resolve or validate): upstream decodes configs inside its
  // device preparation, so this counts as prepare_devices too.
  void FailedBeforeLock() { tried_lock_ = true; }
  void Succeeded() {
    succeeded_ = true;
    if (metrics_ != nullptr) metrics_->ObserveSuccess(operation_, std::chrono::steady_clock::now() - start_);
  }

 private:
  PluginMetrics* const metrics_;
  const ClaimOperation operation_;
  const std::chrono::steady_clock::time_point start_;
  bool tried_lock_ = false;
  bool lock_failed_ = false;
  bool succeeded_ = false;
};

StatusOr<ordered_json> ApiClaimReader::Read(const std::string& ns, const std::string& name) const {
  k8s::RestRequest request;
  request.path = k8s::resources::kResourceClaims.Path(ns, name);
  auto response = client_.Do(request);
  if (!response.ok()) return response.status();
  // Before parsing: copying the claim recurses per level (json_depth.h).
  if (common::JsonNestsDeeperThan(response->body)) {
    return common::InvalidArgumentError(fmt::format(
        "ResourceClaim {}/{}: nested deeper than {} levels (an opaque config's parameters?); no config of this "
        "driver nests that deep: fix the claim or its DeviceClass",
        ns, name, common::kMaxJsonNesting));
  }
  ordered_json claim = ordered_json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (claim.is_discarded() || !claim.is_object()) {
    return common::InternalError(fmt::format("ResourceClaim {}/{}: the API server sent invalid JSON", ns, name));
  }
  return claim;
}

StatusOr<ClaimView> ResolveClaimView(const ClaimRef& ref, const ordered_json& status, std::string_view driver,
                                     const ClaimDeviceBackend& backend) {
  ClaimView view{.ref = ref, .groups = {}};
  const ordered_json& devices = JsonMember(status, {"allocation", "devices"});
  if (!devices.is_object()) return view;
  ASSIGN_OR_RETURN(view.groups,
                   api::ResolveDeviceConfigs(nlohmann::json(devices), driver, backend.DefaultConfigKinds(),
                                             [&backend](const std::string& device) {
                                               return backend.ConfigKindOf(device);
                                             }));
  return view;
}

ClaimPreparer::ClaimPreparer(ClaimPreparerOptions options, const ClaimReader& claims, ClaimDeviceBackend& backend)
    : options_(std::move(options)), claims_(claims), backend_(backend) {
  if (options_.device_metadata) {
    metadata_.emplace(DeviceMetadataOptions{
        .driver_name = options_.driver_name, .plugin_dir = options_.plugin_dir, .cdi_root = options_.cdi_root});
  }
}

std::vector<PreparedDevice> ClaimPreparer::Answer(const ClaimRef& ref, const std::optional<std::string>& pod_claim_name,
                                                  const std::vector<PreparedDeviceGroup>& groups) const {
  std::vector<PreparedDevice> devices = KubeletDevices(groups);
  if (!metadata_) return devices;
  StatusOr<std::map<std::string, std::string>> ids = metadata_->Write(ref, pod_claim_name, groups);
  if (!ids.ok()) {
    LOG_ERROR("cannot write the claim's device metadata", {{"claim", ClaimString(ref)}, {"err", ids.status()}});
    return devices;
  }
  // With the first device of each request, so that the runtime mounts the
  // request's file once.
  for (PreparedDevice& device : devices) {
    for (const std::string& request : device.requests) {
      auto it = ids->find(request.substr(0, request.find('/')));
      if (it == ids->end()) continue;
      device.cdi_device_ids.push_back(it->second);
      ids->erase(it);
    }
  }
  return devices;
}

StatusOr<std::unique_ptr<ClaimPreparer>> ClaimPreparer::Create(ClaimPreparerOptions options,
                                                               const ClaimReader& claims,
                                                               ClaimDeviceBackend& backend) {
  std::error_code ec;
  std::filesystem::create_directories(options.plugin_dir, ec);
  if (ec) {
    return common::InternalError(
        fmt::format("create plugin directory {}: {}", options.plugin_dir.string(), ec.message()));
  }
  std::unique_ptr<ClaimPreparer> preparer(new ClaimPreparer(std::move(options), claims, backend));
  ASSIGN_OR_RETURN(NodeLocks locks, preparer->LockNode());
  ASSIGN_OR_RETURN(Checkpoint checkpoint, LoadForBoot(preparer->CheckpointPath(), preparer->options_.boot_id,
                                                      &preparer->discarded_earlier_boot_));
  if (preparer->options_.metrics != nullptr) preparer->options_.metrics->SetPreparedDevices(checkpoint);
  return preparer;
}

StatusOr<ClaimPreparer::NodeLocks> ClaimPreparer::LockNode() const {
  ASSIGN_OR_RETURN(FileLock prepare, FileLock::Acquire(LockPath(), options_.lock_timeout));
  ASSIGN_OR_RETURN(FileLock checkpoint, FileLock::Acquire(CheckpointLockPath(), options_.lock_timeout));
  return NodeLocks{std::move(prepare), std::move(checkpoint)};
}

StatusOr<ClaimPreparer::Held> ClaimPreparer::Hold(RequestRecord* record) const {
  std::unique_lock<std::mutex> guard(mu_);
  StatusOr<NodeLocks> locks = LockNode();
  std::optional<PluginMetrics::InFlight> in_flight =
      record != nullptr ? record->Locked(locks.ok()) : std::optional<PluginMetrics::InFlight>();
  if (!locks.ok()) return locks.status();
  ASSIGN_OR_RETURN(Checkpoint checkpoint, ReadCheckpoint());
  return Held{std::move(guard), *std::move(locks), std::move(in_flight), std::move(checkpoint)};
}

Status ClaimPreparer::StoreCheckpoint(const Checkpoint& checkpoint) const {
  RETURN_IF_ERROR(CheckpointStore(CheckpointPath()).Store(checkpoint));
  if (options_.metrics != nullptr) options_.metrics->SetPreparedDevices(checkpoint);
  return common::OkStatus();
}

StatusOr<Checkpoint> ClaimPreparer::ReadCheckpoint() const {
  return CheckpointStore(CheckpointPath()).Load();
}

Status ClaimPreparer::WithCheckpoint(const std::function<Status(const Checkpoint&)>& fn) const {
  ASSIGN_OR_RETURN(const Held held, Hold(nullptr));
  return fn(held.checkpoint);
}

StatusOr<ClaimView> ClaimPreparer::ResolveValidatedView(const ClaimRef& ref, const ordered_json& status) const {
  // Every config naming this driver, applied to a device or not, as the
  // webhook judges them: the two never disagree (api/device_configs.h).
  RETURN_IF_ERROR(api::ValidateDeviceConfigs(JsonMember(status, {"allocation", "devices"}), "allocation.devices",
                                             options_.gates, options_.driver_name));
  ASSIGN_OR_RETURN(ClaimView view, ResolveClaimView(ref, status, options_.driver_name, backend_));
  for (const api::ConfiguredResults& group : view.groups) {
    RETURN_IF_ERROR(api::ValidateConfig(group.config, group.source, options_.gates));
  }
  return view;
}

namespace {

// The config `view` applies to `device`, or nullptr.
const api::OpaqueConfig* ConfigOfDevice(const ClaimView& view, const std::string& device) {
  for (const api::ConfiguredResults& group : view.groups) {
    for (const api::AllocatedDevice& allocated : group.results) {
      if (allocated.device == device) return &group.config;
    }
  }
  return nullptr;
}

}  // namespace

Status ClaimPreparer::CheckNoOverlap(const ClaimView& view, const Checkpoint& checkpoint) const {
  // A device serves one completed claim at a time (admin access may look at
  // a device in use), unless the backend shares devices (consumable
  // capacity) and both claims configure it alike.
  std::set<std::string> wanted;
  for (const api::ConfiguredResults& group : view.groups) {
    for (const api::AllocatedDevice& device : group.results) {
      if (!device.admin_access) wanted.insert(device.device);
    }
  }
  for (const auto& [other_uid, entry] : checkpoint.claims) {
    if (other_uid == view.ref.uid || entry.state != ClaimCheckpointState::kPrepareCompleted) continue;
    for (const PreparedDevice& device : KubeletDevices(entry.prepared_devices)) {
      if (!wanted.contains(device.device_name)) continue;
      const std::string holder = fmt::format("claim {}/{} ({})", entry.ns, entry.name, other_uid);
      if (!backend_.SharesDevicesWithEqualConfigs()) {
        return common::FailedPreconditionError(fmt::format(
            "device {} is already prepared for {}; unprepare that claim first", device.device_name, holder));
      }
      const RecordedClaim other = Recorded(other_uid, entry, checkpoint);
      const api::OpaqueConfig* mine = ConfigOfDevice(view, device.device_name);
      const api::OpaqueConfig* theirs = other.view.ok() ? ConfigOfDevice(*other.view, device.device_name) : nullptr;
      if (mine == nullptr || theirs == nullptr || mine->kind != theirs->kind || mine->object != theirs->object) {
        return common::FailedPreconditionError(fmt::format(
            "device {} is shared with {}, whose config for it differs: claims that share a device must "
            "configure it alike (the same sharing settings)",
            device.device_name, holder));
      }
    }
  }
  return common::OkStatus();
}

RecordedClaim ClaimPreparer::Recorded(const std::string& uid, const CheckpointedClaim& entry,
                                      const Checkpoint& checkpoint) const {
  const ClaimRef ref{.uid = uid, .name = entry.name, .ns = entry.ns};
  StatusOr<ClaimView> view = common::FailedPreconditionError("the entry records no allocation");
  if (JsonMember(entry.status, "allocation").is_object()) {
    view = ResolveClaimView(ref, entry.status, options_.driver_name, backend_);
  }
  std::set<std::string> held;
  for (const auto& [other_uid, other] : checkpoint.claims) {
    if (other_uid == uid || other.state != ClaimCheckpointState::kPrepareCompleted) continue;
    for (const PreparedDevice& device : KubeletDevices(other.prepared_devices)) held.insert(device.device_name);
  }
  return RecordedClaim{.ref = ref, .entry = entry, .view = std::move(view), .held_by_other_claims = std::move(held)};
}

std::map<std::string, PrepareResult> ClaimPreparer::PrepareResourceClaims(const std::vector<ClaimRef>& claims) {
  std::map<std::string, PrepareResult> results;
  if (claims.size() == 1) {
    results[claims[0].uid] = PrepareOne(claims[0]);
    return results;
  }
  // Concurrently: a claim waiting in AwaitRetry must not hold up the others
  // (the locked parts still run one at a time).
  std::vector<PrepareResult> outcomes(claims.size());
  {
    std::vector<std::jthread> workers;
    workers.reserve(claims.size());
    for (std::size_t i = 0; i < claims.size(); ++i) {
      workers.emplace_back([this, &claims, &outcomes, i] { outcomes[i] = PrepareOne(claims[i]); });
    }
  }
  for (std::size_t i = 0; i < claims.size(); ++i) results[claims[i].uid] = std::move(outcomes[i]);
  return results;
}

std::map<std::string, std::string> ClaimPreparer::UnprepareResourceClaims(const std::vector<ClaimRef>& claims) {
  std::map<std::string, std::string> results;
  for (const ClaimRef& ref : claims) {
    RequestRecord record(options_.metrics, ClaimOperation::kUnprepare);
    Status status = UnprepareOne(ref.uid, record);
    if (!status.ok()) {
      LOG_ERROR("unprepare failed", {{"claim", ClaimString(ref)}, {"err", status}});
      results[ref.uid] = fmt::format("unprepare claim {}: {}", ClaimString(ref), status.message());
    } else {
      record.Succeeded();
      LOG_INFO(2, "claim unprepared", {{"claim", ClaimString(ref)}});
      results[ref.uid] = "";
    }
  }
  return results;
}

PrepareResult ClaimPreparer::PrepareOne(const ClaimRef& ref) {
  auto fail = [&](const Status& status) {
    LOG_ERROR("prepare failed", {{"claim", ClaimString(ref)}, {"err", status}});
    return PrepareResult{.devices = {}, .error = fmt::format("prepare claim {}: {}", ClaimString(ref),
                                                              status.message())};
  };
  // The API read and the config resolution happen before the lock: they are
  // the slow part, and another claim's preparation need not wait for them.
  StatusOr<ordered_json> claim = claims_.Read(ref.ns, ref.name);
  if (!claim.ok()) return fail(claim.status());
  const std::string uid = JsonString(*claim, {"metadata", "uid"});
  if (uid != ref.uid) {
    return fail(common::FailedPreconditionError(
        fmt::format("the API server has UID {} for this claim: it was deleted and re-created", uid)));
  }
  const ordered_json& status = JsonMember(*claim, "status");
  if (!JsonMember(status, "allocation").is_object()) {
    return fail(common::FailedPreconditionError("the claim is not allocated"));
  }
  std::optional<std::string> pod_claim_name;
  if (const ordered_json& annotations = JsonMember(JsonMember(*claim, "metadata"), "annotations");
      annotations.is_object()) {
    if (auto it = annotations.find(std::string(kPodClaimNameAnnotation)); it != annotations.end() && it->is_string()) {
      pod_claim_name = it->get<std::string>();
    }
  }
  RequestRecord record(options_.metrics, ClaimOperation::kPrepare);
  StatusOr<ClaimView> view = ResolveValidatedView(ref, status);
  if (!view.ok()) {
    record.FailedBeforeLock();
    return fail(view.status());
  }

  const auto deadline = options_.clock->Now() + options_.ready_wait;
  while (true) {
    StatusOr<std::vector<PreparedDevice>> devices = PrepareLocked(*view, status, pod_claim_name, record);
    if (devices.ok()) {
      record.Succeeded();
      return PrepareResult{.devices = std::move(*devices), .error = ""};
    }
    if (devices.status().code() != common::StatusCode::kUnavailable) return fail(devices.status());
    // No lock is held here: other claims prepare and unprepare meanwhile.
    LOG_INFO(3, "claim waits outside the node lock", {{"claim", ClaimString(ref)}, {"reason", devices.status()}});
    if (!backend_.AwaitRetry(*view, devices.status(), deadline)) return fail(devices.status());
    LOG_INFO(4, "claim retries: what it waited for is there", {{"claim", ClaimString(ref)}});
  }
}

StatusOr<std::vector<PreparedDevice>> ClaimPreparer::PrepareLocked(const ClaimView& view, const ordered_json& status,
                                                                   const std::optional<std::string>& pod_claim_name,
                                                                   RequestRecord& record) {
  const ClaimRef& ref = view.ref;
  ASSIGN_OR_RETURN(Held held, Hold(&record));
  Checkpoint& checkpoint = held.checkpoint;

  if (auto it = checkpoint.claims.find(ref.uid); it != checkpoint.claims.end()) {
    if (it->second.state == ClaimCheckpointState::kPrepareCompleted) {
      LOG_INFO(4, "claim already prepared", {{"claim", ClaimString(ref)}});
      return Answer(ref, pod_claim_name, it->second.prepared_devices);
    }
    if (it->second.state == ClaimCheckpointState::kPrepareAborted && SameValue(it->second.status, status)) {
      return common::FailedPreconditionError(
          "stale prepare: this claim was unprepared while its preparation was pending (PrepareAborted at " +
          it->second.aborted_at + "); it is not prepared again");
    }
  }

  RETURN_IF_ERROR(CheckNoOverlap(view, checkpoint));

  // A PrepareStarted leftover (crash or failed attempt): the backend undoes
  // it first (or keeps it, when redoing is safe), so a half-made preparation
  // never leaks. A PrepareAborted entry was undone when it was recorded.
  if (auto it = checkpoint.claims.find(ref.uid);
      it != checkpoint.claims.end() && it->second.state == ClaimCheckpointState::kPrepareStarted) {
    LOG_INFO(2, "found an earlier partial preparation", {{"claim", ClaimString(ref)}});
    RETURN_IF_ERROR(backend_.RollBackLeftover(Recorded(ref.uid, it->second, checkpoint)));
  }

  CheckpointedClaim started;
  started.state = ClaimCheckpointState::kPrepareStarted;
  started.status = status;
  started.name = ref.name;
  started.ns = ref.ns;
  // A claim retried after waiting (or after a failed attempt) finds its own
  // PrepareStarted entry with the same status: that record is on disk
  // already, and writing it again would only add an fsync to the path from
  // the awaited event to the prepared claim.
  auto recorded = checkpoint.claims.find(ref.uid);
  const bool already_recorded = recorded != checkpoint.claims.end() &&
                                recorded->second.state == ClaimCheckpointState::kPrepareStarted &&
                                recorded->second.name == ref.name && recorded->second.ns == ref.ns &&
                                SameValue(recorded->second.status, status);
  checkpoint.claims[ref.uid] = started;
  common::CrashPoint("prepare-before-started-checkpoint");
  if (!already_recorded) RETURN_IF_ERROR(StoreCheckpoint(checkpoint));
  common::CrashPoint("prepare-after-started-checkpoint");

  ASSIGN_OR_RETURN(std::vector<PreparedDeviceGroup> groups, backend_.PrepareDevices(view));
  common::CrashPoint("prepare-after-devices");

  CheckpointedClaim& completed = checkpoint.claims[ref.uid];
  completed.state = ClaimCheckpointState::kPrepareCompleted;
  completed.prepared_devices = std::move(groups);
  RETURN_IF_ERROR(StoreCheckpoint(checkpoint));
  common::CrashPoint("prepare-after-completed-checkpoint");
  LOG_INFO(2, "claim prepared", {{"claim", ClaimString(ref)}});
  return Answer(ref, pod_claim_name, completed.prepared_devices);
}

Status ClaimPreparer::UnprepareOne(const std::string& uid, RequestRecord& record) {
  ASSIGN_OR_RETURN(Held held, Hold(&record));
  Checkpoint& checkpoint = held.checkpoint;
  auto it = checkpoint.claims.find(uid);
  if (it == checkpoint.claims.end()) {
    // Never prepared here, already undone, or prepared before the checkpoint
    // was lost (moved aside by an operator): the backend removes what it may
    // still have of it (a CDI spec), which nothing else would.
    return backend_.ForgetUnknownClaim(uid);
  }
  if (it->second.state == ClaimCheckpointState::kPrepareAborted) return common::OkStatus();  // undone before
  RETURN_IF_ERROR(backend_.UnprepareDevices(Recorded(uid, it->second, checkpoint)));
  common::CrashPoint("unprepare-after-devices");
  if (metadata_) {
    if (Status removed = metadata_->Remove(ClaimRef{.uid = uid, .name = it->second.name, .ns = it->second.ns});
        !removed.ok()) {
      LOG_ERROR("cannot remove the claim's device metadata", {{"claim", uid}, {"err", removed}});
    }
  }
  if (options_.record_aborted && it->second.state == ClaimCheckpointState::kPrepareStarted) {
    it->second.state = ClaimCheckpointState::kPrepareAborted;
    it->second.prepared_devices.clear();
    it->second.aborted_at = FormatGoTime(options_.clock->WallNow());
  } else {
    checkpoint.claims.erase(it);
  }
  return StoreCheckpoint(checkpoint);
}

StatusOr<int> ClaimPreparer::DropExpiredAborted() {
  ASSIGN_OR_RETURN(Held held, Hold(nullptr));
  Checkpoint& checkpoint = held.checkpoint;
  const auto now = options_.clock->WallNow();
  int dropped = 0;
  for (auto it = checkpoint.claims.begin(); it != checkpoint.claims.end();) {
    if (it->second.state != ClaimCheckpointState::kPrepareAborted) {
      ++it;
      continue;
    }
    StatusOr<std::chrono::system_clock::time_point> at = ParseGoTime(it->second.aborted_at);
    // Not `now - *at`: for a time far from now (a hand-edited or hostile
    // file) the difference overflows the clock's 64-bit nanoseconds.
    if (at.ok() && *at > now - options_.aborted_ttl) {
      ++it;
      continue;
    }
    LOG_INFO(2, "dropping an expired PrepareAborted entry",
             {{"claim", fmt::format("{}/{} ({})", it->second.ns, it->second.name, it->first)}});
    it = checkpoint.claims.erase(it);
    ++dropped;
  }
  if (dropped > 0) RETURN_IF_ERROR(StoreCheckpoint(checkpoint));
  return dropped;
}

StatusOr<int> ClaimPreparer::Reconcile() {
  int unprepared = 0;
  if (options_.record_aborted) {
    ASSIGN_OR_RETURN(unprepared, DropExpiredAborted());
  }
  ASSIGN_OR_RETURN(Checkpoint checkpoint, ReadCheckpoint());
  for (const auto& [uid, entry] : checkpoint.claims) {
    if (entry.name.empty()) continue;  // old format without a name: nothing to ask the API server
    if (entry.state == ClaimCheckpointState::kPrepareAborted) continue;  // expires by age
    StatusOr<ordered_json> claim = claims_.Read(entry.ns, entry.name);
    std::string reason;
    if (!claim.ok()) {
      if (!k8s::IsNotFound(claim.status())) {
        LOG_INFO(2, "cannot check a checkpointed claim; keeping it",
                 {{"claim", fmt::format("{}/{}", entry.ns, entry.name)}, {"err", claim.status()}});
        continue;
      }
      reason = "deleted";
    } else if (JsonString(*claim, {"metadata", "uid"}) != uid) {
      reason = "replaced by a claim with another UID";
    } else {
      continue;
    }
    LOG_INFO(0, "unpreparing a stale claim",
             {{"claim", fmt::format("{}/{} ({})", entry.ns, entry.name, uid)}, {"reason", reason}});
    RequestRecord unrecorded(nullptr, ClaimOperation::kUnprepare);  // not a kubelet request
    if (Status s = UnprepareOne(uid, unrecorded); !s.ok()) {
      LOG_ERROR("stale claim clean-up failed", {{"claim", uid}, {"err", s}});
      continue;
    }
    ++unprepared;
  }
  // What the backend keeps outside the checkpoint, for claims it no longer
  // holds; under the lock, so that a claim being prepared is in the
  // checkpoint (PrepareStarted) before its backend state can be seen.
  {
    ASSIGN_OR_RETURN(Held held, Hold(nullptr));
    if (Status s = backend_.SweepLeftovers(held.checkpoint); !s.ok()) {
      LOG_ERROR("removing the backend's leftovers failed", {{"err", s}});
    }
  }
  return unprepared;
}

}  // namespace nvdra::kubeletplugin
