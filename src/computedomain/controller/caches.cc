#include "computedomain/controller/caches.h"

#include <set>
#include <utility>

#include "computedomain/clique_membership.h"
#include "k8s/cache/store.h"
#include "k8s/rest_list_watch.h"

namespace nvdra::computedomain::controller {

using k8s::cache::ObjectPtr;

namespace {

constexpr char kUidIndex[] = "uid";

std::vector<k8s::cache::Indexer> IndexersWithUid() {
  auto indexers = k8s::cache::DefaultIndexers();
  indexers.push_back({kUidIndex, [](const nlohmann::json& o) {
                        static const nlohmann::json::json_pointer uid_at("/metadata/uid");
                        if (!o.contains(uid_at) || !o.at(uid_at).is_string()) return std::vector<std::string>{};
                        std::string uid = o.at(uid_at).get<std::string>();
                        return uid.empty() ? std::vector<std::string>{} : std::vector<std::string>{uid};
                      }});
  return indexers;
}

}  // namespace

std::unique_ptr<ControllerCaches> ControllerCaches::Create(k8s::Client& client, const ControllerOptions& options) {
  auto caches = std::make_unique<ControllerCaches>();
  auto make = [&](const k8s::ResourceRef& ref, const std::string& ns, const std::string& selector,
                  std::vector<k8s::cache::Indexer> indexers = k8s::cache::DefaultIndexers()) {
    k8s::cache::InformerOptions o;
    o.description = ref.Name() + (ns.empty() ? "" : " in " + ns);
    o.label_selector = selector;
    o.indexers = std::move(indexers);
    return std::make_unique<k8s::cache::Informer>(std::make_unique<k8s::RestListWatch>(client, ref, ns), o);
  };
  const std::string label(kComputeDomainLabel);
  caches->domains = make(k8s::resources::kComputeDomains, "", "", IndexersWithUid());
  if (options.ManagesDaemons()) {
    if (options.cliques_enabled) {
      caches->cliques = make(k8s::resources::kComputeDomainCliques, options.driver_namespace, "");
    }
    caches->pods = make(k8s::resources::kPods, options.driver_namespace, label);
    caches->daemon_sets = make(k8s::resources::kDaemonSets, options.driver_namespace, label);
    std::set<std::string> others(options.additional_namespaces.begin(), options.additional_namespaces.end());
    others.erase(options.driver_namespace);
    for (const std::string& ns : others) {
      caches->other_daemon_sets.push_back(make(k8s::resources::kDaemonSets, ns, label));
    }
    caches->claims = make(k8s::resources::kResourceClaims, "", label);
    caches->labelled_nodes = make(k8s::resources::kNodes, "", label);
  }
  caches->claim_templates = make(k8s::resources::kResourceClaimTemplates, "", label);
  return caches;
}

void ControllerCaches::Stop() {
  for (auto* informer : All()) informer->Stop();
}

std::vector<k8s::cache::Informer*> ControllerCaches::All() const {
  std::vector<k8s::cache::Informer*> out;
  for (auto* p : {&domains, &cliques, &pods, &daemon_sets, &claim_templates, &claims, &labelled_nodes}) {
    if (*p) out.push_back(p->get());
  }
  for (const auto& p : other_daemon_sets) out.push_back(p.get());
  return out;
}

std::vector<k8s::cache::Informer*> ControllerCaches::OwnedObjectCaches() const {
  std::vector<k8s::cache::Informer*> out;
  if (daemon_sets) out.push_back(daemon_sets.get());
  if (claim_templates) out.push_back(claim_templates.get());
  for (const auto& p : other_daemon_sets) out.push_back(p.get());
  return out;
}

std::vector<ObjectPtr> CachedByLabel(const k8s::cache::Informer& informer, std::string_view uid) {
  auto objects = informer.store().ByIndex(k8s::cache::kLabelIndex,
                                          k8s::cache::LabelIndexValue(kComputeDomainLabel, uid));
  return objects.ok() ? *std::move(objects) : std::vector<ObjectPtr>{};
}

std::vector<ObjectPtr> CachedDomainsWithUid(const ControllerCaches& caches, std::string_view uid) {
  auto domains = caches.domains->store().ByIndex(kUidIndex, std::string(uid));
  return domains.ok() ? *std::move(domains) : std::vector<ObjectPtr>{};
}

std::vector<ObjectPtr> CachedDaemonSetsElsewhere(const ControllerCaches& caches, std::string_view uid) {
  std::vector<ObjectPtr> found;
  for (const auto& informer : caches.other_daemon_sets) {
    for (ObjectPtr& daemon_set : CachedByLabel(*informer, uid)) found.push_back(std::move(daemon_set));
  }
  return found;
}

}  // namespace nvdra::computedomain::controller
