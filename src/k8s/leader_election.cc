#include "k8s/leader_election.h"

#include <thread>
#include <utility>

#include "common/log.h"

namespace nvdra::k8s {

using nlohmann::json;

LeaseRecord LeaseRecord::FromLease(const json& lease) {
  LeaseRecord record;
  const auto spec = lease.find("spec");
  if (spec == lease.end() || !spec->is_object()) return record;
  record.holder_identity = spec->value("holderIdentity", "");
  record.lease_duration_seconds = spec->value("leaseDurationSeconds", 0);
  record.acquire_time = spec->value("acquireTime", "");
  record.renew_time = spec->value("renewTime", "");
  record.lease_transitions = spec->value("leaseTransitions", 0);
  return record;
}

void LeaseRecord::ToLease(json& lease) const {
  json& spec = lease["spec"];
  spec["holderIdentity"] = holder_identity;  // "" on release, as client-go writes it
  spec["leaseDurationSeconds"] = lease_duration_seconds;
  spec["leaseTransitions"] = lease_transitions;
  // An empty MicroTime is not valid on the wire: leave the field out.
  for (const auto& [key, value] : {std::pair{"acquireTime", &acquire_time}, std::pair{"renewTime", &renew_time}}) {
    if (value->empty()) {
      spec.erase(key);
    } else {
      spec[key] = *value;
    }
  }
}

LeaseAction DecideLease(const LeaseRecord& observed, workqueue::TimePoint observed_at, workqueue::TimePoint now,
                        std::string_view identity) {
  if (observed.holder_identity.empty()) return LeaseAction::kAcquire;
  if (observed.holder_identity == identity) return LeaseAction::kRenew;
  // The holder's own duration, counted on our clock from when we saw the
  // record change: clock offsets between nodes do not matter.
  if (now >= observed_at + std::chrono::seconds(observed.lease_duration_seconds)) return LeaseAction::kAcquire;
  return LeaseAction::kWait;
}

common::StatusOr<std::unique_ptr<LeaderElector>> LeaderElector::New(Client* client, LeaderElectionConfig config) {
  if (client == nullptr) return common::InvalidArgumentError("leader election: no client");
  if (config.lease_name.empty() || config.lease_namespace.empty()) {
    return common::InvalidArgumentError("leader election: the lease name and namespace must not be empty");
  }
  if (config.identity.empty()) return common::InvalidArgumentError("leader election: the identity must not be empty");
  if (!config.on_started_leading) {
    return common::InvalidArgumentError("leader election: on_started_leading is required");
  }
  if (!(config.retry_period.count() > 0 && config.renew_deadline > config.retry_period &&
        config.lease_duration > config.renew_deadline)) {
    return common::InvalidArgumentError(
        "leader election: durations must satisfy lease duration > renew deadline > retry period > 0");
  }
  if (config.lease_duration < std::chrono::seconds(1)) {
    return common::InvalidArgumentError("leader election: the lease duration is at least 1s (whole seconds on the wire)");
  }
  if (config.clock == nullptr || !config.wall_clock) {
    return common::InvalidArgumentError("leader election: clock and wall_clock are required");
  }
  return std::unique_ptr<LeaderElector>(new LeaderElector(client, std::move(config)));
}

LeaderElector::LeaderElector(Client* client, LeaderElectionConfig config)
    : client_(client), config_(std::move(config)) {}

LeaderElector::~LeaderElector() = default;

std::string LeaderElector::Leader() const {
  common::MutexLock lock(mutex_);
  return leader_;
}

common::Status LeaderElector::Run(std::stop_token stop) {
  workqueue::Clock& clock = *config_.clock;
  LOG_INFO(2, "leader election: trying to acquire the lease",
           {{"lease", config_.lease_namespace + "/" + config_.lease_name}, {"identity", config_.identity}});
  while (!TryAcquireOrRenew(stop)) {
    if (!workqueue::SleepUntil(clock, clock.Now() + config_.retry_period, stop)) return common::OkStatus();
  }
  LOG_INFO(2, "leader election: acquired the lease",
           {{"lease", config_.lease_namespace + "/" + config_.lease_name}, {"identity", config_.identity}});
  leading_ = true;

  common::Status result = common::OkStatus();
  {
    // Its stop token is the leading work's: requested when leadership ends.
    std::jthread work([this](std::stop_token work_stop) { config_.on_started_leading(work_stop); });
    workqueue::TimePoint last_renewal = clock.Now();
    while (workqueue::SleepUntil(clock, clock.Now() + config_.retry_period, stop)) {
      if (TryAcquireOrRenew(stop)) {
        last_renewal = clock.Now();
        continue;
      }
      if (stop.stop_requested()) break;
      if (clock.Now() - last_renewal >= config_.renew_deadline) {
        result = common::AbortedError("leader election: lost the lease " + config_.lease_namespace + "/" +
                                      config_.lease_name + " (no renewal within the renew deadline)");
        break;
      }
    }
    leading_ = false;
    work.request_stop();
    // Joined here, before on_stopped_leading and the release: nothing of the
    // leading work may still run once another replica can lead.
  }
  if (result.ok()) {
    LOG_INFO(2, "leader election: stopping", {{"identity", config_.identity}});
  } else {
    LOG_ERROR("leader election: leadership lost", {{"identity", config_.identity}, {"err", result}});
  }
  if (config_.on_stopped_leading) config_.on_stopped_leading();
  if (result.ok() && config_.release_on_cancel) Release();
  return result;
}

void LeaderElector::Observe(const json& lease, const LeaseRecord& record) {
  observed_lease_ = lease;
  observed_record_ = record;
  if (record.holder_identity.empty()) return;
  {
    common::MutexLock lock(mutex_);
    if (leader_ == record.holder_identity) return;
    leader_ = record.holder_identity;
  }
  LOG_INFO(2, "leader election: new leader", {{"leader", record.holder_identity}});
  if (config_.on_new_leader) config_.on_new_leader(record.holder_identity);
}

bool LeaderElector::TryAcquireOrRenew(std::stop_token stop) {
  const int lease_seconds =
      static_cast<int>(std::chrono::duration_cast<std::chrono::seconds>(config_.lease_duration).count());
  WriteOptions write;
  write.field_manager = config_.field_manager;

  auto got = client_->Get(resources::kLeases, config_.lease_namespace, config_.lease_name, {}, stop);
  const workqueue::TimePoint now = config_.clock->Now();
  const std::string wall_now = FormatMicroTime(config_.wall_clock());
  if (!got.ok()) {
    if (!IsNotFound(got.status())) {
      if (!stop.stop_requested()) LOG_WARNING("leader election: reading the lease failed", {{"err", got.status()}});
      return false;
    }
    const LeaseRecord record{config_.identity, lease_seconds, wall_now, wall_now, 0};
    json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", config_.lease_name}, {"namespace", config_.lease_namespace}}}};
    record.ToLease(lease);
    auto created = client_->Create(resources::kLeases, config_.lease_namespace, lease, write, stop);
    if (!created.ok()) {
      // AlreadyExists: another replica created it first; we read it next time.
      LOG_INFO(4, "leader election: creating the lease failed", {{"err", created.status()}});
      return false;
    }
    observed_at_ = now;
    Observe(*created, record);
    return true;
  }

  const LeaseRecord record = LeaseRecord::FromLease(*got);
  if (!observed_lease_ || record != observed_record_) observed_at_ = now;
  Observe(*got, record);

  LeaseRecord next;
  switch (DecideLease(record, observed_at_, now, config_.identity)) {
    case LeaseAction::kWait:
      return false;
    case LeaseAction::kRenew:
      next = record;  // keeps acquireTime and leaseTransitions
      next.renew_time = wall_now;
      next.lease_duration_seconds = lease_seconds;
      break;
    case LeaseAction::kAcquire:
      next = LeaseRecord{config_.identity, lease_seconds, wall_now, wall_now, record.lease_transitions + 1};
      break;
  }
  json updated = *got;  // carries the resourceVersion of the GET: a race is a 409
  next.ToLease(updated);
  auto put = client_->Update(resources::kLeases, config_.lease_namespace, updated, write, stop);
  if (!put.ok()) {
    if (IsConflict(put.status())) {
      LOG_INFO(4, "leader election: lost a race for the lease", {{"err", put.status()}});
    } else if (!stop.stop_requested()) {
      LOG_WARNING("leader election: writing the lease failed", {{"err", put.status()}});
    }
    return false;
  }
  observed_at_ = now;
  Observe(*put, next);
  return true;
}

void LeaderElector::Release() {
  if (!observed_lease_ || observed_record_.holder_identity != config_.identity) return;
  const std::string wall_now = FormatMicroTime(config_.wall_clock());
  LeaseRecord released = observed_record_;
  released.holder_identity.clear();
  released.lease_duration_seconds = 1;
  released.acquire_time = wall_now;
  released.renew_time = wall_now;
  json updated = *observed_lease_;  // our last write: its resourceVersion guards the release
  released.ToLease(updated);
  WriteOptions write;
  write.field_manager = config_.field_manager;
  // No stop token: the caller's is already requested, and the release is the
  // point of stopping. The client's request timeout bounds it.
  auto put = client_->Update(resources::kLeases, config_.lease_namespace, updated, write);
  if (!put.ok()) {
    LOG_WARNING("leader election: releasing the lease failed", {{"err", put.status()}});
    return;
  }
  observed_lease_ = *put;
  observed_record_ = released;
  LOG_INFO(2, "leader election: released the lease", {{"identity", config_.identity}});
}

}  // namespace nvdra::k8s
