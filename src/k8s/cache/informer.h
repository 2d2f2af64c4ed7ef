#pragma once

// An informer keeps a Store in step with the API server for one resource
// type and selector, and tells event handlers what changed.
// Defines: EventHandler, InformerOptions, Informer.
//
// How it follows the server (dra-wire-facts.md section 6):
//  - List (a quorum read), then watch from the list's resourceVersion with
//    bookmarks. Or, with InformerOptions::streaming_list, both in one request:
//    a watch whose initial events are the list. The last resourceVersion seen, bookmarks included, is where
//    the next watch starts; a bookmark is never a change.
//  - When the server ends a watch normally, watch again from that version.
//  - On 410 Gone (as an HTTP answer or an ERROR event), list again and
//    deliver exactly the difference to the cache: adds for new objects,
//    updates where the resourceVersion changed, deletes (with the last cached
//    object) for objects that disappeared meanwhile.
//  - Any other error: wait a jittered exponential backoff, then retry (a
//    watch from the last version, or the list if there was none yet). The
//    backoff resets once a list succeeds or a watch delivers an event.
//
// Threads: two, owned and joined by the informer. The watch thread talks to
// the API server and packs what it reads for the Store (running the index
// functions; a list is packed item by item as it is read, so it is never
// held whole as JSON trees); the dispatch thread applies what it read to the Store and
// then calls handlers, so a handler sees the Store already holding the
// change. Handlers run on the dispatch thread, one call at a time, in event
// order, with no lock held; they may read the Store and call
// AddEventHandler, but must not block for long (events queue up behind them,
// without bound) and must not throw. A handler added late (after objects
// were cached) first receives a synthetic add for every cached object, in
// order with later events: nothing twice, nothing missed.
//
// Ownership: owns its ListWatch, Store and threads; borrows the Clock, which
// must outlive it. Thread-safety: thread-safe.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "k8s/cache/list_watch.h"
#include "k8s/cache/store.h"
#include "k8s/workqueue/backoff.h"
#include "k8s/workqueue/clock.h"

namespace nvdra::k8s::cache {

// Any member may be empty. For a delete seen on the watch, the object is the
// final state the server sent; for one found by a relist after 410, the last
// state this cache knew.
struct EventHandler {
  std::function<void(const ObjectPtr& object)> on_add;
  std::function<void(const ObjectPtr& old_object, const ObjectPtr& new_object)> on_update;
  std::function<void(const ObjectPtr& last_known)> on_delete;
  // The cache keeps objects packed, so on_update's old_object is decoded for
  // the call (about as costly as parsing the event: a third of an update's
  // CPU when nothing else is done). A handler that never reads it sets this
  // false and gets null instead; when no handler wants it, it is not decoded.
  bool needs_old_object = true;
};

struct InformerOptions {
  // Names the informer in logs, e.g. "resource.k8s.io/v1/resourceslices".
  std::string description;
  std::string label_selector;
  std::string field_selector;
  // List first with resourceVersion "0" (any version the API server's watch
  // cache holds, served without paging through etcd), as client-go does; the
  // watch that follows brings the cache up to date. Relists after a 410 are
  // quorum reads either way.
  bool first_list_from_watch_cache = true;
  // List through a watch (WatchList, "streaming list"; on by default in
  // Kubernetes 1.34 and later, as in client-go): the server sends every
  // object as an ADDED event, then a bookmark that ends the initial events,
  // then changes, so that one request does what a list and a watch do. For a
  // component that starts with the workload (an IMEX daemon) that is one API
  // request less per node. A server that refuses it (400 or 422: the WatchList
  // gate off) is listed and watched as usual for the informer's lifetime.
  bool streaming_list = false;
  // Each watch asks the server to end it after a random time in
  // [watch_timeout, 2 * watch_timeout), so that reconnects of many clients
  // spread out (client-go does the same, 5 to 10 minutes).
  std::chrono::seconds watch_timeout{300};
  // A watch that ends sooner than this having delivered nothing counts as a
  // failure (backoff), so a server closing watches at once is not hammered.
  workqueue::Duration min_watch_duration = std::chrono::seconds(1);
  workqueue::BackoffOptions reconnect_backoff{std::chrono::milliseconds(800),
                                              std::chrono::seconds(30), 2.0, 1.0};
  std::vector<Indexer> indexers = DefaultIndexers();
  // Borrowed; must outlive the informer.
  workqueue::Clock* clock = &workqueue::RealClock();
  // Jitter for the backoff and watch timeouts; called on the watch thread.
  // Empty means workqueue::DefaultRandomSource().
  workqueue::RandomSource random;
};

class Informer {
 public:
  // A null `list_watch` is a programmer error and aborts.
  Informer(std::unique_ptr<ListWatch> list_watch, InformerOptions options);
  // Stop().
  ~Informer();
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  // Registers `handler`, before or after Start(). See the file comment for
  // the synthetic adds a late handler gets. Handlers cannot be removed; they
  // live as long as the informer.
  void AddEventHandler(EventHandler handler);

