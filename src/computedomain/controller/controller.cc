#include "computedomain/controller/controller.h"

#include <algorithm>
#include <condition_variable>
#include <ranges>
#include <set>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "common/crash_point.h"
#include "common/log.h"
#include "computedomain/clique_membership.h"
#include "computedomain/controller/indexes.h"
#include "k8s/api_error.h"
#include "k8s/cache/store.h"
#include "k8s/rest_list_watch.h"

namespace nvdra::computedomain::controller {

using common::OkStatus;
using common::Status;
using common::StatusOr;
using k8s::cache::ObjectPtr;
using nlohmann::json;

namespace {

constexpr char kUidIndex[] = "uid";
constexpr char kApiVersion[] = "resource.nvidia.com/v1beta1";

std::string Str(const json& object, const json::json_pointer& pointer) {
  if (!object.contains(pointer)) return "";
  const json& value = object.at(pointer);
  return value.is_string() ? value.get<std::string>() : "";
}
std::string Uid(const json& o) { return Str(o, "/metadata/uid"_json_pointer); }
std::string Name(const json& o) { return Str(o, "/metadata/name"_json_pointer); }
std::string Namespace(const json& o) { return Str(o, "/metadata/namespace"_json_pointer); }
std::string Key(const json& o) { return Namespace(o) + "/" + Name(o); }
bool Deleting(const json& o) { return o.contains("/metadata/deletionTimestamp"_json_pointer); }
// metadata.<map>[key] ("labels" or "annotations"); "" when absent.
std::string MetadataValue(const json& o, const char* map_name, std::string_view key) {
  auto metadata = o.find("metadata");
  if (metadata == o.end() || !metadata->contains(map_name)) return "";
  const json& map = (*metadata)[map_name];
  auto it = map.find(std::string(key));
  return it != map.end() && it->is_string() ? it->get<std::string>() : "";
}
std::string Label(const json& o, std::string_view key) { return MetadataValue(o, "labels", key); }
// A daemon pod's status as its daemon published it (NotReady until it says Ready).
std::string DaemonStatusOf(const json& pod) {
  return MetadataValue(pod, "annotations", kDaemonStatusAnnotation) == kDaemonReady ? std::string(kDaemonReady)
                                                                                    : std::string(kDaemonNotReady);
}
// A daemon pod's IP: the kubelet's status.podIP, or until the kubelet
// reports it, the one its daemon published (kDaemonIpAnnotation).
std::string DaemonIpOf(const json& pod) {
  std::string ip = Str(pod, "/status/podIP"_json_pointer);
  return ip.empty() ? MetadataValue(pod, "annotations", kDaemonIpAnnotation) : ip;
}
// A claim some pod is reserved to use (status.reservedFor, which the
// scheduler writes with the allocation and the resource-claim controller
// empties once its pods are gone).
bool HasConsumers(const json& claim) {
  const json::json_pointer reserved_at("/status/reservedFor");
  return claim.contains(reserved_at) && claim.at(reserved_at).is_array() && !claim.at(reserved_at).empty();
}

bool HasLabel(const json& o, std::string_view key) {
  return o.contains("/metadata/labels"_json_pointer) && o["metadata"]["labels"].contains(std::string(key));
}
std::vector<std::string> Finalizers(const json& o) {
  std::vector<std::string> out;
  if (!o.contains("/metadata/finalizers"_json_pointer)) return out;
  for (const json& f : o["metadata"]["finalizers"]) {
    if (f.is_string()) out.push_back(f.get<std::string>());
  }
  return out;
}
bool HasFinalizer(const json& o) {
  const auto f = Finalizers(o);
  return std::find(f.begin(), f.end(), kFinalizer) != f.end();
}
std::string WorkloadClaimName(const json& cd) {
  return Str(cd, "/spec/channel/resourceClaimTemplate/name"_json_pointer);
}
std::int64_t NumNodes(const json& cd) {
  auto p = "/spec/numNodes"_json_pointer;
  return cd.contains(p) && cd.at(p).is_number_integer() ? cd.at(p).get<std::int64_t>() : 0;
}
std::optional<int> ChannelOf(const json& cd) {
  auto p = "/status/imexChannelID"_json_pointer;
  if (!cd.contains(p) || !cd.at(p).is_number_integer()) return std::nullopt;
  return cd.at(p).get<int>();
}

bool IsZero(const json& value) {
  return value.is_null() || (value.is_number() && value == 0) || (value.is_boolean() && !value.get<bool>()) ||
         (value.is_string() && value.get<std::string>().empty()) || (value.is_structured() && value.empty());
}

// Whether every field of `want` is in `have` with the same value (arrays
// element by element, same length). Server defaults (fields we never set)
// do not count as a difference, so an unchanged object is never rewritten.
bool IsSubset(const json& want, const json& have) {
  if (want.is_object()) {
    if (!have.is_object()) return false;
    for (const auto& [key, value] : want.items()) {
      auto it = have.find(key);
      if (it == have.end()) {
        if (IsZero(value)) continue;  // the API server omits zero values
        return false;
      }
      if (!IsSubset(value, *it)) return false;
    }
    return true;
  }
  if (want.is_array()) {
    if (!have.is_array() || have.size() != want.size()) return false;
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (!IsSubset(want[i], have[i])) return false;
    }
    return true;
  }
  return want == have;
}

bool PodReady(const json& pod) {
  if (!pod.contains("/status/conditions"_json_pointer)) return false;
  for (const json& c : pod["status"]["conditions"]) {
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  }
  return false;
}

// The cached objects labelled for domain `uid`.
std::vector<ObjectPtr> ByLabelPtrs(const k8s::cache::Informer& informer, std::string_view uid) {
  auto objects = informer.store().ByIndex(k8s::cache::kLabelIndex,
                                          k8s::cache::LabelIndexValue(kComputeDomainLabel, uid));
  return objects.ok() ? *std::move(objects) : std::vector<ObjectPtr>{};
}

// The same, iterated as `const json&`: the cache's shared objects, not
// copies (a reconcile reads every daemon pod of its domain; copying them
// was most of the controller's CPU time at 18 nodes).
auto ByLabel(const k8s::cache::Informer& informer, std::string_view uid) {
  return std::views::transform(ByLabelPtrs(informer, uid), [](const ObjectPtr& o) -> const json& { return *o; });
}

// The claim templates a DaemonSet's pods are made from: an earlier
// installation's DaemonSet in an additional namespace may name its daemon
// claim template otherwise than ours.
std::vector<std::string> ClaimTemplatesOf(const json& daemon_set) {
  std::vector<std::string> names;
  const json::json_pointer claims("/spec/template/spec/resourceClaims");
  if (!daemon_set.contains(claims) || !daemon_set.at(claims).is_array()) return names;
  for (const json& claim : daemon_set.at(claims)) {
    if (std::string name = claim.value("resourceClaimTemplateName", ""); !name.empty()) names.push_back(name);
  }
  return names;
}

std::vector<k8s::cache::Indexer> IndexersWithUid() {
  auto indexers = k8s::cache::DefaultIndexers();
  indexers.push_back({kUidIndex, [](const json& o) {
                        std::string uid = Uid(o);
                        return uid.empty() ? std::vector<std::string>{} : std::vector<std::string>{uid};
                      }});
  return indexers;
}

// The ResourceRef of a kind we own, for messages and writes.
const k8s::ResourceRef& Rct() { return k8s::resources::kResourceClaimTemplates; }
const k8s::ResourceRef& Ds() { return k8s::resources::kDaemonSets; }

// Write options under the controller's field manager.
k8s::PatchOptions PatchOptions(std::string subresource = "") {
  k8s::PatchOptions options;
  options.field_manager = std::string(kFieldManager);
  options.subresource = std::move(subresource);
  return options;
}
// Server-side apply of the fields only this controller writes (indexes);
// forced, so indexes an older writer left behind are adopted, not a conflict.
k8s::PatchOptions ApplyOptions(std::string subresource = "") {
  k8s::PatchOptions options = PatchOptions(std::move(subresource));
  options.force = true;
  return options;
}
k8s::WriteOptions WriteOptions() {
  k8s::WriteOptions options;
  options.field_manager = std::string(kFieldManager);
  return options;
}

}  // namespace

std::string DaemonObjectName(std::string_view cd_uid) { return fmt::format("computedomain-daemon-{}", cd_uid); }

