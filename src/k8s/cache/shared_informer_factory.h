#pragma once

// One informer, and so one list and one watch, per resource and selector,
// however many components want events for it. Defines: InformerKey,
// ListWatchFactory, SharedInformerFactory.
//
// Ownership: owns its informers (and through them their ListWatches and
// threads); references returned by ForResource() stay valid until the
// factory is destroyed. Borrows the Clock in the default options.
// Thread-safety: thread-safe.

#include <compare>
#include <functional>
#include <map>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "k8s/cache/informer.h"
#include "k8s/cache/list_watch.h"
#include "k8s/cache/store.h"

namespace nvdra::k8s::cache {

// What makes two informers the same. `resource` is opaque here and
// meaningful to the ListWatchFactory, e.g. "resource.k8s.io/v1/resourceslices".
struct InformerKey {
  std::string resource;
  std::string namespace_name;  // empty: all namespaces
  std::string label_selector;
  std::string field_selector;

  friend auto operator<=>(const InformerKey&, const InformerKey&) = default;
};

// Makes the ListWatch for a key (the REST client's adapter, or a fake).
// Called with the factory's lock not held; must not return null.
using ListWatchFactory = std::function<std::unique_ptr<ListWatch>(const InformerKey& key)>;

class SharedInformerFactory {
 public:
  // `defaults` configure every informer (clock, backoff, watch timeout);
  // their selectors and description are replaced per key.
  explicit SharedInformerFactory(ListWatchFactory list_watch_factory,
                                 InformerOptions defaults = {});
  // Shutdown().
  ~SharedInformerFactory();
  SharedInformerFactory(const SharedInformerFactory&) = delete;
  SharedInformerFactory& operator=(const SharedInformerFactory&) = delete;

  // The informer for `key`, created on first use. `extra_indexers` are added
  // to the default ones when this call creates the informer and ignored
  // otherwise (an informer's indexes are fixed at creation). An informer
  // created after Start() runs only after the next Start().
  Informer& ForResource(const InformerKey& key, std::vector<Indexer> extra_indexers = {})
      EXCLUDES(informers_mutex_);

  // Starts every informer not yet started. After Shutdown(), does nothing.
  void Start() EXCLUDES(informers_mutex_);

  // Blocks until every started informer has synced, or `stop` is requested.
  // Returns true when all have synced.
  bool WaitForCacheSync(std::stop_token stop);

  // Stops and joins every informer. Must not be called from a handler.
  // Idempotent.
  void Shutdown() EXCLUDES(informers_mutex_);

 private:
  std::vector<Informer*> Snapshot(bool started_only) EXCLUDES(informers_mutex_);

  const ListWatchFactory list_watch_factory_;
  const InformerOptions defaults_;

  common::Mutex informers_mutex_;  // guards the members below
  std::map<InformerKey, std::unique_ptr<Informer>> informers_ GUARDED_BY(informers_mutex_);
  std::map<InformerKey, bool> started_ GUARDED_BY(informers_mutex_);
  bool shut_down_ GUARDED_BY(informers_mutex_) = false;
};

}  // namespace nvdra::k8s::cache