  // Starts both threads. Calling it again, or after Stop(), does nothing.
  void Start() EXCLUDES(pending_mutex_);

  // Stops and joins both threads; events not yet dispatched are dropped. Must
  // not be called from a handler. Idempotent.
  void Stop() EXCLUDES(pending_mutex_);

  // True once the first list is in the Store and every handler registered by
  // then has received its adds.
  bool HasSynced() const EXCLUDES(pending_mutex_);

  // Blocks until HasSynced() or `stop` is requested; returns HasSynced().
  bool WaitForSync(std::stop_token stop) const EXCLUDES(pending_mutex_);
  // Blocks until HasSynced() or `deadline` on the informer's clock; returns
  // HasSynced().
  bool WaitForSyncUntil(workqueue::TimePoint deadline) const EXCLUDES(pending_mutex_);

  // The cache. Readers may use it from any thread.
  const Store& store() const { return store_; }

  const InformerOptions& options() const { return options_; }

 private:
  // What the watch thread hands the dispatch thread.
  // Objects arrive prepared (packed and indexed) by the watch thread, so the
  // dispatch thread only swaps them in.
  struct Replaced {  // a (re)list result
    std::vector<StoreItem> items;
    std::string resource_version;
  };
  struct Changed {  // an ADDED, MODIFIED or DELETED watch event
    WatchEventType type;
    std::string key;
    ObjectPtr object;  // the event's object, for handlers
    StoreItem item;    // `object` prepared; empty for DELETED
  };
  struct Bookmarked {
    std::string resource_version;
  };
  struct Registered {
    EventHandler handler;
  };
  using Pending = std::variant<Replaced, Changed, Bookmarked, Registered>;

  // kRefused: the server does not serve streaming lists.
  enum class WatchOutcome { kStopped, kEnded, kFailed, kGone, kRefused };

  void RunWatchLoop(std::stop_token stop);
  // Lists and queues the result; returns its resourceVersion, or nullopt on
  // error (logged) or stop.
  // `from_cache`: resourceVersion "0", which the API server answers from its
  // watch cache in one piece, as client-go's reflector does for its first
  // list; otherwise a quorum read (after a 410 the cache may be behind).
  std::optional<std::string> ListOnce(std::stop_token stop, bool from_cache);
  // Watches from `resource_version` (updated as events arrive) until the
  // stream ends, fails, or reports Gone. With `initial_events`, a streaming
  // list: `resource_version` is empty, and set (the list queued) once the
  // initial events end; it stays empty if the stream ends before that.
  WatchOutcome WatchOnce(std::string& resource_version, std::stop_token stop, bool initial_events = false);
  void Enqueue(Pending pending) EXCLUDES(pending_mutex_);
  // A draw in [0, 1) from random_.
  double DrawRandom() { return random_(); }

  void RunDispatchLoop(std::stop_token stop);
  void Dispatch(Pending& pending);
  // Unpacks old and new objects only when a handler is given them.
  void Deliver(DeltaType type, const PackedPtr& old_object, const PackedPtr& new_packed,
               ObjectPtr new_object);

  const InformerOptions options_;
  workqueue::Clock& clock_;
  const std::unique_ptr<ListWatch> list_watch_;
  Store store_;

  // Confined to the watch thread.
  workqueue::RandomSource random_;
  workqueue::Backoff backoff_;
  bool streaming_refused_ = false;

  // Confined to the dispatch thread.
  std::vector<EventHandler> handlers_;
  bool list_applied_ = false;

  mutable common::Mutex pending_mutex_;  // guards the members below
  mutable std::condition_variable_any pending_changed_;
  mutable std::condition_variable_any synced_changed_;
  std::deque<Pending> pending_ GUARDED_BY(pending_mutex_);
  bool synced_ GUARDED_BY(pending_mutex_) = false;
  bool started_ GUARDED_BY(pending_mutex_) = false;
  bool stopped_ GUARDED_BY(pending_mutex_) = false;

  // Last, so they stop before the state they use is destroyed.
  std::jthread dispatch_thread_;
  std::jthread watch_thread_;
};

}  // namespace nvdra::k8s::cache