struct Controller::Informers {
  std::unique_ptr<k8s::cache::Informer> domains;
  std::unique_ptr<k8s::cache::Informer> cliques;
  std::unique_ptr<k8s::cache::Informer> pods;
  std::unique_ptr<k8s::cache::Informer> daemon_sets;
  // DaemonSets in --additional-namespaces (an earlier installation's).
  std::vector<std::unique_ptr<k8s::cache::Informer>> other_daemon_sets;
  std::unique_ptr<k8s::cache::Informer> claim_templates;
  // Workload claims made from domains' templates (by label), and the nodes
  // labelled for a domain: early node labelling.
  std::unique_ptr<k8s::cache::Informer> claims;
  std::unique_ptr<k8s::cache::Informer> labelled_nodes;

  std::vector<k8s::cache::Informer*> All() const {
    std::vector<k8s::cache::Informer*> out;
    for (auto* p : {&domains, &cliques, &pods, &daemon_sets, &claim_templates, &claims, &labelled_nodes}) {
      if (*p) out.push_back(p->get());
    }
    for (const auto& p : other_daemon_sets) out.push_back(p.get());
    return out;
  }
  ~Informers() {
    for (auto* informer : All()) informer->Stop();
  }
};

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
  std::unique_ptr<Controller> controller(new Controller(client, std::move(options)));
  k8s::EventRecorderOptions recorder_options;
  recorder_options.reporting_controller = std::string(kReportingController);
  recorder_options.reporting_instance =
      controller->options_.instance.empty() ? "compute-domain-controller" : controller->options_.instance;
  auto recorder = k8s::EventRecorder::New(&client, recorder_options);
  if (!recorder.ok()) return recorder.status();
  controller->recorder_ = std::move(*recorder);
  return controller;
}

Controller::Controller(k8s::Client& client, ControllerOptions options)
    : client_(client), options_(std::move(options)) {}

Controller::~Controller() {
  queue_.ShutDown();
  informers_.reset();
}

ControllerStats Controller::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void Controller::CountWrite() {
  {
    std::lock_guard lock(mu_);
    ++stats_.writes;
  }
  if (options_.metrics != nullptr) {
    options_.metrics
        ->AddCounter("nvdra_compute_domain_controller_api_writes_total",
                     "API writes (create, update, patch, apply, delete) made by the reconciler", {})
        .WithLabels({})
        .Inc();
  }
}

void Controller::ObserveStatus(const std::string& uid, const std::string& status) {
  if (options_.metrics == nullptr) return;
  common::GaugeFamily info = options_.metrics->AddGauge(
      "nvidia_dra_compute_domain_info",
      "Current number of ComputeDomain custom resources in the cluster as seen by compute-domain-controller, "
      "partitioned by compute domain status.",
      {"status"});
  std::lock_guard lock(mu_);
  auto it = observed_status_.find(uid);
  if (it != observed_status_.end()) {
    if (it->second == status) return;
    info.WithLabels({it->second}).Dec();
    observed_status_.erase(it);
  }
  if (status.empty()) return;
  info.WithLabels({status}).Inc();
  observed_status_[uid] = status;
}

void Controller::EnqueueDomainKey(const ObjectPtr& object) {
  if (object) queue_.Add(Key(*object));
}

void Controller::EnqueueByLabel(const ObjectPtr& object, std::chrono::milliseconds domain_delay) {
  if (!object || !informers_) return;
  const std::string uid = Label(*object, kComputeDomainLabel);
  if (uid.empty()) return;
  auto domains = informers_->domains->store().ByIndex(kUidIndex, uid);
  if (!domains.ok()) return;
  for (const ObjectPtr& cd : *domains) {
    queue_.AddAfter(Key(*cd), domain_delay);
    // A short hold gathers a burst of daemon changes into one clique write.
    if (options_.cliques_enabled && !options_.host_managed) {
      queue_.AddAfter(std::string(kCliquesPrefix) + Key(*cd), kCliqueBatchDelay);
    }
  }
  if (domains->empty() && !Deleting(*object)) {
    // An object of a domain this cache does not (or no longer) know: looked
    // at again a little later, when a domain just created would be cached.
    queue_.AddAfter(std::string(kGonePrefix) + uid, kGoneDelay);
  }
}

Status Controller::Run(std::stop_token stop) {
  informers_ = std::make_unique<Informers>();
  auto make = [&](const k8s::ResourceRef& ref, const std::string& ns, const std::string& selector,
                  std::vector<k8s::cache::Indexer> indexers) {
    k8s::cache::InformerOptions o;
    o.description = ref.Name() + (ns.empty() ? "" : " in " + ns);
    o.label_selector = selector;
    o.indexers = std::move(indexers);
    return std::make_unique<k8s::cache::Informer>(std::make_unique<k8s::RestListWatch>(client_, ref, ns), o);
  };
  const std::string label(kComputeDomainLabel);
  informers_->domains = make(k8s::resources::kComputeDomains, "", "", IndexersWithUid());
  if (!options_.host_managed) {
    if (options_.cliques_enabled) {
      informers_->cliques = make(k8s::resources::kComputeDomainCliques, options_.driver_namespace, "",
                                 k8s::cache::DefaultIndexers());
    }
    informers_->pods = make(k8s::resources::kPods, options_.driver_namespace, label, k8s::cache::DefaultIndexers());
    informers_->daemon_sets = make(Ds(), options_.driver_namespace, label, k8s::cache::DefaultIndexers());
    std::set<std::string> others(options_.additional_namespaces.begin(), options_.additional_namespaces.end());
    others.erase(options_.driver_namespace);
    for (const std::string& ns : others) {
      informers_->other_daemon_sets.push_back(make(Ds(), ns, label, k8s::cache::DefaultIndexers()));
    }
    informers_->claims = make(k8s::resources::kResourceClaims, "", label, k8s::cache::DefaultIndexers());
    informers_->labelled_nodes = make(k8s::resources::kNodes, "", label, k8s::cache::DefaultIndexers());
  }
  informers_->claim_templates = make(Rct(), "", label, k8s::cache::DefaultIndexers());

  informers_->domains->AddEventHandler({
      .on_add = [this](const ObjectPtr& o) { EnqueueDomainKey(o); },
      .on_update = [this](const ObjectPtr&, const ObjectPtr& o) { EnqueueDomainKey(o); },
      .on_delete =
          [this](const ObjectPtr& o) {
            if (o) {
              ObserveStatus(Uid(*o), "");
              {
                std::lock_guard lock(mu_);
                torn_down_.erase(Uid(*o));
              }
              // Normally the cascade left nothing. A domain that went without
              // it (its finalizer removed by someone else, or a write of ours
              // that raced its deletion) leaves objects behind: sweep them.
              queue_.Add(std::string(kGonePrefix) + Uid(*o));
            }
            EnqueueDomainKey(o);
          },
      .needs_old_object = false,
  });
  const k8s::cache::EventHandler by_label{
      .on_add = [this](const ObjectPtr& o) { EnqueueByLabel(o); },
      .on_update = [this](const ObjectPtr&, const ObjectPtr& o) { EnqueueByLabel(o); },
      .on_delete = [this](const ObjectPtr& o) { EnqueueByLabel(o); },
      .needs_old_object = false,
  };
  for (auto* informer : informers_->All()) {
    if (informer != informers_->domains.get() && informer != informers_->pods.get() &&
        informer != informers_->claims.get() && informer != informers_->labelled_nodes.get() &&
        informer != informers_->cliques.get()) {
      informer->AddEventHandler(by_label);
    }
  }
  if (informers_->cliques) {
    // Our clique writes come back as these events; the domain's status
    // (status.nodes mirrors the cliques) follows a burst of them with one
    // write rather than one per clique write.
    const auto later = [this](const ObjectPtr& o) { EnqueueByLabel(o, kStatusBatchDelay); };
    informers_->cliques->AddEventHandler({.on_add = later,
                                          .on_update = [later](const ObjectPtr&, const ObjectPtr& o) { later(o); },
                                          .on_delete = later,
                                          .needs_old_object = false});
  }
  if (informers_->claims) {
    // A workload claim just allocated: label its node at once (see
    // LabelAllocatedNode). Only the transition counts, as an update event
    // shows it: a claim seen already allocated (a relist after a watch
    // broke, a controller restart) may belong to a pod that is going away,
    // whose node the kubelet plugin has already unlabelled; the plugin
    // labels the node at Prepare anyway.
    auto in_use = [](const json& o) {
      return o.contains("/status/allocation"_json_pointer) && HasConsumers(o) && !Deleting(o) &&
             Label(o, kTargetLabel) == "Workload";
    };
    informers_->claims->AddEventHandler(
        {.on_add = nullptr,
         .on_update =
             [this, in_use](const ObjectPtr& old, const ObjectPtr& o) {
               if (old && o && !in_use(*old) && in_use(*o)) queue_.Add(std::string(kAllocatedPrefix) + Key(*o));
             },
         .on_delete = nullptr,
         .needs_old_object = true});
  }
  if (informers_->pods) {
    k8s::cache::EventHandler pods = by_label;
    pods.on_delete = [this](const ObjectPtr& o) {
      if (o) {
        RecordDeparture(Label(*o, kComputeDomainLabel), Str(*o, "/spec/nodeName"_json_pointer),
                        DaemonIpOf(*o));
      }
      EnqueueByLabel(o);
    };
    informers_->pods->AddEventHandler(pods);
  }
  for (auto* informer : informers_->All()) informer->Start();
  const auto deadline = k8s::workqueue::RealClock().Now() + options_.sync_timeout;
  for (auto* informer : informers_->All()) {
    if (!informer->WaitForSyncUntil(deadline)) {
      if (stop.stop_requested()) return OkStatus();
      return common::DeadlineExceededError(fmt::format(
          "{} did not sync within {}s: are the CRDs installed and the RBAC rules in place?",
          informer->options().description, options_.sync_timeout.count()));
    }
  }
  // Channels already handed out, so a restart never gives one away twice.
  {
    std::lock_guard lock(mu_);
    for (const ObjectPtr& cd : informers_->domains->store().List()) {
      if (auto channel = ChannelOf(*cd)) channels_[Uid(*cd)] = *channel;
    }
  }
  if (!options_.host_managed && !options_.cliques_enabled) RecordStartupDepartures();
  if (Status status = CleanupStale(stop); !status.ok()) {
    // Not fatal: the objects stay until the next start; say so.
    LOG_WARNING("stale-object cleanup incomplete", {{"err", status}});
  }
  LOG_INFO(0, "controller started", {{"domains", informers_->domains->store().size()},
                                     {"workers", options_.workers}});

  std::stop_callback shutdown(stop, [this] { queue_.ShutDown(); });
  {
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
          if (Status status = CleanupStale(stop); !status.ok()) {
            LOG_WARNING("stale-object cleanup incomplete", {{"err", status}});
          }
        }
      });
    }
  }
  recorder_->WaitIdle(std::chrono::seconds(2));
  return OkStatus();
}

