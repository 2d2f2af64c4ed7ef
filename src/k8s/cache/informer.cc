#include "k8s/cache/informer.h"

#include <cstdio>
#include <cstdlib>

#include "common/log.h"

namespace nvdra::k8s::cache {
namespace {

// Same resourceVersion: the server guarantees the same object state, so the
// watch replaying it (after a resume) is not a change.
bool SameVersion(const PackedObject& a, const PackedObject& b) {
  return !a.resource_version().empty() && a.resource_version() == b.resource_version();
}

// An object handed to handlers, unpacked on first use only: the cache keeps
// objects packed, and most handlers never look at the old one.
class LazyObject {
 public:
  LazyObject(PackedPtr packed, ObjectPtr object)
      : packed_(std::move(packed)), object_(std::move(object)) {}
  const ObjectPtr& get() {
    if (object_ == nullptr && packed_ != nullptr) object_ = packed_->Unpack();
    return object_;
  }

 private:
  PackedPtr packed_;
  ObjectPtr object_;
};

// The bookmark that ends a streaming list's initial events.
bool IsInitialEventsEnd(const nlohmann::json& bookmark) {
  const auto metadata = bookmark.find("metadata");
  if (metadata == bookmark.end() || !metadata->is_object()) return false;
  const auto annotations = metadata->find("annotations");
  if (annotations == metadata->end() || !annotations->is_object()) return false;
  const auto end = annotations->find("k8s.io/initial-events-end");
  return end != annotations->end() && end->is_string() && end->get<std::string>() == "true";
}

}  // namespace

Informer::Informer(std::unique_ptr<ListWatch> list_watch, InformerOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : workqueue::RealClock()),
      list_watch_(std::move(list_watch)),
      store_(options_.indexers),
      random_(options_.random ? options_.random : workqueue::DefaultRandomSource()),
      backoff_(options_.reconnect_backoff, random_) {
  if (list_watch_ == nullptr) {
    std::fprintf(stderr, "cache::Informer %s: null ListWatch\n", options_.description.c_str());
    std::abort();
  }
}

Informer::~Informer() { Stop(); }

void Informer::AddEventHandler(EventHandler handler) {
  // Through the queue, so the handler joins the dispatch order at one point:
  // it is given the cache as it stands there, then every later change.
  Enqueue(Registered{std::move(handler)});
}

void Informer::Start() {
  common::MutexLock lock(pending_mutex_);
  if (started_) return;
  started_ = true;
  dispatch_thread_ = std::jthread([this](std::stop_token stop) { RunDispatchLoop(stop); });
  watch_thread_ = std::jthread([this](std::stop_token stop) { RunWatchLoop(stop); });
}

void Informer::Stop() {
  {
    common::MutexLock lock(pending_mutex_);
    if (stopped_) return;
    stopped_ = true;
    // A Start() after Stop() must not bring the threads back.
    started_ = true;
  }
  watch_thread_.request_stop();
  dispatch_thread_.request_stop();
  if (watch_thread_.joinable()) watch_thread_.join();
  if (dispatch_thread_.joinable()) dispatch_thread_.join();
}

bool Informer::HasSynced() const {
  common::MutexLock lock(pending_mutex_);
  return synced_;
}

bool Informer::WaitForSync(std::stop_token stop) const {
  common::MutexLock lock(pending_mutex_);
  return synced_changed_.wait(lock.native(), stop, [&]() REQUIRES(pending_mutex_) { return synced_; });
}

bool Informer::WaitForSyncUntil(workqueue::TimePoint deadline) const {
  common::MutexLock lock(pending_mutex_);
  return clock_.WaitUntil(synced_changed_, lock, deadline, {}, [&]() REQUIRES(pending_mutex_) { return synced_; });
}

// --- Watch thread ------------------------------------------------------------

void Informer::RunWatchLoop(std::stop_token stop) {
  std::optional<std::string> resource_version;
  // True while the current version comes from a list and no event followed.
  // Gone within min_watch_duration of such a list means the server cannot
  // serve even a fresh list's version; relisting at once would loop hot.
  // (Gone long after a quiet list is normal: etcd compacted meanwhile.)
  bool fresh_list = false;
  // The first list may come from the server's watch cache; after a 410 the
  // next one is a quorum read.
  bool list_from_cache = options_.first_list_from_watch_cache;
  workqueue::TimePoint listed_at;
  while (!stop.stop_requested()) {
    if (!resource_version && options_.streaming_list && !streaming_refused_) {
      std::string streamed;
      const WatchOutcome outcome = WatchOnce(streamed, stop, /*initial_events=*/true);
      if (!streamed.empty()) resource_version = streamed;
      switch (outcome) {
        case WatchOutcome::kStopped:
          return;
        case WatchOutcome::kRefused:
          streaming_refused_ = true;  // list and watch from now on
          break;
        case WatchOutcome::kEnded:
          break;  // watch on from the streamed version, or stream again
        case WatchOutcome::kGone:
          // Rare after a consistent read; stream again, but not in a hot loop.
          resource_version.reset();
          if (!workqueue::SleepUntil(clock_, clock_.Now() + backoff_.Next(), stop)) return;
          break;
        case WatchOutcome::kFailed:
          if (!workqueue::SleepUntil(clock_, clock_.Now() + backoff_.Next(), stop)) return;
          break;
      }
      continue;
    }
    if (!resource_version) {
      resource_version = ListOnce(stop, list_from_cache);
      if (!resource_version) {
        if (!workqueue::SleepUntil(clock_, clock_.Now() + backoff_.Next(), stop)) return;
        continue;
      }
      backoff_.Reset();
      fresh_list = true;
      listed_at = clock_.Now();
    }
    const std::string watched_from = *resource_version;
    const WatchOutcome outcome = WatchOnce(*resource_version, stop);
    if (*resource_version != watched_from) fresh_list = false;
    switch (outcome) {
      case WatchOutcome::kStopped:
        return;
      case WatchOutcome::kEnded:
        break;
      case WatchOutcome::kGone:
        LOG_INFO(2, "resource version expired, relisting",
                 {{"informer", options_.description}, {"resourceVersion", watched_from}});
        resource_version.reset();
        list_from_cache = false;
        if (fresh_list && clock_.Now() - listed_at < options_.min_watch_duration &&
            !workqueue::SleepUntil(clock_, clock_.Now() + backoff_.Next(), stop)) {
          return;
        }
        break;
      case WatchOutcome::kFailed:
      case WatchOutcome::kRefused:  // only a streaming list is refused
        if (!workqueue::SleepUntil(clock_, clock_.Now() + backoff_.Next(), stop)) return;
        break;
    }
  }
}

std::optional<std::string> Informer::ListOnce(std::stop_token stop, bool from_cache) {
  ListOptions list_options;
  if (from_cache) list_options.resource_version = "0";
  list_options.label_selector = options_.label_selector;
  list_options.field_selector = options_.field_selector;
  Replaced replaced;
  ListVisitor visitor;
  visitor.on_item = [&](nlohmann::json& item) {
    common::StatusOr<std::string> key = ObjectKey(item);
    if (!key.ok()) {
      LOG_WARNING("list item skipped", {{"informer", options_.description}, {"err", key.status()}});
      return;
    }
    replaced.items.push_back(store_.Prepare(*std::move(key), item));
  };
  visitor.on_restart = [&] { replaced.items.clear(); };
  common::StatusOr<std::string> result = list_watch_->ListEach(list_options, stop, visitor);
  if (stop.stop_requested()) return std::nullopt;
  if (!result.ok()) {
    LOG_WARNING("list failed", {{"informer", options_.description}, {"err", result.status()}});
    return std::nullopt;
  }
  if (result->empty()) {
    // Watching from "" would start at "now" and silently skip whatever
    // changed since the list.
    LOG_WARNING("list has no resourceVersion", {{"informer", options_.description}});
    return std::nullopt;
  }
  replaced.items.shrink_to_fit();
  replaced.resource_version = *std::move(result);
  LOG_INFO(3, "listed", {{"informer", options_.description},
                         {"objects", replaced.items.size()},
                         {"resourceVersion", replaced.resource_version}});
  std::string resource_version = replaced.resource_version;
  Enqueue(std::move(replaced));
  return resource_version;
}

Informer::WatchOutcome Informer::WatchOnce(std::string& resource_version, std::stop_token stop,
                                           bool initial_events) {
  WatchOptions watch_options;
  watch_options.label_selector = options_.label_selector;
  watch_options.field_selector = options_.field_selector;
  watch_options.resource_version = resource_version;
  watch_options.allow_bookmarks = true;
  watch_options.send_initial_events = initial_events;
  // The streaming list's objects, until the bookmark that ends them.
  Replaced initial;
  const auto base = options_.watch_timeout.count();
  watch_options.timeout = std::chrono::seconds(
      base + static_cast<std::int64_t>(static_cast<double>(base) * DrawRandom()));

  common::StatusOr<std::unique_ptr<WatchStream>> stream = list_watch_->Watch(watch_options, stop);
  if (stop.stop_requested()) return WatchOutcome::kStopped;
  if (!stream.ok()) {
    if (IsGone(stream.status())) return WatchOutcome::kGone;
    if (initial_events && stream.status().code() == common::StatusCode::kInvalidArgument) {
      LOG_INFO(1, "the API server does not serve streaming lists; listing and watching",
               {{"informer", options_.description}, {"err", stream.status()}});
      return WatchOutcome::kRefused;
    }
    LOG_WARNING("watch failed", {{"informer", options_.description}, {"err", stream.status()}});
    return WatchOutcome::kFailed;
  }

  const workqueue::TimePoint started = clock_.Now();
  bool delivered = false;
  while (true) {
    common::StatusOr<std::optional<WatchEvent>> next = (*stream)->Next(stop);
    if (stop.stop_requested()) return WatchOutcome::kStopped;
    if (!next.ok()) {
      if (IsGone(next.status())) return WatchOutcome::kGone;
      LOG_WARNING("watch broke", {{"informer", options_.description}, {"err", next.status()}});
      return WatchOutcome::kFailed;
    }
    if (!next->has_value()) {
      if (delivered || clock_.Now() - started >= options_.min_watch_duration) {
        LOG_INFO(4, "watch ended", {{"informer", options_.description},
                                    {"resourceVersion", resource_version}});
        return WatchOutcome::kEnded;
      }
      LOG_WARNING("watch ended at once with no events", {{"informer", options_.description}});
      return WatchOutcome::kFailed;
    }
    WatchEvent& event = **next;
    if (event.type == WatchEventType::kError) {
      const common::Status status = WatchErrorToStatus(event.object);
      if (IsGone(status)) return WatchOutcome::kGone;
      if (initial_events && status.code() == common::StatusCode::kInvalidArgument) {
        LOG_INFO(1, "the API server does not serve streaming lists; listing and watching",
                 {{"informer", options_.description}, {"err", status}});
        return WatchOutcome::kRefused;
      }
      LOG_WARNING("watch error event", {{"informer", options_.description}, {"err", status}});
      return WatchOutcome::kFailed;
    }
    delivered = true;
    backoff_.Reset();
    std::string event_version = ObjectResourceVersion(event.object);
    if (initial_events) {
      if (event.type == WatchEventType::kBookmark) {
        if (!IsInitialEventsEnd(event.object)) continue;
        if (event_version.empty()) {
          LOG_WARNING("streaming list ended without a resourceVersion", {{"informer", options_.description}});
          return WatchOutcome::kFailed;
        }
        initial.items.shrink_to_fit();
        initial.resource_version = event_version;
        LOG_INFO(3, "listed (streaming)", {{"informer", options_.description},
                                          {"objects", initial.items.size()},
                                          {"resourceVersion", event_version}});
        Enqueue(std::move(initial));
        initial_events = false;
        resource_version = std::move(event_version);
        continue;
      }
      if (event.type != WatchEventType::kAdded) {
        LOG_WARNING("streaming list sent a change before its end", {{"informer", options_.description},
                                                                    {"type", WatchEventTypeName(event.type)}});
        return WatchOutcome::kFailed;
      }
      common::StatusOr<std::string> key = ObjectKey(event.object);
      if (!key.ok()) {
        LOG_WARNING("list item skipped", {{"informer", options_.description}, {"err", key.status()}});
        continue;
      }
      initial.items.push_back(store_.Prepare(*std::move(key), event.object));
      continue;
    }
    if (!event_version.empty()) resource_version = event_version;
    if (event.type == WatchEventType::kBookmark) {
      if (!event_version.empty()) Enqueue(Bookmarked{std::move(event_version)});
      continue;
    }
    common::StatusOr<std::string> key = ObjectKey(event.object);
    if (!key.ok()) {
      LOG_WARNING("watch event skipped", {{"informer", options_.description}, {"err", key.status()}});
      continue;
    }
    auto object = std::make_shared<const nlohmann::json>(std::move(event.object));
    StoreItem item;
    if (event.type != WatchEventType::kDeleted) item = store_.Prepare(*key, object);
    Enqueue(Changed{event.type, *std::move(key), std::move(object), std::move(item)});
  }
}

void Informer::Enqueue(Pending pending) {
  {
    common::MutexLock lock(pending_mutex_);
    pending_.push_back(std::move(pending));
  }
  pending_changed_.notify_all();
}

// --- Dispatch thread -----------------------------------------------------------

void Informer::RunDispatchLoop(std::stop_token stop) {
  std::deque<Pending> batch;
  while (true) {
    {
      common::MutexLock lock(pending_mutex_);
      pending_changed_.wait(lock.native(), stop, [&]() REQUIRES(pending_mutex_) { return !pending_.empty(); });
      if (stop.stop_requested()) return;
      batch.swap(pending_);
    }
    for (Pending& pending : batch) {
      if (stop.stop_requested()) return;
      Dispatch(pending);
    }
    batch.clear();
  }
}

void Informer::Dispatch(Pending& pending) {
  if (auto* replaced = std::get_if<Replaced>(&pending)) {
    std::vector<Delta> deltas =
        store_.Replace(std::move(replaced->items), std::move(replaced->resource_version));
    for (const Delta& delta : deltas) {
      Deliver(delta.type, delta.old_object, delta.new_object, nullptr);
    }
    if (!list_applied_) {
      list_applied_ = true;
      {
        common::MutexLock lock(pending_mutex_);
        synced_ = true;
      }
      synced_changed_.notify_all();
    }
  } else if (auto* changed = std::get_if<Changed>(&pending)) {
    // The Store (its resourceVersion included) is updated before handlers
    // run, so a handler reading it sees the change it is told about.
    std::string version = ObjectResourceVersion(*changed->object);
    PackedPtr old;
    std::optional<DeltaType> delta;
    if (changed->type == WatchEventType::kDeleted) {
      old = store_.Remove(changed->key);
      if (old != nullptr) delta = DeltaType::kDeleted;
    } else {
      old = store_.GetPacked(changed->key);
      if (old == nullptr || !SameVersion(*old, *changed->item.object)) {
        store_.Put(std::move(changed->item));
        delta = old == nullptr ? DeltaType::kAdded : DeltaType::kUpdated;
      }
    }
    if (!version.empty()) store_.SetResourceVersion(std::move(version));
    // A watch delete carries the final state: handlers get it, not the
    // cached one.
    if (delta) Deliver(*delta, old, nullptr, changed->object);
  } else if (auto* bookmarked = std::get_if<Bookmarked>(&pending)) {
    store_.SetResourceVersion(std::move(bookmarked->resource_version));
  } else if (auto* registered = std::get_if<Registered>(&pending)) {
    if (list_applied_ && registered->handler.on_add) {
      for (const ObjectPtr& object : store_.List()) registered->handler.on_add(object);
    }
    handlers_.push_back(std::move(registered->handler));
  }
}

void Informer::Deliver(DeltaType type, const PackedPtr& old_object, const PackedPtr& new_packed,
                       ObjectPtr new_object) {
  static const ObjectPtr kNoObject;
  LazyObject old_lazy(old_object, nullptr);
  LazyObject new_lazy(new_packed, std::move(new_object));
  for (const EventHandler& handler : handlers_) {
    switch (type) {
      case DeltaType::kAdded:
        if (handler.on_add) handler.on_add(new_lazy.get());
        break;
      case DeltaType::kUpdated:
        if (handler.on_update) {
          handler.on_update(handler.needs_old_object ? old_lazy.get() : kNoObject, new_lazy.get());
        }
        break;
      case DeltaType::kDeleted:
        // A watch delete carries the final state; a relist delete only the
        // last cached one (there is no new object then).
        if (handler.on_delete) {
          const ObjectPtr& now = new_lazy.get();
          handler.on_delete(now != nullptr ? now : old_lazy.get());
        }
        break;
    }
  }
}

}  // namespace nvdra::k8s::cache
