#include "computedomain/controller/controller.h"

#include <condition_variable>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "computedomain/clique_membership.h"
#include "computedomain/controller/daemon_pods.h"
#include "computedomain/controller/owned_objects.h"
#include "k8s/api_error.h"

namespace nvdra::computedomain::controller {

using common::OkStatus;
using common::Status;
using common::StatusOr;
using k8s::cache::ObjectPtr;

StatusOr<std::unique_ptr<Controller>> Controller::New(k8s::Client& client, ControllerOptions options) {
  if (options.image_name.empty() && !options.host_managed) {
    return common::InvalidArgumentError("--image-name (IMAGE_NAME) is required");
  }
  if (options.max_nodes_per_imex_domain <= 0) {
    return common::InvalidArgumentError("--max-nodes-per-imex-domain: must be positive");
  }
  if (options.channel_isolation && options.imex_channel_count < 2) {
    return common::InvalidArgumentError(
        "--imex-channel-count: channel isolation needs at least 2 (channel 0 is the shared one)");
  }
  if (options.workers <= 0) options.workers = 1;
  auto writer = ApiWriter::New(client, options);
  if (!writer.ok()) return writer.status();
  return std::unique_ptr<Controller>(new Controller(client, std::move(options), *std::move(writer)));
}

Controller::Controller(k8s::Client& client, ControllerOptions options, std::unique_ptr<ApiWriter> writer)
    : client_(client),
      options_(std::move(options)),
      writer_(std::move(writer)),
      caches_(ControllerCaches::Create(client_, options_)),
      renderer_(options_),
      channels_(options_.imex_channel_count),
      entries_(*writer_, *caches_, options_),
      status_(*writer_, *caches_, options_,
              [this](const std::string& key, std::chrono::milliseconds after) {
                queue_.AddAfter(WorkItem::Domain(key), after);
              }),
      labeler_(*writer_, *caches_),
      cleaner_(*writer_, *caches_, labeler_, options_) {}

Controller::~Controller() {
  queue_.ShutDown();
  caches_->Stop();
}

ControllerStats Controller::stats() const {
  common::MutexLock lock(lifecycle_mu_);
  ControllerStats stats = stats_;
  stats.writes = writer_->writes();
  return stats;
}

void Controller::EnqueueDomain(const ObjectPtr& object) {
  if (object) queue_.Add(WorkItem::Domain(k8s::Object(*object).Key()));
}

void Controller::EnqueueByLabel(const ObjectPtr& object, std::chrono::milliseconds domain_delay) {
  if (!object) return;
  const std::string uid = LabelOf(*object, kComputeDomainLabel);
  if (uid.empty()) return;
  const std::vector<ObjectPtr> domains = CachedDomainsWithUid(*caches_, uid);
  for (const ObjectPtr& cd : domains) {
    const std::string key = k8s::Object(*cd).Key();
    queue_.AddAfter(WorkItem::Domain(key), domain_delay);
    if (options_.WritesCliques()) queue_.AddAfter(WorkItem::Cliques(key), kCliqueBatchDelay);
  }
  if (domains.empty() && !IsDeleting(*object)) {
    // An object of a domain this cache does not (or no longer) know: looked
    // at again a little later, when a domain just created would be cached.
    queue_.AddAfter(WorkItem::GoneDomain(uid), kGoneDelay);
  }
}

void Controller::OnDomainDeleted(const ObjectPtr& object) {
  if (object) {
    const std::string uid = k8s::Object(*object).uid();
    status_.ObserveStatus(uid, "");
    {
      common::MutexLock lock(lifecycle_mu_);
      torn_down_.erase(uid);
    }
    // Normally the cascade left nothing. A domain that went without it (its
    // finalizer removed by someone else, or a write of ours that raced its
    // deletion) leaves objects behind: sweep them.
    queue_.Add(WorkItem::GoneDomain(uid));
  }
  EnqueueDomain(object);
}

void Controller::AddEventHandlers() {
  caches_->domains->AddEventHandler({
      .on_add = [this](const ObjectPtr& o) { EnqueueDomain(o); },
      .on_update = [this](const ObjectPtr&, const ObjectPtr& o) { EnqueueDomain(o); },
      .on_delete = [this](const ObjectPtr& o) { OnDomainDeleted(o); },
      .needs_old_object = false,
  });
  const k8s::cache::EventHandler by_label{
      .on_add = [this](const ObjectPtr& o) { EnqueueByLabel(o); },
      .on_update = [this](const ObjectPtr&, const ObjectPtr& o) { EnqueueByLabel(o); },
      .on_delete = [this](const ObjectPtr& o) { EnqueueByLabel(o); },
      .needs_old_object = false,
  };
  for (auto* informer : caches_->OwnedObjectCaches()) informer->AddEventHandler(by_label);
  if (caches_->cliques) {
    // Our clique writes come back as these events; the domain's status
    // (status.nodes mirrors the cliques) follows a burst of them with one
    // write rather than one per clique write.
    const auto later = [this](const ObjectPtr& o) { EnqueueByLabel(o, kStatusBatchDelay); };
    caches_->cliques->AddEventHandler({.on_add = later,
                                       .on_update = [later](const ObjectPtr&, const ObjectPtr& o) { later(o); },
                                       .on_delete = later,
                                       .needs_old_object = false});
  }
  if (caches_->claims) {
    // A workload claim just allocated: label its node at once (NodeLabeler).
    // Only the transition counts, as an update event shows it: a claim seen
    // already allocated (a relist after a watch broke, a controller
    // restart) may belong to a pod that is going away, whose node the
    // kubelet plugin has already unlabelled; the plugin labels the node at
    // Prepare anyway.
    caches_->claims->AddEventHandler(
        {.on_add = nullptr,
         .on_update =
             [this](const ObjectPtr& old, const ObjectPtr& o) {
               if (old && o && !IsWorkloadClaimInUse(*old) && IsWorkloadClaimInUse(*o)) {
                 queue_.Add(WorkItem::AllocatedClaim(k8s::Object(*o).Key()));
               }
             },
         .on_delete = nullptr,
         .needs_old_object = true});
  }
  if (caches_->pods) {
    k8s::cache::EventHandler pods = by_label;
    pods.on_delete = [this](const ObjectPtr& o) {
      if (o) entries_.RecordDeparture(LabelOf(*o, kComputeDomainLabel), DaemonPodNode(*o), DaemonPodIp(*o));
      EnqueueByLabel(o);
    };
    caches_->pods->AddEventHandler(pods);
  }
}

Status Controller::StartCaches() {
  for (auto* informer : caches_->All()) informer->Start();
  const auto deadline = k8s::workqueue::RealClock().Now() + options_.sync_timeout;
  for (auto* informer : caches_->All()) {
    if (!informer->WaitForSyncUntil(deadline)) {
      return common::DeadlineExceededError(fmt::format(
          "{} did not sync within {}s: are the CRDs installed and the RBAC rules in place?",
          informer->options().description, options_.sync_timeout.count()));
    }
  }
  return OkStatus();
}

void Controller::LearnFromCaches(std::stop_token stop) {
  // Channels already handed out, so a restart never gives one away twice.
  for (const ObjectPtr& cached : caches_->domains->store().List()) {
    const k8s::ComputeDomain cd(*cached);
    if (auto channel = cd.imex_channel_id()) channels_.Record(cd.uid(), static_cast<int>(*channel));
  }
  if (options_.ManagesDaemons() && !options_.cliques_enabled) entries_.RecordStartupDepartures();
  if (Status status = cleaner_.CleanupStale(stop); !status.ok()) {
    // Not fatal: the objects stay until the next start; say so.
    LOG_WARNING("stale-object cleanup incomplete", {{"err", status}});
  }
}

void Controller::RunWorkers(std::stop_token stop) {
  std::stop_callback shutdown(stop, [this] { queue_.ShutDown(); });
  std::vector<std::jthread> workers;
  for (int i = 0; i < options_.workers; ++i) {
    workers.emplace_back([this, stop] { Work(stop); });
  }
  if (options_.cleanup_interval.count() > 0) {
    // Objects orphaned behind the cascade's back (finalizers removed by
    // hand, a domain force-deleted): as upstream, every 10 minutes.
    workers.emplace_back([this, stop] {
      std::mutex mutex;
      std::condition_variable_any wake;
      std::unique_lock lock(mutex);
      while (!wake.wait_for(lock, stop, options_.cleanup_interval, [] { return false; })) {
        if (stop.stop_requested()) break;
        if (Status status = cleaner_.CleanupStale(stop); !status.ok()) {
          LOG_WARNING("stale-object cleanup incomplete", {{"err", status}});
        }
      }
    });
  }
}

Status Controller::Run(std::stop_token stop) {
  AddEventHandlers();
  if (Status synced = StartCaches(); !synced.ok()) return stop.stop_requested() ? OkStatus() : synced;
  LearnFromCaches(stop);
  LOG_INFO(0, "controller started", {{"domains", caches_->domains->store().size()}, {"workers", options_.workers}});
  RunWorkers(stop);
  writer_->WaitEventsSent(std::chrono::seconds(2));
  return OkStatus();
}

void Controller::Work(std::stop_token stop) {
  while (std::optional<WorkItem> item = queue_.Get(stop)) {
    Status status = Process(*item, stop);
    {
      common::MutexLock lock(lifecycle_mu_);
      ++stats_.reconciles;
      if (!status.ok()) ++stats_.failures;
    }
    if (options_.metrics != nullptr) {
      options_.metrics
          ->AddCounter("nvdra_compute_domain_controller_reconciles_total", "ComputeDomain reconciles by result",
                       {"result"})
          .WithLabels({status.ok() ? "success" : "error"})
          .Inc();
    }
    if (status.ok()) {
      queue_.Forget(*item);
    } else if (!stop.stop_requested()) {
      // Conflicts and "still there" are expected while objects settle.
      const bool expected = k8s::IsConflict(status) || status.code() == common::StatusCode::kUnavailable;
      LOG_INFO(expected ? 2 : 0, "reconcile failed; retrying", {{"computeDomain", item->ToString()}, {"err", status}});
      queue_.AddRateLimited(*item);
      // Waiting on someone else's fix (an outdated CRD, a foreign object of
      // our name): look again at least every kOutsideFixRecheck, not after
      // a backoff grown to the queue's 1000 s cap (the earlier time wins).
      if (status.code() == common::StatusCode::kFailedPrecondition) queue_.AddAfter(*item, kOutsideFixRecheck);
    }
    queue_.Done(*item);
  }
}

Status Controller::Process(const WorkItem& item, std::stop_token stop) {
  switch (item.kind) {
    case WorkKind::kReconcileDomain:
      return ReconcileDomain(item.key, stop);
    case WorkKind::kSyncCliques: {
      ObjectPtr cd = caches_->domains->store().Get(item.key);
      // A domain going away: its cascade deletes the cliques.
      if (!cd || IsDeleting(*cd) || !options_.WritesCliques()) return OkStatus();
      return entries_.SyncCliques(k8s::ComputeDomain(*cd), stop);
    }
    case WorkKind::kSweepGoneDomain: {
      auto swept = cleaner_.CleanupDomain(item.key, stop);
      if (!swept.ok()) return swept.status();
      if (*swept == DomainCleaner::GoneDomainSweep::kSwept) ForgetDomain(item.key);
      return OkStatus();
    }
    case WorkKind::kLabelAllocatedNode:
      return labeler_.LabelAllocatedNode(item.key, stop);
  }
  return common::InternalError("unknown work kind");
}

Status Controller::ReconcileDomain(const std::string& key, std::stop_token stop) {
  ObjectPtr object = caches_->domains->store().Get(key);
  if (!object) return OkStatus();  // gone: Teardown ran before its finalizer went
  const k8s::ComputeDomain cd(*object);
  if (!cd.deletion_timestamp()) return ReconcileLive(cd, stop);
  if (!cd.HasFinalizer(kFinalizer)) return OkStatus();
  {
    // The cache may still show the finalizer we just removed.
    common::MutexLock lock(lifecycle_mu_);
    if (torn_down_.contains(cd.uid())) return OkStatus();
  }
  RETURN_IF_ERROR(cleaner_.Teardown(cd, stop));
  {
    common::MutexLock lock(lifecycle_mu_);
    torn_down_.insert(cd.uid());
  }
  ForgetDomain(cd.uid());
  return OkStatus();
}

void Controller::ForgetDomain(const std::string& uid) {
  channels_.Forget(uid);
  status_.Forget(uid);
  entries_.Forget(uid);
}

Status Controller::ReconcileLive(const k8s::ComputeDomain& cached, std::stop_token stop) {
  RETURN_IF_ERROR(EnsureFinalizer(cached, stop));
  k8s::ComputeDomain cd = cached;  // EnsureChannel puts its write's result here
  StatusOr<std::optional<int>> channel = EnsureChannel(cd, stop);
  if (!channel.ok()) return channel.status();
  if (options_.ManagesDaemons()) RETURN_IF_ERROR(EnsureDaemonObjects(cd, stop));
  StatusOr<nlohmann::json> workload = renderer_.WorkloadClaimTemplate(cd, *channel);
  if (!workload.ok()) return workload.status();
  RETURN_IF_ERROR(EnsureOwnedObject(*writer_, cd, k8s::resources::kResourceClaimTemplates,
                                    *caches_->claim_templates, *workload, stop));
  // With cliques their entries are a work item of their own (kSyncCliques).
  if (options_.ManagesDaemons() && !options_.cliques_enabled) {
    RETURN_IF_ERROR(entries_.PruneDeparted(cd, stop));
    RETURN_IF_ERROR(entries_.AssignStatusIndexes(cd, stop));
  }
  return status_.Update(cd, stop);
}

Status Controller::EnsureFinalizer(const k8s::ComputeDomain& cd, std::stop_token stop) {
  if (cd.HasFinalizer(kFinalizer)) return OkStatus();
  k8s::ComputeDomain with_finalizer = cd;
  with_finalizer.AddFinalizer(kFinalizer);
  // resourceVersion in a merge patch is a precondition: a stale cache is a
  // conflict, retried after the informer caught up.
  nlohmann::json patch = {
      {"metadata", {{"finalizers", with_finalizer.finalizers()}, {"resourceVersion", cd.resource_version()}}}};
  auto result = writer_->Patch(k8s::resources::kComputeDomains, cd.namespace_name(), cd.name(),
                               k8s::PatchType::kMerge, patch, "", stop);
  return result.ok() ? OkStatus() : result.status();
}

StatusOr<std::optional<int>> Controller::EnsureChannel(k8s::ComputeDomain& cd, std::stop_token stop) {
  if (!options_.channel_isolation) return std::optional<int>();
  std::optional<int> recorded;
  if (auto id = cd.imex_channel_id()) recorded = static_cast<int>(*id);
  std::set<int> recorded_elsewhere;
  if (!recorded) {
    for (const ObjectPtr& other : caches_->domains->store().List()) {
      if (auto id = k8s::ComputeDomain(*other).imex_channel_id()) recorded_elsewhere.insert(static_cast<int>(*id));
    }
  }
  std::optional<ChannelReservation> reserved = channels_.Reserve(cd.uid(), recorded, recorded_elsewhere);
  if (!reserved) {
    writer_->Emit(cd, k8s::EventType::kWarning, "NoFreeChannel",
                  fmt::format("all {} IMEX channels are taken by other ComputeDomains (--imex-channel-count); "
                              "the workload claim template waits for one to be freed",
                              options_.imex_channel_count - 1));
    return common::ResourceExhaustedError("no free IMEX channel");
  }
  if (!reserved->needs_write) return std::optional<int>(reserved->channel);
  nlohmann::json patch = {{"status", {{"imexChannelID", reserved->channel}}}};
  // A new domain that waits for daemons gets its first status in the same
  // write: one request less per domain (DomainStatusUpdater then finds it).
  if (cd.status_as_written().empty() && options_.ManagesDaemons() && cd.num_nodes() > 0) {
    patch["status"]["status"] = "NotReady";
  }
  auto result = writer_->Patch(k8s::resources::kComputeDomains, cd.namespace_name(), cd.name(),
                               k8s::PatchType::kMerge, patch, "status", stop);
  if (!result.ok()) return result.status();
  if (!k8s::ComputeDomain(*result).imex_channel_id()) {
    // The write was accepted but the field is gone: the cluster's CRD is
    // older than ours and prunes it (the Go driver's chart's CRD; Helm never
    // upgrades crds/). Retrying alone would never end, and the workload's
    // claims would wait for a channel silently: say what to do.
    const std::string message = fmt::format(
        "the ComputeDomain CRD in this cluster dropped status.imexChannelID (channel {} was written): it predates "
        "this driver's schema, e.g. left by the Go driver's chart (Helm never upgrades crds/). Apply this chart's "
        "CRDs: kubectl apply --server-side --force-conflicts -f <chart>/crds/ (docs/install.md); retrying",
        reserved->channel);
    writer_->Emit(cd, k8s::EventType::kWarning, "OutdatedCRD", message);
    LOG_ERROR("outdated ComputeDomain CRD", {{"computeDomain", cd.Key()}, {"err", message}});
    return common::FailedPreconditionError(message);
  }
  writer_->Emit(cd, k8s::EventType::kNormal, "ChannelAssigned",
                fmt::format("IMEX channel {} assigned", reserved->channel));
  cd = k8s::ComputeDomain(*std::move(result));
  return std::optional<int>(reserved->channel);
}

Status Controller::EnsureDaemonObjects(const k8s::ComputeDomain& cd, std::stop_token stop) {
  if (std::vector<ObjectPtr> elsewhere = CachedDaemonSetsElsewhere(*caches_, cd.uid()); !elsewhere.empty()) {
    // Upstream's migration path: an earlier installation's DaemonSet of
    // this domain in an additional namespace runs its daemons; a second one
    // here would put two daemons of the domain on each node.
    LOG_INFO(2, "the domain's DaemonSet is in an additional namespace; not creating one",
             {{"computeDomain", cd.Key()}, {"daemonSet", k8s::Object(*elsewhere.front()).Key()}});
    return OkStatus();
  }
  StatusOr<nlohmann::json> daemon_claim = renderer_.DaemonClaimTemplate(cd.uid());
  if (!daemon_claim.ok()) return daemon_claim.status();
  RETURN_IF_ERROR(EnsureOwnedObject(*writer_, cd, k8s::resources::kResourceClaimTemplates,
                                    *caches_->claim_templates, *daemon_claim, stop));
  StatusOr<nlohmann::json> daemon_set = renderer_.DaemonSet(cd.uid());
  if (!daemon_set.ok()) return daemon_set.status();
  return EnsureOwnedObject(*writer_, cd, k8s::resources::kDaemonSets, *caches_->daemon_sets, *daemon_set, stop);
}

}  // namespace nvdra::computedomain::controller