void Controller::Work(std::stop_token stop) {
  while (std::optional<std::string> key = queue_.Get(stop)) {
    Status status = Reconcile(*key, stop);
    {
      std::lock_guard lock(mu_);
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
      queue_.Forget(*key);
    } else if (!stop.stop_requested()) {
      // Conflicts and "still there" are expected while objects settle.
      const bool expected = k8s::IsConflict(status) || status.code() == common::StatusCode::kUnavailable;
      LOG_INFO(expected ? 2 : 0, "reconcile failed; retrying", {{"computeDomain", *key}, {"err", status}});
      queue_.AddRateLimited(*key);
    }
    queue_.Done(*key);
  }
}

Status Controller::Reconcile(const std::string& key, std::stop_token stop) {
  if (key.starts_with(kGonePrefix)) return CleanupDomain(key.substr(kGonePrefix.size()), stop);
  if (key.starts_with(kAllocatedPrefix)) return LabelAllocatedNode(key.substr(kAllocatedPrefix.size()), stop);
  if (key.starts_with(kCliquesPrefix)) {
    ObjectPtr cd = informers_->domains->store().Get(key.substr(kCliquesPrefix.size()));
    // A domain going away: its cascade deletes the cliques.
    if (!cd || Deleting(*cd) || !options_.cliques_enabled || options_.host_managed) return OkStatus();
    return SyncCliques(*cd, stop);
  }
  ObjectPtr object = informers_->domains->store().Get(key);
  if (!object) return OkStatus();  // gone: Teardown ran before its finalizer went
  const json& cd = *object;
  if (Deleting(cd)) {
    if (!HasFinalizer(cd)) return OkStatus();
    {
      // The cache may still show the finalizer we just removed.
      std::lock_guard lock(mu_);
      if (torn_down_.contains(Uid(cd))) return OkStatus();
    }
    return Teardown(cd, stop);
  }
  return ReconcileLive(cd, stop);
}

Status Controller::ReconcileLive(const json& cd, std::stop_token stop) {
  RETURN_IF_ERROR(EnsureFinalizer(cd, stop));
  StatusOr<std::optional<int>> channel = EnsureChannel(cd, stop);
  if (!channel.ok()) return channel.status();
  if (!options_.host_managed) {
    if (std::vector<json> elsewhere = DaemonSetsElsewhere(Uid(cd)); !elsewhere.empty()) {
      // Upstream's migration path: an earlier installation's DaemonSet of
      // this domain in an additional namespace runs its daemons; a second
      // one here would put two daemons of the domain on each node.
      LOG_INFO(2, "the domain's DaemonSet is in an additional namespace; not creating one",
               {{"computeDomain", Key(cd)}, {"daemonSet", Key(elsewhere.front())}});
    } else {
      StatusOr<json> daemon_claim = RenderDaemonClaim(cd);
      if (!daemon_claim.ok()) return daemon_claim.status();
      RETURN_IF_ERROR(EnsureObject(cd, Rct(), *informers_->claim_templates, *daemon_claim, stop));
      StatusOr<json> daemon_set = RenderDaemonSet(cd);
      if (!daemon_set.ok()) return daemon_set.status();
      RETURN_IF_ERROR(EnsureObject(cd, Ds(), *informers_->daemon_sets, *daemon_set, stop));
    }
  }
  StatusOr<json> workload = RenderWorkloadClaim(cd, *channel);
  if (!workload.ok()) return workload.status();
  RETURN_IF_ERROR(EnsureObject(cd, Rct(), *informers_->claim_templates, *workload, stop));
  if (!options_.host_managed) {
    // With cliques their entries are a work item of their own (kCliquesPrefix).
    if (!options_.cliques_enabled) {
      RETURN_IF_ERROR(PruneDeparted(cd, stop));
      RETURN_IF_ERROR(AssignStatusIndexes(cd, stop));
    }
  }
  return UpdateStatus(cd, stop);
}

Status Controller::EnsureFinalizer(const json& cd, std::stop_token stop) {
  if (HasFinalizer(cd)) return OkStatus();
  json finalizers = Finalizers(cd);
  finalizers.push_back(kFinalizer);
  // resourceVersion in a merge patch is a precondition: a stale cache is a
  // conflict, retried after the informer caught up.
  json patch = {{"metadata", {{"finalizers", finalizers}, {"resourceVersion", cd["metadata"]["resourceVersion"]}}}};
  CountWrite();
  auto result = client_.Patch(k8s::resources::kComputeDomains, Namespace(cd), Name(cd), k8s::PatchType::kMerge,
                              patch, PatchOptions(), stop);
  return result.ok() ? OkStatus() : result.status();
}

StatusOr<std::optional<int>> Controller::EnsureChannel(const json& cd, std::stop_token stop) {
  if (!options_.channel_isolation) return std::optional<int>();
  const std::string uid = Uid(cd);
  int channel = 0;
  {
    std::lock_guard lock(mu_);
    if (auto existing = ChannelOf(cd)) {
      channels_[uid] = *existing;
      return std::optional<int>(*existing);
    }
    auto it = channels_.find(uid);
    if (it != channels_.end()) {
      channel = it->second;
    } else {
      std::set<int> used;
      for (const auto& [other, id] : channels_) used.insert(id);
      for (const ObjectPtr& other : informers_->domains->store().List()) {
        if (auto id = ChannelOf(*other)) used.insert(*id);
      }
      std::optional<int> free = AssignChannel(used, options_.imex_channel_count);
      if (!free) {
        Emit(cd, k8s::EventType::kWarning, "NoFreeChannel",
             fmt::format("all {} IMEX channels are taken by other ComputeDomains (--imex-channel-count); "
                         "the workload claim template waits for one to be freed",
                         options_.imex_channel_count - 1));
        return common::ResourceExhaustedError("no free IMEX channel");
      }
      channel = *free;
      channels_[uid] = channel;  // reserved before the write, so no other domain takes it meanwhile
    }
  }
  json patch = {{"status", {{"imexChannelID", channel}}}};
  CountWrite();
  auto result = client_.Patch(k8s::resources::kComputeDomains, Namespace(cd), Name(cd), k8s::PatchType::kMerge,
                              patch, PatchOptions("status"), stop);
  if (!result.ok()) return result.status();
  Emit(cd, k8s::EventType::kNormal, "ChannelAssigned", fmt::format("IMEX channel {} assigned", channel));
  return std::optional<int>(channel);
}

