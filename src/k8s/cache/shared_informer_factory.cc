#include "k8s/cache/shared_informer_factory.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace nvdra::k8s::cache {
namespace {

std::string Describe(const InformerKey& key) {
  std::string out = key.resource;
  if (!key.namespace_name.empty()) out += " ns=" + key.namespace_name;
  if (!key.label_selector.empty()) out += " labels=" + key.label_selector;
  if (!key.field_selector.empty()) out += " fields=" + key.field_selector;
  return out;
}

}  // namespace

SharedInformerFactory::SharedInformerFactory(ListWatchFactory list_watch_factory,
                                             InformerOptions defaults)
    : list_watch_factory_(std::move(list_watch_factory)), defaults_(std::move(defaults)) {}

SharedInformerFactory::~SharedInformerFactory() { Shutdown(); }

Informer& SharedInformerFactory::ForResource(const InformerKey& key,
                                             std::vector<Indexer> extra_indexers) {
  {
    common::MutexLock lock(informers_mutex_);
    auto it = informers_.find(key);
    if (it != informers_.end()) return *it->second;
  }
  // The ListWatch factory is caller code: run it unlocked. A racing call for
  // the same key may build one too; the loser's is dropped unused.
  std::unique_ptr<ListWatch> list_watch = list_watch_factory_(key);
  if (list_watch == nullptr) {
    std::fprintf(stderr, "SharedInformerFactory: null ListWatch for %s\n", Describe(key).c_str());
    std::abort();
  }
  InformerOptions options = defaults_;
  options.description = Describe(key);
  options.label_selector = key.label_selector;
  options.field_selector = key.field_selector;
  for (Indexer& indexer : extra_indexers) options.indexers.push_back(std::move(indexer));

  common::MutexLock lock(informers_mutex_);
  auto [it, inserted] = informers_.try_emplace(key, nullptr);
  if (inserted) it->second = std::make_unique<Informer>(std::move(list_watch), std::move(options));
  return *it->second;
}

void SharedInformerFactory::Start() {
  std::vector<Informer*> to_start;
  {
    common::MutexLock lock(informers_mutex_);
    if (shut_down_) return;
    for (auto& [key, informer] : informers_) {
      bool& started = started_[key];
      if (!started) {
        started = true;
        to_start.push_back(informer.get());
      }
    }
  }
  for (Informer* informer : to_start) informer->Start();
}

bool SharedInformerFactory::WaitForCacheSync(std::stop_token stop) {
  for (Informer* informer : Snapshot(/*started_only=*/true)) {
    if (!informer->WaitForSync(stop)) return false;
  }
  return true;
}

void SharedInformerFactory::Shutdown() {
  {
    common::MutexLock lock(informers_mutex_);
    shut_down_ = true;
  }
  // Informers are never removed before the factory dies, so the pointers
  // stay valid while they are stopped without the lock (stopping joins
  // threads whose handlers may call ForResource()).
  for (Informer* informer : Snapshot(/*started_only=*/false)) informer->Stop();
}

std::vector<Informer*> SharedInformerFactory::Snapshot(bool started_only) {
  common::MutexLock lock(informers_mutex_);
  std::vector<Informer*> out;
  for (auto& [key, informer] : informers_) {
    if (started_only) {
      auto started = started_.find(key);
      if (started == started_.end() || !started->second) continue;
    }
    out.push_back(informer.get());
  }
  return out;
}

}  // namespace nvdra::k8s::cache
