#include "kubeletplugin/claim_preparer.h"

#include <set>
#include <utility>

#include <fmt/format.h>

#include "common/crash_point.h"
#include "common/log.h"
#include "k8s/api_error.h"
#include "k8s/client.h"
#include "kubeletplugin/checkpoint_store.h"
#include "kubeletplugin/node_lock.h"

namespace nvdra::kubeletplugin {

using common::Status;
using common::StatusOr;
using nlohmann::ordered_json;

namespace {

std::string StringAt(const ordered_json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::vector<std::string> StringsAt(const ordered_json& object, const char* key) {
  std::vector<std::string> out;
  if (!object.is_object()) return out;
  auto it = object.find(key);
  if (it == object.end() || !it->is_array()) return out;
  for (const auto& item : *it) {
    if (item.is_string()) out.push_back(item.get<std::string>());
  }
  return out;
}

// Names of the non-admin devices this driver allocated to the claim.
std::set<std::string> RequestedNonAdminDevices(const ordered_json& claim, const std::string& driver) {
  std::set<std::string> names;
  const ordered_json* results = nullptr;
  if (auto s = claim.find("status"); s != claim.end()) {
    if (auto a = s->find("allocation"); a != s->end()) {
      if (auto d = a->find("devices"); d != a->end()) {
        if (auto r = d->find("results"); r != d->end() && r->is_array()) results = &*r;
      }
    }
  }
  if (results == nullptr) return names;
  for (const auto& result : *results) {
    if (StringAt(result, "driver") != driver) continue;
    auto admin = result.find("adminAccess");
    if (admin != result.end() && admin->is_boolean() && admin->get<bool>()) continue;
    names.insert(StringAt(result, "device"));
  }
  return names;
}

std::string ClaimString(const ClaimRef& ref) { return fmt::format("{}/{} ({})", ref.ns, ref.name, ref.uid); }

}  // namespace

std::vector<PreparedDevice> DevicesFromGroups(const ordered_json& groups) {
  std::vector<PreparedDevice> devices;
  if (!groups.is_array()) return devices;
  for (const auto& group : groups) {
    auto list = group.find("devices");
    if (list == group.end() || !list->is_array()) continue;
    for (const auto& entry : *list) {
      if (!entry.is_object()) continue;
      for (const auto& [kind, value] : entry.items()) {
        if (!value.is_object()) continue;  // the other kinds are null
        auto device = value.find("device");
        if (device == value.end() || !device->is_object()) continue;
        devices.push_back(PreparedDevice{
            .requests = StringsAt(*device, "Requests"),
            .pool_name = StringAt(*device, "PoolName"),
            .device_name = StringAt(*device, "DeviceName"),
            .cdi_device_ids = StringsAt(*device, "CDIDeviceIDs"),
        });
      }
    }
  }
  return devices;
}

ClaimPreparer::ClaimPreparer(ClaimPreparerOptions options, k8s::Client& client, ClaimDeviceBackend& backend)
    : options_(std::move(options)), client_(client), backend_(backend) {}

StatusOr<std::unique_ptr<ClaimPreparer>> ClaimPreparer::Create(ClaimPreparerOptions options,
                                                               k8s::Client& client,
                                                               ClaimDeviceBackend& backend) {
  std::error_code ec;
  std::filesystem::create_directories(options.plugin_dir, ec);
  if (ec) {
    return common::InternalError(
        fmt::format("create plugin directory {}: {}", options.plugin_dir.string(), ec.message()));
  }
  std::unique_ptr<ClaimPreparer> preparer(new ClaimPreparer(std::move(options), client, backend));
  ASSIGN_OR_RETURN(NodeLocks locks, preparer->LockNode());
  RETURN_IF_ERROR(LoadForBoot(preparer->CheckpointPath(), preparer->options_.boot_id).status());
  return preparer;
}

StatusOr<ClaimPreparer::NodeLocks> ClaimPreparer::LockNode() const {
  ASSIGN_OR_RETURN(FileLock prepare, FileLock::Acquire(LockPath(), options_.lock_timeout));
  ASSIGN_OR_RETURN(FileLock checkpoint, FileLock::Acquire(CheckpointLockPath(), options_.lock_timeout));
  return NodeLocks{std::move(prepare), std::move(checkpoint)};
}

StatusOr<Checkpoint> ClaimPreparer::ReadCheckpoint() const {
  return CheckpointStore(CheckpointPath()).Load();
}

StatusOr<ordered_json> ClaimPreparer::FetchClaim(const std::string& ns, const std::string& name) const {
  // Raw body, parsed keeping the server's key order: the claim's status goes
  // into the checkpoint, whose checksum the Go driver recomputes over its own
  // struct-ordered encoding.
  k8s::RestRequest request;
  request.path = k8s::resources::kResourceClaims.Path(ns, name);
  auto response = client_.Do(request);
  if (!response.ok()) return response.status();
  ordered_json claim = ordered_json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (claim.is_discarded() || !claim.is_object()) {
    return common::InternalError(fmt::format("ResourceClaim {}/{}: the API server sent invalid JSON", ns, name));
  }
  return claim;
}

std::map<std::string, PrepareResult> ClaimPreparer::PrepareResourceClaims(const std::vector<ClaimRef>& claims) {
  std::map<std::string, PrepareResult> results;
  for (const ClaimRef& ref : claims) results[ref.uid] = PrepareOne(ref);
  return results;
}

std::map<std::string, std::string> ClaimPreparer::UnprepareResourceClaims(const std::vector<ClaimRef>& claims) {
  std::map<std::string, std::string> results;
  for (const ClaimRef& ref : claims) {
    Status status = UnprepareOne(ref.uid);
    if (!status.ok()) {
      LOG_ERROR("unprepare failed", {{"claim", ClaimString(ref)}, {"err", status}});
      results[ref.uid] = fmt::format("unprepare claim {}: {}", ClaimString(ref), status.message());
    } else {
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
  // The API read happens before the lock: it is the slow part, and another
  // claim's preparation need not wait for it.
  StatusOr<ordered_json> claim = FetchClaim(ref.ns, ref.name);
  if (!claim.ok()) return fail(claim.status());
  const std::string uid = StringAt((*claim)["metadata"], "uid");
  if (uid != ref.uid) {
    return fail(common::FailedPreconditionError(
        fmt::format("the API server has UID {} for this claim: it was deleted and re-created", uid)));
  }
  auto allocation = (*claim)["status"].find("allocation");
  if (allocation == (*claim)["status"].end() || allocation->is_null()) {
    return fail(common::FailedPreconditionError("the claim is not allocated"));
  }

  std::lock_guard<std::mutex> guard(mu_);
  StatusOr<NodeLocks> locks = LockNode();
  if (!locks.ok()) return fail(locks.status());
  CheckpointStore store(CheckpointPath());
  StatusOr<Checkpoint> checkpoint = store.Load();
  if (!checkpoint.ok()) return fail(checkpoint.status());

  if (auto it = checkpoint->claims.find(ref.uid); it != checkpoint->claims.end()) {
    if (it->second.state == ClaimCheckpointState::kPrepareCompleted) {
      LOG_INFO(4, "claim already prepared", {{"claim", ClaimString(ref)}});
      return PrepareResult{.devices = DevicesFromGroups(it->second.prepared_devices), .error = ""};
    }
  }

  // Overlap guard: a device may serve one completed claim at a time.
  const std::set<std::string> wanted = RequestedNonAdminDevices(*claim, options_.driver_name);
  for (const auto& [other_uid, entry] : checkpoint->claims) {
    if (other_uid == ref.uid || entry.state != ClaimCheckpointState::kPrepareCompleted) continue;
    for (const PreparedDevice& device : DevicesFromGroups(entry.prepared_devices)) {
      if (wanted.contains(device.device_name)) {
        return fail(common::FailedPreconditionError(fmt::format(
            "device {} is already prepared for claim {}/{} ({}); unprepare that claim first",
            device.device_name, entry.ns, entry.name, other_uid)));
      }
    }
  }

  // A PrepareStarted leftover (crash or failed attempt): undo it first, so a
  // half-made preparation never leaks.
  if (auto it = checkpoint->claims.find(ref.uid); it != checkpoint->claims.end()) {
    LOG_INFO(2, "rolling back an earlier partial preparation", {{"claim", ClaimString(ref)}});
    if (Status s = backend_.UnprepareDevices(ref.uid, it->second); !s.ok()) return fail(s);
  }

  CheckpointedClaim started;
  started.state = ClaimCheckpointState::kPrepareStarted;
  started.status = (*claim)["status"];
  started.name = ref.name;
  started.ns = ref.ns;
  checkpoint->claims[ref.uid] = started;
  common::CrashPoint("prepare-before-started-checkpoint");
  if (Status s = store.Store(*checkpoint); !s.ok()) return fail(s);
  common::CrashPoint("prepare-after-started-checkpoint");

  StatusOr<ordered_json> groups = backend_.PrepareDevices(*claim);
  if (!groups.ok()) return fail(groups.status());
  common::CrashPoint("prepare-after-devices");

  CheckpointedClaim& completed = checkpoint->claims[ref.uid];
  completed.state = ClaimCheckpointState::kPrepareCompleted;
  completed.prepared_devices = *groups;
  if (Status s = store.Store(*checkpoint); !s.ok()) return fail(s);
  common::CrashPoint("prepare-after-completed-checkpoint");
  LOG_INFO(2, "claim prepared", {{"claim", ClaimString(ref)}});
  return PrepareResult{.devices = DevicesFromGroups(*groups), .error = ""};
}

Status ClaimPreparer::UnprepareOne(const std::string& uid) {
  std::lock_guard<std::mutex> guard(mu_);
  ASSIGN_OR_RETURN(NodeLocks locks, LockNode());
  CheckpointStore store(CheckpointPath());
  ASSIGN_OR_RETURN(Checkpoint checkpoint, store.Load());
  auto it = checkpoint.claims.find(uid);
  if (it == checkpoint.claims.end()) return common::OkStatus();  // never prepared here, or already undone
  RETURN_IF_ERROR(backend_.UnprepareDevices(uid, it->second));
  common::CrashPoint("unprepare-after-devices");
  checkpoint.claims.erase(it);
  return store.Store(checkpoint);
}

StatusOr<int> ClaimPreparer::Reconcile() {
  ASSIGN_OR_RETURN(Checkpoint checkpoint, ReadCheckpoint());
  int unprepared = 0;
  for (const auto& [uid, entry] : checkpoint.claims) {
    if (entry.name.empty()) continue;  // old format without a name: nothing to ask the API server
    StatusOr<ordered_json> claim = FetchClaim(entry.ns, entry.name);
    std::string reason;
    if (!claim.ok()) {
      if (!k8s::IsNotFound(claim.status())) {
        LOG_INFO(2, "cannot check a checkpointed claim; keeping it",
                 {{"claim", fmt::format("{}/{}", entry.ns, entry.name)}, {"err", claim.status()}});
        continue;
      }
      reason = "deleted";
    } else if (StringAt((*claim)["metadata"], "uid") != uid) {
      reason = "replaced by a claim with another UID";
    } else {
      continue;
    }
    LOG_INFO(0, "unpreparing a stale claim",
             {{"claim", fmt::format("{}/{} ({})", entry.ns, entry.name, uid)}, {"reason", reason}});
    if (Status s = UnprepareOne(uid); !s.ok()) {
      LOG_ERROR("stale claim clean-up failed", {{"claim", uid}, {"err", s}});
      continue;
    }
    ++unprepared;
  }
  return unprepared;
}

}  // namespace nvdra::kubeletplugin