StatusOr<json> Controller::RenderDaemonClaim(const json& cd) const {
  const std::string uid = Uid(cd);
  return RenderTemplate(kDaemonClaimTemplate, options_.templates.daemon_claim,
                        {{"NAMESPACE", options_.driver_namespace},
                         {"NAME", DaemonObjectName(uid)},
                         {"FINALIZER", std::string(kFinalizer)},
                         {"COMPUTE_DOMAIN_LABEL_KEY", std::string(kComputeDomainLabel)},
                         {"COMPUTE_DOMAIN_UID", uid},
                         {"TARGET_LABEL_KEY", std::string(kTargetLabel)}});
}

StatusOr<json> Controller::RenderDaemonSet(const json& cd) const {
  const std::string uid = Uid(cd);
  StatusOr<json> ds = RenderTemplate(kDaemonSetTemplate, options_.templates.daemon_set,
                                     {{"NAMESPACE", options_.driver_namespace},
                                      {"NAME", DaemonObjectName(uid)},
                                      {"FINALIZER", std::string(kFinalizer)},
                                      {"COMPUTE_DOMAIN_LABEL_KEY", std::string(kComputeDomainLabel)},
                                      {"COMPUTE_DOMAIN_UID", uid},
                                      {"IMAGE_NAME", options_.image_name},
                                      {"LOG_VERBOSITY", std::to_string(options_.log_verbosity_cd_daemon)},
                                      {"MAX_NODES_PER_IMEX_DOMAIN", std::to_string(options_.max_nodes_per_imex_domain)},
                                      {"RESOURCE_CLAIM_TEMPLATE_NAME", DaemonObjectName(uid)}});
  if (!ds.ok()) return ds;
  json& pod_spec = (*ds)["spec"]["template"]["spec"];
  if (!options_.image_pull_secret_names.empty()) {
    json secrets = json::array();
    for (const std::string& name : options_.image_pull_secret_names) secrets.push_back({{"name", name}});
    pod_spec["imagePullSecrets"] = secrets;
  }
  if (!options_.daemon_feature_gates.empty()) {
    for (json& container : pod_spec["containers"]) {
      container["env"].push_back({{"name", "FEATURE_GATES"}, {"value", options_.daemon_feature_gates}});
    }
  }
  return ds;
}

StatusOr<json> Controller::RenderWorkloadClaim(const json& cd, std::optional<int> channel) const {
  // hostManaged always asks for one channel, as upstream.
  std::string mode = Str(cd, "/spec/channel/allocationMode"_json_pointer);
  if (mode.empty() || options_.host_managed) mode = "Single";
  StatusOr<json> rct = RenderTemplate(kWorkloadClaimTemplate, options_.templates.workload_claim,
                                      {{"NAMESPACE", Namespace(cd)},
                                       {"NAME", WorkloadClaimName(cd)},
                                       {"FINALIZER", std::string(kFinalizer)},
                                       {"COMPUTE_DOMAIN_LABEL_KEY", std::string(kComputeDomainLabel)},
                                       {"COMPUTE_DOMAIN_UID", Uid(cd)},
                                       {"TARGET_LABEL_KEY", std::string(kTargetLabel)},
                                       {"ALLOCATION_MODE", mode}});
  if (!rct.ok() || !channel) return rct;
  // Channel isolation: only this domain's channel device matches.
  for (json& request : (*rct)["spec"]["spec"]["devices"]["requests"]) {
    request["exactly"]["selectors"] = json::array(
        {{{"cel",
           {{"expression", fmt::format("device.attributes[\"compute-domain.nvidia.com\"].id == {}", *channel)}}}}});
  }
  return rct;
}

Status Controller::EnsureObject(const json& cd, const k8s::ResourceRef& ref, const k8s::cache::Informer& cache,
                                const json& desired, std::stop_token stop) {
  const std::string ns = Namespace(desired);
  const std::string name = Name(desired);
  const std::string uid = Uid(cd);
  ObjectPtr existing = cache.store().Get(ns + "/" + name);
  if (!existing) {
    CountWrite();
    auto created = client_.Create(ref, ns, desired, WriteOptions(), stop);
    if (created.ok()) return OkStatus();  // the informer brings it
    if (!k8s::IsAlreadyExists(created.status())) return created.status();
    // Not in our label-selected cache: ours but not seen yet, or someone
    // else's object under the name this domain asks for.
    auto current = client_.Get(ref, ns, name, {}, stop);
    if (!current.ok()) return current.status();
    if (Label(*current, kComputeDomainLabel) == uid) return OkStatus();
    existing = std::make_shared<const json>(*std::move(current));
  }
  const json& have = *existing;
  if (Label(have, kComputeDomainLabel) != uid) {
    // Someone else's object under the name this domain asks for.
    Emit(cd, k8s::EventType::kWarning, "NameConflict",
         fmt::format("{} {}/{} exists and does not belong to this ComputeDomain; delete or rename it, or use "
                     "another spec.channel.resourceClaimTemplate.name",
                     ref.Name(), ns, name));
    return common::FailedPreconditionError(fmt::format("{} {}/{} belongs to someone else", ref.Name(), ns, name));
  }
  if (Deleting(have)) {
    // Deleted under a live domain: let it go, the next reconcile recreates it.
    return ReleaseOwned(ref, ns, name, stop);
  }
  if (IsSubset(desired["spec"], have["spec"]) && IsSubset(desired["metadata"]["labels"], have["metadata"]["labels"]) &&
      HasFinalizer(have)) {
    return OkStatus();
  }
  if (ref.resource == Rct().resource && !IsSubset(desired["spec"], have["spec"])) {
    // A claim template's spec is immutable: replace it (isolation mode
    // changed, or someone edited it). The delete event requeues the domain,
    // which then creates the new one.
    LOG_INFO(0, "replacing a claim template whose spec is not the wanted one",
             {{"object", ref.Name() + " " + ns + "/" + name}});
    RETURN_IF_ERROR(DeleteOwned(ref, ns, name, stop));
    return ReleaseOwned(ref, ns, name, stop);
  }
  json updated = have;
  updated["spec"] = desired["spec"];
  for (const auto& [k, v] : desired["metadata"]["labels"].items()) updated["metadata"]["labels"][k] = v;
  if (!HasFinalizer(updated)) updated["metadata"]["finalizers"].push_back(kFinalizer);
  CountWrite();
  auto result = client_.Update(ref, ns, updated, WriteOptions(), stop);
  if (result.ok()) {
    LOG_INFO(1, "updated to the wanted state", {{"object", ref.Name() + " " + ns + "/" + name}});
  }
  return result.ok() ? OkStatus() : result.status();
}

// Where a domain keeps its entries, for pruning and the start-up sweep.
struct EntryList {
  const k8s::ResourceRef* ref;
  json::json_pointer list;
  const char* key;
  std::string subresource;
};

void Controller::RecordDeparture(const std::string& uid, const std::string& node, const std::string& ip) {
  // With cliques, SyncCliques drops entries without a member pod itself.
  if (options_.cliques_enabled) return;
  if (uid.empty() || node.empty() || ip.empty()) return;
  std::lock_guard lock(mu_);
  departed_[uid][node] = ip;
}

void Controller::RecordStartupDepartures() {
  // Daemon pods deleted while no controller ran left entries whose node now
  // has no daemon pod of the domain. Both caches are synced and no worker
  // runs yet; a daemon that starts right now has its pod already (pods
  // exist before their daemons write), so it is not taken for departed.
  for (const ObjectPtr& cd : informers_->domains->store().List()) {
    const std::string uid = Uid(*cd);
    std::set<std::string> nodes_with_pod;
    for (const json& pod : ByLabel(*informers_->pods, uid)) {
      nodes_with_pod.insert(Str(pod, "/spec/nodeName"_json_pointer));
    }
    std::vector<CliqueMember> members;
    if (options_.cliques_enabled) {
      for (const json& clique : ByLabel(*informers_->cliques, uid)) {
        for (CliqueMember& m : CliqueMembers(clique)) members.push_back(std::move(m));
      }
    } else {
      members = CliqueMembers(*cd, MembershipStore::kComputeDomainStatus);
    }
    for (const CliqueMember& m : members) {
      if (!nodes_with_pod.contains(m.node_name)) RecordDeparture(uid, m.node_name, m.ip_address);
    }
  }
}

