#include "computedomain/domain_watch.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/json_fields.h"
#include "common/log.h"
#include "computedomain/clique_membership.h"
#include "k8s/rest_list_watch.h"

namespace nvdra::computedomain {

using common::JsonFind;
using common::JsonString;
using common::StatusOr;

namespace {

constexpr char kUidIndex[] = "uid";
constexpr char kReady[] = "Ready";

std::vector<k8s::cache::Indexer> IndexersWithUid() {
  std::vector<k8s::cache::Indexer> indexers = k8s::cache::DefaultIndexers();
  indexers.push_back({kUidIndex, [](const nlohmann::json& object) -> std::vector<std::string> {
                        std::string uid = JsonString(object, {"metadata", "uid"});
                        if (uid.empty()) return {};
                        return {std::move(uid)};
                      }});
  return indexers;
}

// A daemon pod scheduled to `node` and not terminating: a terminating daemon
// is leaving the clique whatever it last said. Reads the informer's shared
// object without copying it.
bool LiveOnNode(const nlohmann::json& pod, const std::string& node) {
  return JsonFind(pod, {"metadata", "deletionTimestamp"}) == nullptr && JsonString(pod, {"spec", "nodeName"}) == node;
}

}  // namespace

DomainWatch::DomainWatch(DomainWatchOptions options) : options_(std::move(options)) {}

DomainWatch::~DomainWatch() {
  Cancel();
  if (node_) node_->Stop();
  if (daemon_pods_) daemon_pods_->Stop();
  std::shared_ptr<k8s::cache::Informer> cliques;
  {
    common::MutexLock lock(cliques_mu_);
    cliques = std::move(cliques_);
  }
  if (cliques) cliques->Stop();
  if (domains_) domains_->Stop();
}

StatusOr<std::unique_ptr<DomainWatch>> DomainWatch::Start(k8s::Client& client, DomainWatchOptions options) {
  ListWatchSource cliques;
  std::unique_ptr<k8s::cache::ListWatch> daemon_pods;
  if (options.cliques_enabled) {
    cliques = [&client, ns = options.driver_namespace] {
      return std::make_unique<k8s::RestListWatch>(client, k8s::resources::kComputeDomainCliques, ns);
    };
  }
  daemon_pods = std::make_unique<k8s::RestListWatch>(client, k8s::resources::kPods, options.driver_namespace);
  return StartWith(std::make_unique<k8s::RestListWatch>(client, k8s::resources::kComputeDomains, ""),
                   std::move(cliques), std::move(daemon_pods), std::move(options),
                   std::make_unique<k8s::RestListWatch>(client, k8s::resources::kNodes, ""));
}

StatusOr<std::unique_ptr<DomainWatch>> DomainWatch::StartWith(std::unique_ptr<k8s::cache::ListWatch> domains,
                                                              ListWatchSource cliques,
                                                              std::unique_ptr<k8s::cache::ListWatch> daemon_pods,
                                                              DomainWatchOptions options,
                                                              std::unique_ptr<k8s::cache::ListWatch> node) {
  std::unique_ptr<DomainWatch> watch(new DomainWatch(std::move(options)));
  DomainWatch* self = watch.get();
  // Logged at -v 4 with the object's resourceVersion, so that a waiting
  // claim's latency splits into API delivery (writer's log to this line)
  // and our own work (this line to "claim prepared").
  const auto seen = [self](const char* what, const k8s::cache::ObjectPtr& object) {
    if (common::VerbosityEnabled(4) && object) {
      const nlohmann::json& metadata = object->value("metadata", nlohmann::json::object());
      LOG_INFO(4, "domain watch event", {{"event", what}, {"kind", object->value("kind", "")},
                                         {"name", metadata.value("name", "")},
                                         {"resourceVersion", metadata.value("resourceVersion", "")}});
    }
    self->Notify();
  };
  const k8s::cache::EventHandler notify{
      .on_add = [seen](const k8s::cache::ObjectPtr& object) { seen("add", object); },
      .on_update = [seen](const k8s::cache::ObjectPtr&, const k8s::cache::ObjectPtr& object) {
        seen("update", object);
      },
      .on_delete = [seen](const k8s::cache::ObjectPtr& object) { seen("delete", object); },
      .needs_old_object = false,
  };

  k8s::cache::InformerOptions domain_options;
  domain_options.description = "resource.nvidia.com/v1beta1/computedomains";
  domain_options.indexers = IndexersWithUid();
  watch->domains_ = std::make_unique<k8s::cache::Informer>(std::move(domains), domain_options);
  watch->domains_->AddEventHandler(notify);
  watch->domains_->AddEventHandler(k8s::cache::EventHandler{
      .on_add = nullptr,
      .on_update = nullptr,
      .on_delete = [self](const k8s::cache::ObjectPtr&) { self->DomainDeleted(); },
      .needs_old_object = false,
  });
  watch->domains_->Start();

  watch->notify_ = notify;
  if (watch->options_.cliques_enabled) watch->clique_source_ = std::move(cliques);
  std::shared_ptr<k8s::cache::Informer> clique_informer = watch->StartCliqueInformer(watch->options_.clique_id);
  {
    common::MutexLock lock(watch->cliques_mu_);
    watch->clique_id_ = watch->options_.clique_id;
    watch->cliques_ = clique_informer;
  }
  if (daemon_pods) {
    k8s::cache::InformerOptions pod_options;
    pod_options.description = "IMEX daemon pods on " + watch->options_.node_name;
    pod_options.label_selector = std::string(kComputeDomainLabel);
    pod_options.field_selector = "spec.nodeName=" + watch->options_.node_name;
    watch->daemon_pods_ = std::make_unique<k8s::cache::Informer>(std::move(daemon_pods), pod_options);
    watch->daemon_pods_->AddEventHandler(notify);
    watch->daemon_pods_->Start();  // not waited for: see the file comment
  }
  if (node) {
    k8s::cache::InformerOptions node_options;
    node_options.description = "Node " + watch->options_.node_name;
    node_options.field_selector = "metadata.name=" + watch->options_.node_name;
    watch->node_ = std::make_unique<k8s::cache::Informer>(std::move(node), node_options);
    watch->node_->AddEventHandler(notify);
    watch->node_->Start();  // not waited for: without it the label is read from the API server
  }

  const auto deadline = k8s::workqueue::RealClock().Now() + watch->options_.sync_timeout;
  if (!watch->domains_->WaitForSyncUntil(deadline) ||
      (clique_informer && !clique_informer->WaitForSyncUntil(deadline))) {
    return common::DeadlineExceededError(
        fmt::format("ComputeDomain{} informers did not sync within {} s (are the CRDs installed?)",
                    clique_informer ? " and ComputeDomainClique" : "", watch->options_.sync_timeout.count()));
  }
  return watch;
}

std::shared_ptr<k8s::cache::Informer> DomainWatch::StartCliqueInformer(const std::string& clique_id) const {
  if (!clique_source_ || clique_id.empty()) return nullptr;
  k8s::cache::InformerOptions clique_options;
  clique_options.label_selector = fmt::format("{}={}", kComputeDomainCliqueLabel, clique_id);
  clique_options.description = "resource.nvidia.com/v1beta1/computedomaincliques " + clique_options.label_selector;
  auto informer = std::make_shared<k8s::cache::Informer>(clique_source_(), clique_options);
  informer->AddEventHandler(notify_);
  informer->Start();
  return informer;
}

void DomainWatch::SetCliqueId(const std::string& clique_id) {
  {
    common::MutexLock lock(cliques_mu_);
    if (clique_id == clique_id_) return;
  }
  // Not waited for: until it has listed, readiness comes from the daemon pod
  // and the domain's status.nodes.
  std::shared_ptr<k8s::cache::Informer> started = StartCliqueInformer(clique_id);
  std::shared_ptr<k8s::cache::Informer> old;
  {
    common::MutexLock lock(cliques_mu_);
    clique_id_ = clique_id;
    old = std::exchange(cliques_, std::move(started));
  }
  if (old) old->Stop();
  LOG_INFO(2, "watching the cliques of this node's clique ID", {{"cliqueID", clique_id}});
  Notify();
}

void DomainWatch::SetDomainDeletedHandler(std::function<void()> handler) {
  common::MutexLock lock(handler_mu_);
  deleted_handler_ = std::move(handler);
}

void DomainWatch::DomainDeleted() {
  common::MutexLock lock(handler_mu_);
  if (deleted_handler_) deleted_handler_();
}

void DomainWatch::Notify() {
  // Taking the mutex orders the notification after a waiter's check, so a
  // change between its check and its wait is not lost.
  { common::MutexLock lock(mu_); }
  changed_.notify_all();
}

void DomainWatch::Cancel() {
  {
    common::MutexLock lock(mu_);
    cancelled_ = true;
  }
  changed_.notify_all();
}

std::optional<k8s::ComputeDomain> DomainWatch::FindByUid(const std::string& uid) const {
  auto found = domains_->store().ByIndex(kUidIndex, uid);
  if (!found.ok() || found->empty()) return std::nullopt;
  return k8s::ComputeDomain(*found->front());
}

bool DomainWatch::DaemonPodReady(const k8s::ComputeDomain& cd, const std::string& clique_id) const {
  auto pods = daemon_pods_->store().ByIndex(k8s::cache::kLabelIndex,
                                             k8s::cache::LabelIndexValue(kComputeDomainLabel, cd.uid()));
  if (!pods.ok()) return false;
  for (const k8s::cache::ObjectPtr& pod : *pods) {
    if (!LiveOnNode(*pod, options_.node_name)) continue;
    if (JsonString(*pod, {"metadata", "labels", kComputeDomainCliqueLabel}) != clique_id) continue;
    if (JsonString(*pod, {"metadata", "annotations", kDaemonStatusAnnotation}) == kDaemonReady) return true;
  }
  return false;
}

std::set<std::string> DomainWatch::DaemonDomains() const {
  std::set<std::string> domains;
  if (!daemon_pods_) return domains;
  for (const k8s::cache::ObjectPtr& pod : daemon_pods_->store().List()) {
    if (!LiveOnNode(*pod, options_.node_name)) continue;
    if (std::string uid = JsonString(*pod, {"metadata", "labels", kComputeDomainLabel}); !uid.empty()) {
      domains.insert(std::move(uid));
    }
  }
  return domains;
}

std::optional<std::string> DomainWatch::CachedNodeDomainLabel() const {
  if (!node_ || !node_->HasSynced()) return std::nullopt;
  k8s::cache::ObjectPtr node = node_->store().Get(options_.node_name);
  if (!node) return std::nullopt;
  return JsonString(*node, {"metadata", "labels", kComputeDomainLabel});
}

bool DomainWatch::NodeReady(const k8s::ComputeDomain& cd, const std::string& clique_id) const {
  if (daemon_pods_ && options_.cliques_enabled && !clique_id.empty() && DaemonPodReady(cd, clique_id)) {
    return true;
  }
  std::shared_ptr<k8s::cache::Informer> cliques;
  {
    common::MutexLock lock(cliques_mu_);
    cliques = cliques_;
  }
  if (cliques && !clique_id.empty()) {
    const std::string key = fmt::format("{}/{}.{}", options_.driver_namespace, cd.uid(), clique_id);
    if (k8s::cache::ObjectPtr object = cliques->store().Get(key)) {
      for (const k8s::CliqueDaemon& daemon : k8s::ComputeDomainClique(*object).daemons()) {
        if (daemon.node_name() == options_.node_name && daemon.status() == kReady) return true;
      }
    }
  }
  for (const k8s::ComputeDomainNode& node : cd.nodes()) {
    if (node.name() == options_.node_name) return node.status() == kReady;
  }
  return false;
}

bool DomainWatch::WaitFor(const std::function<bool()>& condition, std::chrono::steady_clock::time_point deadline) {
  common::MutexLock lock(mu_);
  while (true) {
    if (condition()) return true;
    if (cancelled_) return false;
    if (changed_.wait_until(lock.native(), deadline) == std::cv_status::timeout) return condition();
  }
}

}  // namespace nvdra::computedomain
