#pragma once

// The controller's informer caches: ComputeDomains (all namespaces, indexed
// by UID) and, label-selected on the domain label, the objects made for
// domains. Defines: ControllerCaches, CachedByLabel(), CachedDomainsWithUid(),
// CachedDaemonSetsElsewhere().
//
// Every part of the controller reads these; only the Controller starts and
// stops them. Reads hand out the caches' shared objects (ObjectPtr), never
// copies: a reconcile reads every daemon pod of its domain, and copying them
// was most of the controller's CPU time at 18 nodes.
//
// Ownership: owns its informers; borrows the Client (must outlive it).
// Thread-safety: the informers are thread-safe; the pointers are set in
// Create and constant after.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "computedomain/controller/controller_options.h"
#include "k8s/cache/informer.h"
#include "k8s/client.h"

namespace nvdra::computedomain::controller {

struct ControllerCaches {
  std::unique_ptr<k8s::cache::Informer> domains;
  std::unique_ptr<k8s::cache::Informer> cliques;  // null with hostManaged or without cliques
  std::unique_ptr<k8s::cache::Informer> pods;     // daemon pods; null with hostManaged
  std::unique_ptr<k8s::cache::Informer> daemon_sets;
  // DaemonSets in --additional-namespaces (an earlier installation's).
  std::vector<std::unique_ptr<k8s::cache::Informer>> other_daemon_sets;
  std::unique_ptr<k8s::cache::Informer> claim_templates;
  // Workload claims made from domains' templates (by label), and the nodes
  // labelled for a domain: early node labelling. Null with hostManaged.
  std::unique_ptr<k8s::cache::Informer> claims;
  std::unique_ptr<k8s::cache::Informer> labelled_nodes;

  // The informers `options` call for, not started.
  static std::unique_ptr<ControllerCaches> Create(k8s::Client& client, const ControllerOptions& options);
  // Stops every informer (their handlers run no more); idempotent.
  void Stop();
  ~ControllerCaches() { Stop(); }

  std::vector<k8s::cache::Informer*> All() const;
  // The DaemonSet and claim template caches (ours and the additional
  // namespaces'): their changes requeue the domain they are labelled for.
  std::vector<k8s::cache::Informer*> OwnedObjectCaches() const;
};

// The cached objects labelled for domain `uid`.
std::vector<k8s::cache::ObjectPtr> CachedByLabel(const k8s::cache::Informer& informer, std::string_view uid);
// The cached ComputeDomains with metadata.uid `uid` (none or one).
std::vector<k8s::cache::ObjectPtr> CachedDomainsWithUid(const ControllerCaches& caches, std::string_view uid);
// The domain's DaemonSets in the additional namespaces.
std::vector<k8s::cache::ObjectPtr> CachedDaemonSetsElsewhere(const ControllerCaches& caches, std::string_view uid);

}  // namespace nvdra::computedomain::controller