Status Controller::PruneDeparted(const json& cd, std::stop_token stop) {
  // A daemon removes its own entry when it stops; this covers daemons that
  // could not (node lost, SIGKILL, partition), as upstream's periodic prune
  // does, on the pod's delete event instead of a 2 s poll. Only an entry
  // that still carries the departed pod's IP goes: a successor pod on the
  // same node re-applies the entry with its own IP, and the patch's test
  // keeps it (never "no pod seen, so prune": the pod informer may lag
  // behind the clique informer by a few milliseconds).
  const std::string uid = Uid(cd);
  std::map<std::string, std::string> departed;
  {
    std::lock_guard lock(mu_);
    auto it = departed_.find(uid);
    if (it == departed_.end()) return OkStatus();
    departed = it->second;
  }
  std::set<std::string> still_listed;  // departures whose entry is still there
  auto prune = [&](const json& object, const EntryList& where) -> Status {
    if (!object.contains(where.list) || !object.at(where.list).is_array()) return OkStatus();
    const json& entries = object.at(where.list);
    json patch = json::array();
    std::vector<std::string> gone;
    for (std::size_t i = entries.size(); i-- > 0;) {
      const std::string node = entries[i].value(where.key, "");
      auto it = departed.find(node);
      if (it == departed.end()) continue;
      if (entries[i].value("ipAddress", "") != it->second) continue;  // a successor's entry
      still_listed.insert(node);
      // Test, then remove: a concurrent change fails the patch (re-read on retry).
      const std::string path = where.list.to_string() + "/" + std::to_string(i);
      patch.push_back({{"op", "test"}, {"path", path + "/" + where.key}, {"value", node}});
      patch.push_back({{"op", "test"}, {"path", path + "/ipAddress"}, {"value", it->second}});
      patch.push_back({{"op", "remove"}, {"path", path}});
      gone.push_back(node);
    }
    if (gone.empty()) return OkStatus();
    CountWrite();
    auto result = client_.Patch(*where.ref, Namespace(object), Name(object), k8s::PatchType::kJson, patch,
                                PatchOptions(where.subresource), stop);
    if (!result.ok()) return k8s::IsNotFound(result.status()) ? OkStatus() : result.status();
    for (const std::string& node : gone) still_listed.erase(node);
    LOG_INFO(0, "removed entries of daemons whose pod is gone",
             {{"object", Key(object)}, {"nodes", fmt::format("{}", fmt::join(gone, ","))}});
    return OkStatus();
  };
  Status first_error = OkStatus();
  if (!options_.cliques_enabled) {
    first_error = prune(cd, {&k8s::resources::kComputeDomains, "/status/nodes"_json_pointer, "name", "status"});
  } else {
    for (const json& clique : ByLabel(*informers_->cliques, uid)) {
      Status status = prune(clique, {&k8s::resources::kComputeDomainCliques, "/daemons"_json_pointer, "nodeName", ""});
      if (!status.ok() && first_error.ok()) first_error = status;
    }
  }
  if (first_error.ok()) {
    // Done with departures whose entry is gone (or never was there).
    std::lock_guard lock(mu_);
    auto it = departed_.find(uid);
    if (it != departed_.end()) {
      for (const auto& [node, ip] : departed) {
        auto entry = it->second.find(node);
        if (entry != it->second.end() && entry->second == ip && !still_listed.contains(node)) it->second.erase(entry);
      }
      if (it->second.empty()) departed_.erase(it);
    }
  }
  return first_error;
}

namespace {

// Numeric resourceVersion (an etcd revision in practice); 0 when it is not one.
std::uint64_t VersionNumber(const json& object) {
  const std::string text = Str(object, "/metadata/resourceVersion"_json_pointer);
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::stoull(text);
}

// A clique entry's fields the controller writes, in a fixed shape.
json EntryOf(const std::string& node, const std::string& ip, const std::string& clique_id, const std::string& status,
             std::optional<std::int64_t> index) {
  json entry = {{"nodeName", node}, {"ipAddress", ip}, {"cliqueID", clique_id}, {"status", status}};
  if (index) entry["index"] = *index;
  return entry;
}

}  // namespace

Status Controller::SyncCliques(const json& cd, std::stop_token stop) {
  const std::string uid = Uid(cd);
  // The daemons that are members: scheduled, not terminating, with an IP
  // and the clique label their daemon sets once it knows its clique. Joined
  // in pod creation order (then name), so indexes follow the join order.
  std::vector<ObjectPtr> pods = ByLabelPtrs(*informers_->pods, uid);
  std::sort(pods.begin(), pods.end(), [](const ObjectPtr& a, const ObjectPtr& b) {
    const auto ka = std::pair(Str(*a, "/metadata/creationTimestamp"_json_pointer), Name(*a));
    const auto kb = std::pair(Str(*b, "/metadata/creationTimestamp"_json_pointer), Name(*b));
    return ka < kb;
  });
  std::map<std::string, std::vector<const json*>> members_by_clique;
  for (const ObjectPtr& pod_ptr : pods) {
    const json& pod = *pod_ptr;
    // An empty clique ID: a node without a fabric, no clique (its daemon
    // runs no IMEX; UpdateStatus lists it with index -1).
    if (Deleting(pod) || Label(pod, kComputeDomainCliqueLabel).empty()) continue;
    if (Str(pod, "/spec/nodeName"_json_pointer).empty() || DaemonIpOf(pod).empty()) continue;
    members_by_clique[Label(pod, kComputeDomainCliqueLabel)].push_back(&pod);
  }
  std::map<std::string, json> cliques;  // clique ID -> the newest object we know
  for (const json& clique : ByLabel(*informers_->cliques, uid)) {
    const std::string name = Name(clique);
    const std::string prefix = uid + ".";
    if (!name.starts_with(prefix)) continue;
    json newest = clique;
    {
      // Our own last write may be newer than the cache (its watch event is
      // on its way): compute from it, so we neither conflict nor repeat.
      std::lock_guard lock(mu_);
      auto it = cliques_written_.find(Namespace(clique) + "/" + name);
      if (it != cliques_written_.end() && VersionNumber(it->second) > VersionNumber(clique)) newest = it->second;
    }
    cliques[name.substr(prefix.size())] = std::move(newest);
  }
  for (const auto& [clique_id, _] : members_by_clique) cliques.try_emplace(clique_id, json());

  Status first_error = OkStatus();
  for (auto& [clique_id, object] : cliques) {
    const std::vector<const json*>& members = members_by_clique[clique_id];
    std::map<std::string, const json*> pod_by_node;
    for (const json* pod : members) pod_by_node.try_emplace(Str(*pod, "/spec/nodeName"_json_pointer), pod);
    // Entries in list order: the listed nodes that still have a member pod
    // (their index kept, their IP and status from the pod), then newcomers.
    std::vector<CliqueMember> entries;
    std::set<std::string> listed;
    for (CliqueMember& m : CliqueMembers(object.is_null() ? json::object() : object)) {
      auto it = pod_by_node.find(m.node_name);
      if (it == pod_by_node.end() || !listed.insert(m.node_name).second) continue;
      m.ip_address = DaemonIpOf(*it->second);
      m.clique_id = clique_id;
      m.status = DaemonStatusOf(*it->second);
      entries.push_back(std::move(m));
    }
    for (const json* pod : members) {
      const std::string node = Str(*pod, "/spec/nodeName"_json_pointer);
      if (!listed.insert(node).second) continue;
      entries.push_back({.node_name = node,
                         .ip_address = DaemonIpOf(*pod),
                         .clique_id = clique_id,
                         .index = std::nullopt,
                         .status = DaemonStatusOf(*pod)});
    }
    const std::string name = uid + "." + clique_id;
    IndexAssignment assignment = AssignIndexes(entries, options_.max_nodes_per_imex_domain);
    for (const std::string& node : assignment.over_limit) {
      Emit(cd, k8s::EventType::kWarning, "CliqueFull",
           fmt::format("node {} cannot join clique {}: it already has {} daemons (--max-nodes-per-imex-domain); "
                       "its workload stays pending until one leaves",
                       node, name, options_.max_nodes_per_imex_domain));
    }
    json daemons = json::array();
    for (const CliqueMember& m : entries) {
      auto it = assignment.indexes.find(m.node_name);
      daemons.push_back(EntryOf(m.node_name, m.ip_address, m.clique_id, m.status,
                                it == assignment.indexes.end() ? std::nullopt : std::optional(it->second)));
    }

    // Owner references: every member pod's (the clique goes with its last
    // daemon, as when daemons wrote it); earlier ones are kept.
    json owners = object.is_null() ? json::array()
                                   : object.value("/metadata/ownerReferences"_json_pointer, json::array());
    std::set<std::string> owner_uids;
    for (const json& ref : owners) owner_uids.insert(ref.value("uid", ""));
    for (const json* pod : members) {
      if (owner_uids.insert(Uid(*pod)).second) {
        owners.push_back({{"apiVersion", "v1"}, {"kind", "Pod"}, {"name", Name(*pod)}, {"uid", Uid(*pod)}});
      }
    }

    json written;
    if (object.is_null()) {
      if (daemons.empty()) continue;
      json clique = {{"apiVersion", kApiVersion},
                     {"kind", "ComputeDomainClique"},
                     {"metadata",
                      {{"name", name},
                       {"namespace", options_.driver_namespace},
                       {"labels", {{std::string(kComputeDomainLabel), uid},
                                   {std::string(kComputeDomainCliqueLabel), clique_id}}},
                       {"ownerReferences", owners}}},
                     {"daemons", daemons}};
      CountWrite();
      auto result = client_.Create(k8s::resources::kComputeDomainCliques, options_.driver_namespace, clique,
                                   WriteOptions(), stop);
      if (!result.ok()) {
        if (first_error.ok()) first_error = result.status();
        continue;
      }
      written = std::move(*result);
    } else {
      const json have = object.value("daemons", json::array());
      const json have_owners = object.value("/metadata/ownerReferences"_json_pointer, json::array());
      if (have == daemons && have_owners == owners) continue;
      json updated = object;
      updated["daemons"] = daemons;
      updated["metadata"]["ownerReferences"] = owners;
      updated["metadata"].erase("managedFields");
      CountWrite();
      // With the resourceVersion we computed from: the controller is the
      // only writer, so a conflict means a stale cache (retried).
      auto result = client_.Update(k8s::resources::kComputeDomainCliques, Namespace(object), updated,
                                   WriteOptions(), stop);
      if (!result.ok()) {
        if (first_error.ok()) first_error = result.status();
        continue;
      }
      written = std::move(*result);
    }
    if (!assignment.assigned.empty()) {
      LOG_INFO(1, "indexes assigned",
               {{"clique", name}, {"nodes", fmt::format("{}", fmt::join(assignment.assigned, ","))}});
    }
    LOG_INFO(2, "clique entries written", {{"clique", name}, {"entries", daemons.size()},
                                           {"resourceVersion", Str(written, "/metadata/resourceVersion"_json_pointer)}});
    std::lock_guard lock(mu_);
    cliques_written_[options_.driver_namespace + "/" + name] = std::move(written);
  }
  return first_error;
}

Status Controller::AssignStatusIndexes(const json& cd, std::stop_token stop) {
  const std::vector<CliqueMember> members = CliqueMembers(cd, MembershipStore::kComputeDomainStatus);
  std::map<std::string, std::vector<CliqueMember>> by_clique;
  for (const CliqueMember& m : members) {
    if (!m.clique_id.empty()) by_clique[m.clique_id].push_back(m);
  }
  json entries = json::array();
  bool changed = false;
  for (const auto& [clique, group] : by_clique) {
    IndexAssignment assignment = AssignIndexes(group, options_.max_nodes_per_imex_domain);
    for (const std::string& node : assignment.over_limit) {
      Emit(cd, k8s::EventType::kWarning, "CliqueFull",
           fmt::format("node {} cannot join clique {}: it already has {} daemons (--max-nodes-per-imex-domain)",
                       node, clique, options_.max_nodes_per_imex_domain));
    }
    changed = changed || !assignment.assigned.empty();
    for (const auto& [node, index] : assignment.indexes) entries.push_back({{"name", node}, {"index", index}});
  }
  if (!changed) return OkStatus();
  json intent = {{"apiVersion", kApiVersion},
                 {"kind", "ComputeDomain"},
                 {"metadata", {{"name", Name(cd)}, {"namespace", Namespace(cd)}}},
                 {"status", {{"nodes", entries}}}};
  CountWrite();
  auto result = client_.Apply(k8s::resources::kComputeDomains, Namespace(cd), intent,
                              ApplyOptions("status"),
                              stop);
  return result.ok() ? OkStatus() : result.status();
}

Status Controller::UpdateStatus(const json& cd, std::stop_token stop) {
  const std::string uid = Uid(cd);
  json nodes = json::array();
  std::string status = "Ready";
  std::string why;
  if (!options_.host_managed) {
    if (options_.cliques_enabled) {
      for (const json& clique : ByLabel(*informers_->cliques, uid)) {
        for (const CliqueMember& m : CliqueMembers(clique)) {
          json node = {{"name", m.node_name}, {"ipAddress", m.ip_address}, {"cliqueID", m.clique_id},
                       {"status", m.status.empty() ? std::string(kDaemonNotReady) : m.status}};
          if (m.index) node["index"] = *m.index;
          nodes.push_back(std::move(node));
        }
      }
      // Daemons on nodes without a fabric have no clique: their pod says it.
      for (const json& pod : ByLabel(*informers_->pods, uid)) {
        if (!HasLabel(pod, kComputeDomainCliqueLabel) || !Label(pod, kComputeDomainCliqueLabel).empty()) continue;
        const std::string node = Str(pod, "/spec/nodeName"_json_pointer);
        if (node.empty() || Deleting(pod)) continue;
        nodes.push_back({{"name", node},
                         {"ipAddress", DaemonIpOf(pod)},
                         {"cliqueID", ""},
                         {"index", -1},
                         {"status", PodReady(pod) ? kDaemonReady : kDaemonNotReady}});
      }
      std::sort(nodes.begin(), nodes.end(),
                [](const json& a, const json& b) { return a["name"].get<std::string>() < b["name"].get<std::string>(); });
    } else if (cd.contains("/status/nodes"_json_pointer)) {
      nodes = cd["status"]["nodes"];  // written by the daemons themselves
    }
    std::vector<std::string> not_ready;
    for (const json& n : nodes) {
      if (n.value("status", std::string(kDaemonNotReady)) != kDaemonReady) not_ready.push_back(n.value("name", ""));
    }
    const std::int64_t want = NumNodes(cd);
    if (static_cast<std::int64_t>(nodes.size()) < want) {
      status = "NotReady";
      why = fmt::format("waiting for nodes: {} of {} (spec.numNodes) IMEX daemons joined", nodes.size(), want);
    } else if (!not_ready.empty()) {
      status = "NotReady";
      if (not_ready.size() > 8) not_ready.resize(8);
      why = fmt::format("IMEX daemons not ready on: {}", fmt::join(not_ready, ", "));
    }
  }

  ObserveStatus(uid, status);

  // Events on transitions only (and on a new kind of reason), not per poll.
  const std::string category = status == "Ready" ? "Ready" : why.substr(0, why.find(':'));
  bool emit = false;
  {
    std::lock_guard lock(mu_);
    std::string& last = last_why_[uid];
    emit = last != category;
    last = category;
  }
  if (emit) {
    if (status == "Ready") {
      Emit(cd, k8s::EventType::kNormal, "Ready",
           fmt::format("ComputeDomain is Ready ({} nodes)", nodes.size()));
    } else {
      Emit(cd, k8s::EventType::kWarning, "NotReady", why);
    }
  }

  json current_nodes = cd.contains("/status/nodes"_json_pointer) ? cd["status"]["nodes"] : json::array();
  std::sort(current_nodes.begin(), current_nodes.end(), [](const json& a, const json& b) {
    return a.value("name", "") < b.value("name", "");
  });
  const std::string current_status = Str(cd, "/status/status"_json_pointer);
  const bool write_nodes = options_.cliques_enabled && !options_.host_managed && current_nodes != nodes;
  LOG_INFO(4, "status computed", {{"computeDomain", Key(cd)}, {"resourceVersion", Str(cd, "/metadata/resourceVersion"_json_pointer)},
                                   {"status", status}, {"nodes", nodes.dump()}, {"write", current_status != status || write_nodes}});
  if (current_status == status && !write_nodes) return OkStatus();
  json patch_status = {{"status", status}};
  if (write_nodes) patch_status["nodes"] = nodes;
  const json patch = {{"status", patch_status}};
  const std::string memo_key = "status/" + uid;
  const std::string base = Str(cd, "/metadata/resourceVersion"_json_pointer);
  if (AlreadyWritten(memo_key, base, patch)) return OkStatus();  // our write is not in the cache yet
  CountWrite();
  auto result = client_.Patch(k8s::resources::kComputeDomains, Namespace(cd), Name(cd), k8s::PatchType::kMerge,
                              patch, PatchOptions("status"), stop);
  if (result.ok()) RememberWrite(memo_key, base, Str(*result, "/metadata/resourceVersion"_json_pointer), patch);
  if (result.ok() && current_status != status) {
    LOG_INFO(0, "status changed", {{"computeDomain", Key(cd)}, {"status", status}, {"nodes", nodes.size()}});
  }
  return result.ok() ? OkStatus() : result.status();
}

Status Controller::DeleteOwned(const k8s::ResourceRef& ref, const std::string& ns, const std::string& name,
                               std::stop_token stop) {
  CountWrite();
  k8s::DeleteOptions options;
  options.propagation_policy = "Background";
  auto result = client_.Delete(ref, ns, name, options, stop);
  if (result.ok() || k8s::IsNotFound(result.status())) return OkStatus();
  return result.status();
}

Status Controller::ReleaseOwned(const k8s::ResourceRef& ref, const std::string& ns, const std::string& name,
                                std::stop_token stop) {
  auto current = client_.Get(ref, ns, name, {}, stop);
  if (!current.ok()) return k8s::IsNotFound(current.status()) ? OkStatus() : current.status();
  if (HasFinalizer(*current)) {
    json finalizers = json::array();
    for (const std::string& f : Finalizers(*current)) {
      if (f != kFinalizer) finalizers.push_back(f);
    }
    json patch = {{"metadata", {{"finalizers", finalizers}, {"resourceVersion", (*current)["metadata"]["resourceVersion"]}}}};
    CountWrite();
    auto patched = client_.Patch(ref, ns, name, k8s::PatchType::kMerge, patch,
                                 PatchOptions(), stop);
    if (!patched.ok()) return k8s::IsNotFound(patched.status()) ? OkStatus() : patched.status();
  }
  // Assert it is gone (other finalizers, e.g. the garbage collector's, may
  // hold it a little longer; its delete event requeues the domain).
  auto after = client_.Get(ref, ns, name, {}, stop);
  if (!after.ok()) return k8s::IsNotFound(after.status()) ? OkStatus() : after.status();
  if (!Deleting(*after)) {
    return common::FailedPreconditionError(fmt::format("{} {}/{} still exists and is not being deleted", ref.Name(), ns, name));
  }
  return common::UnavailableError(fmt::format("{} {}/{} is still being deleted", ref.Name(), ns, name));
}

namespace {

// The node a claim's devices were allocated on: the allocation's node
// selector (metadata.name In [node]), as the scheduler writes it for devices
// of a node-local pool; "" when it names no single node.
std::string AllocatedNodeName(const json& claim) {
  const json::json_pointer terms_at("/status/allocation/nodeSelector/nodeSelectorTerms");
  if (!claim.contains(terms_at) || !claim.at(terms_at).is_array()) return "";
  for (const json& term : claim.at(terms_at)) {
    for (const json& field : term.value("matchFields", json::array())) {
      const json values = field.value("values", json::array());
      if (field.value("key", "") == "metadata.name" && field.value("operator", "") == "In" && values.size() == 1 &&
          values[0].is_string()) {
        return values[0].get<std::string>();
      }
    }
  }
  return "";
}

}  // namespace

void Controller::ForgetCliqueWritesLocked(const std::string& uid) {
  const std::string prefix = options_.driver_namespace + "/" + uid + ".";
  std::erase_if(cliques_written_, [&](const auto& item) { return item.first.starts_with(prefix); });
}

Status Controller::LabelAllocatedNode(const std::string& claim_key, std::stop_token stop) {
  ObjectPtr claim = informers_->claims->store().Get(claim_key);
  // Without consumers the claim is on its way out (its pod is gone, after
  // the kubelet plugin's Unprepare removed the node's label): labelling now
  // would keep a daemon on a node nothing uses.
  if (!claim || Deleting(*claim) || !HasConsumers(*claim)) return OkStatus();
  const std::string uid = Label(*claim, kComputeDomainLabel);
  const std::string node = AllocatedNodeName(*claim);
  if (uid.empty() || node.empty()) return OkStatus();
  auto domains = informers_->domains->store().ByIndex(kUidIndex, uid);
  if (!domains.ok() || domains->empty() || Deleting(*domains->front())) return OkStatus();
  // Namespace isolation, as the plugin's: anyone can put the domain's labels
  // on a claim of theirs; only a claim in the domain's own namespace may
  // place its daemon (the plugin refuses the others at Prepare).
  if (Namespace(*claim) != Namespace(*domains->front())) {
    LOG_INFO(1, "not labelling a node for a claim of another namespace than its ComputeDomain's",
             {{"claim", claim_key}, {"computeDomain", Key(*domains->front())}, {"node", node}});
    return OkStatus();
  }
  // One writer of this decision at a time: two domains' claims on one node
  // (channel isolation) must not both label it.
  std::lock_guard label_lock(label_mu_);
  std::string current;
  if (ObjectPtr labelled = informers_->labelled_nodes->store().Get(node)) {
    current = Label(*labelled, kComputeDomainLabel);
  }
  {
    // Our own recent write, not in the cache yet.
    std::lock_guard lock(mu_);
    auto it = node_labels_written_.find(node);
    if (current.empty() && it != node_labels_written_.end() &&
        k8s::workqueue::RealClock().Now() - it->second.second < kNodeLabelMemory) {
      current = it->second.first;
    }
  }
  if (current == uid) return OkStatus();
  if (!current.empty()) {
    // The kubelet plugin refuses the claim with the reason when it prepares it.
    LOG_INFO(1, "not labelling a node that serves another ComputeDomain",
             {{"node", node}, {"computeDomain", uid}, {"labelled", current}, {"claim", claim_key}});
    return OkStatus();
  }
  CountWrite();
  auto patched = client_.Patch(k8s::resources::kNodes, "", node, k8s::PatchType::kMerge,
                               {{"metadata", {{"labels", {{std::string(kComputeDomainLabel), uid}}}}}},
                               PatchOptions(), stop);
  if (!patched.ok()) return k8s::IsNotFound(patched.status()) ? OkStatus() : patched.status();
  {
    std::lock_guard lock(mu_);
    node_labels_written_[node] = {uid, k8s::workqueue::RealClock().Now()};
  }
  LOG_INFO(2, "node labelled for a ComputeDomain when its channel was allocated",
           {{"node", node}, {"computeDomain", uid}, {"claim", claim_key}});
  return OkStatus();
}

Status Controller::RemoveNodeLabels(const std::string& uid, std::stop_token stop) {
  k8s::ListOptions list;
  list.label_selector = uid.empty() ? std::string(kComputeDomainLabel)
                                    : fmt::format("{}={}", kComputeDomainLabel, uid);
  auto nodes = client_.ListAll(k8s::resources::kNodes, "", list, stop);
  if (!nodes.ok()) return nodes.status();
  std::set<std::string> live;
  if (uid.empty()) {
    for (const ObjectPtr& cd : informers_->domains->store().List()) live.insert(Uid(*cd));
  }
  for (const json& node : (*nodes)["items"]) {
    if (uid.empty() && live.contains(Label(node, kComputeDomainLabel))) continue;
    CountWrite();
    auto patched = client_.Patch(k8s::resources::kNodes, "", Name(node), k8s::PatchType::kMerge,
                                 {{"metadata", {{"labels", {{std::string(kComputeDomainLabel), nullptr}}}}}},
                                 PatchOptions(), stop);
    if (!patched.ok() && !k8s::IsNotFound(patched.status())) return patched.status();
  }
  return OkStatus();
}

std::vector<json> Controller::DaemonSetsElsewhere(const std::string& uid) const {
  std::vector<json> found;
  for (const auto& informer : informers_->other_daemon_sets) {
    for (const json& daemon_set : ByLabel(*informer, uid)) found.push_back(daemon_set);
  }
  return found;
}

Status Controller::Teardown(const json& cd, std::stop_token stop) {
  const std::string uid = Uid(cd);
  const std::string daemon_name = DaemonObjectName(uid);
  const std::string workload = WorkloadClaimName(cd);
  const std::vector<json> elsewhere = DaemonSetsElsewhere(uid);
  // The workload template only when it is ours (a user's object of that
  // name was never adopted).
  bool own_workload = false;
  if (ObjectPtr cached = informers_->claim_templates->store().Get(Namespace(cd) + "/" + workload)) {
    own_workload = Label(*cached, kComputeDomainLabel) == uid;
  } else {
    // Created a moment ago and not cached yet, or someone else's (not cached: unlabelled).
    auto current = client_.Get(Rct(), Namespace(cd), workload, {}, stop);
    if (!current.ok() && !k8s::IsNotFound(current.status())) return current.status();
    own_workload = current.ok() && Label(*current, kComputeDomainLabel) == uid;
  }
  // 1. Workload template first: no new workload claims for this domain.
  // Crash points (common/crash_point.h) between the steps let the e2e fault
  // tests end the controller at each one and check that a successor
  // finishes the cascade.
  if (own_workload) RETURN_IF_ERROR(DeleteOwned(Rct(), Namespace(cd), workload, stop));
  common::CrashPoint("cascade-after-workload-template");
  if (!options_.host_managed) {
    // 2. Daemons and their claim template (also an earlier installation's,
    // in an additional namespace).
    RETURN_IF_ERROR(DeleteOwned(Ds(), options_.driver_namespace, daemon_name, stop));
    RETURN_IF_ERROR(DeleteOwned(Rct(), options_.driver_namespace, daemon_name, stop));
    for (const json& other : elsewhere) {
      RETURN_IF_ERROR(DeleteOwned(Ds(), Namespace(other), Name(other), stop));
      for (const std::string& rct : ClaimTemplatesOf(other)) {
        RETURN_IF_ERROR(DeleteOwned(Rct(), Namespace(other), rct, stop));
      }
    }
    common::CrashPoint("cascade-after-daemonset");
    // 3. Node labels set by the kubelet plugin for this domain.
    RETURN_IF_ERROR(RemoveNodeLabels(uid, stop));
    common::CrashPoint("cascade-after-node-labels");
  }
  // 4. Finalizers off, absence checked: workload template, then the daemon's.
  if (own_workload) RETURN_IF_ERROR(ReleaseOwned(Rct(), Namespace(cd), workload, stop));
  if (!options_.host_managed) {
    RETURN_IF_ERROR(ReleaseOwned(Ds(), options_.driver_namespace, daemon_name, stop));
    RETURN_IF_ERROR(ReleaseOwned(Rct(), options_.driver_namespace, daemon_name, stop));
    for (const json& other : elsewhere) {
      RETURN_IF_ERROR(ReleaseOwned(Ds(), Namespace(other), Name(other), stop));
      for (const std::string& rct : ClaimTemplatesOf(other)) {
        RETURN_IF_ERROR(ReleaseOwned(Rct(), Namespace(other), rct, stop));
      }
    }
    // 5. Cliques: their daemons are gone with the DaemonSet.
    if (informers_->cliques) {
      for (const json& clique : ByLabel(*informers_->cliques, uid)) {
        RETURN_IF_ERROR(DeleteOwned(k8s::resources::kComputeDomainCliques, Namespace(clique), Name(clique), stop));
      }
    }
    common::CrashPoint("cascade-after-cliques");
  }
  // 6. The domain itself.
  json finalizers = json::array();
  for (const std::string& f : Finalizers(cd)) {
    if (f != kFinalizer) finalizers.push_back(f);
  }
  CountWrite();
  auto patched = client_.Patch(k8s::resources::kComputeDomains, Namespace(cd), Name(cd), k8s::PatchType::kMerge,
                               {{"metadata", {{"finalizers", finalizers}, {"resourceVersion", cd["metadata"]["resourceVersion"]}}}},
                               PatchOptions(), stop);
  if (!patched.ok() && !k8s::IsNotFound(patched.status())) return patched.status();
  {
    std::lock_guard lock(mu_);
    torn_down_.insert(uid);
    departed_.erase(uid);
    channels_.erase(uid);
    last_why_.erase(uid);
    written_.erase("status/" + uid);
    ForgetCliqueWritesLocked(uid);
  }
  LOG_INFO(0, "ComputeDomain torn down", {{"computeDomain", Key(cd)}, {"uid", uid}});
  return OkStatus();
}

Status Controller::CleanupDomain(const std::string& uid, std::stop_token stop) {
  if (uid.empty()) return OkStatus();
  auto live = informers_->domains->store().ByIndex(kUidIndex, uid);
  if (live.ok() && !live->empty()) return OkStatus();  // it exists after all
  Status first_error = OkStatus();
  auto note = [&](const Status& s) {
    if (!s.ok() && first_error.ok()) first_error = s;
  };
  auto sweep = [&](const k8s::cache::Informer* informer, const k8s::ResourceRef& ref, bool finalized) {
    if (informer == nullptr) return;
    for (const json& o : ByLabel(*informer, uid)) {
      LOG_INFO(0, "removing an object of a ComputeDomain that no longer exists",
               {{"object", ref.Name() + " " + Key(o)}, {"uid", uid}});
      note(DeleteOwned(ref, Namespace(o), Name(o), stop));
      if (finalized) note(ReleaseOwned(ref, Namespace(o), Name(o), stop));
    }
  };
  sweep(informers_->claim_templates.get(), Rct(), true);
  sweep(informers_->daemon_sets.get(), Ds(), true);
  for (const auto& other : informers_->other_daemon_sets) sweep(other.get(), Ds(), true);
  sweep(informers_->cliques.get(), k8s::resources::kComputeDomainCliques, false);
  if (!options_.host_managed) note(RemoveNodeLabels(uid, stop));
  if (first_error.ok()) {
    std::lock_guard lock(mu_);
    channels_.erase(uid);
    last_why_.erase(uid);
    departed_.erase(uid);
    written_.erase("status/" + uid);
    ForgetCliqueWritesLocked(uid);
  }
  return first_error;
}

Status Controller::CleanupStale(std::stop_token stop) {
  std::set<std::string> live;
  for (const ObjectPtr& cd : informers_->domains->store().List()) live.insert(Uid(*cd));
  Status first_error = OkStatus();
  auto note = [&](const Status& s) {
    if (!s.ok() && first_error.ok()) first_error = s;
  };
  auto sweep = [&](const k8s::cache::Informer* informer, const k8s::ResourceRef& ref, bool finalized) {
    if (informer == nullptr) return;
    for (const ObjectPtr& o : informer->store().List()) {
      const std::string uid = Label(*o, kComputeDomainLabel);
      if (uid.empty() || live.contains(uid)) continue;
      LOG_INFO(0, "removing an object of a ComputeDomain that no longer exists",
               {{"object", ref.Name() + " " + Key(*o)}, {"uid", uid}});
      note(DeleteOwned(ref, Namespace(*o), Name(*o), stop));
      if (finalized) {
        Status released = ReleaseOwned(ref, Namespace(*o), Name(*o), stop);
        if (released.code() != common::StatusCode::kUnavailable) note(released);
      }
    }
  };
  sweep(informers_->claim_templates.get(), Rct(), true);
  sweep(informers_->daemon_sets.get(), Ds(), true);
  for (const auto& other : informers_->other_daemon_sets) sweep(other.get(), Ds(), true);
  sweep(informers_->cliques.get(), k8s::resources::kComputeDomainCliques, false);
  if (!options_.host_managed) note(RemoveNodeLabels("", stop));
  return first_error;
}

bool Controller::AlreadyWritten(const std::string& key, const std::string& cached_version, const json& body) const {
  std::lock_guard lock(mu_);
  auto it = written_.find(key);
  if (it == written_.end() || it->second.body != body) return false;
  // The cache still shows the object we wrote on: our write is not in it yet.
  if (cached_version == it->second.base_version) return true;
  // Or an object between that one and ours (another writer's change, e.g. a
  // finalizer patch, arrived first). resourceVersions are etcd revisions in
  // practice; where they do not read as numbers, write again.
  std::uint64_t cached = 0, written = 0;
  const auto parse = [](const std::string& text, std::uint64_t& out) {
    if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 19) return false;
    out = std::stoull(text);
    return true;
  };
  return parse(cached_version, cached) && parse(it->second.result_version, written) && cached < written;
}

void Controller::RememberWrite(const std::string& key, const std::string& base_version,
                               const std::string& result_version, const json& body) {
  std::lock_guard lock(mu_);
  written_[key] = {base_version, result_version, body};
}

void Controller::Emit(const json& cd, k8s::EventType type, std::string_view reason, std::string_view note) {
  json regarding = cd;
  regarding["apiVersion"] = kApiVersion;
  regarding["kind"] = "ComputeDomain";
  recorder_->Emit(k8s::ObjectReference::FromObject(regarding), type, reason, "Reconcile", note);
}

}  // namespace nvdra::computedomain::controller
