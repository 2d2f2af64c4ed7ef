#pragma once

// The queue between informer event handlers and controller workers: items
// (usually "namespace/name" keys) wait here until a worker takes them.
// Defines: WorkQueueOptions, WorkQueue<T, Hash>.
//
// Guarantees, as controllers expect them:
//  - De-duplication: an item added several times before a worker takes it is
//    handed out once.
//  - In flight: an item handed out and not yet Done() is never handed out
//    again; adding it meanwhile marks it dirty, and Done() queues it again.
//    So no two workers ever process the same item concurrently.
//  - Delays: AddAfter() holds an item until its time (the earliest of several
//    pending delays wins); AddRateLimited() delays by the item's backoff (see
//    rate_limiter.h) and counts a requeue; Forget() resets that count.
//  - Shutdown: ShutDown() refuses new items and drops delayed ones; Get()
//    still hands out what is already queued, then returns nullopt.
//    ShutDownWithDrain() also waits for in-flight items to be Done().
// The queue needs no thread of its own: delayed items are moved to the ready
// queue by whichever Get() call is waiting, woken at the item's time through
// the injected Clock.
//
// Ownership: owns copies of its items; borrows the Clock, which must outlive
// the queue. Thread-safety: thread-safe.

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <stop_token>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "k8s/workqueue/backoff.h"
#include "k8s/workqueue/clock.h"
#include "k8s/workqueue/rate_limiter.h"

namespace nvdra::k8s::workqueue {

struct WorkQueueOptions {
  RateLimits limits = DefaultControllerRateLimits();
  // Borrowed; must outlive the queue.
  Clock* clock = &RealClock();
  // Jitter draws for AddRateLimited; called under the queue's mutex. Empty
  // means DefaultRandomSource().
  RandomSource random;
};

template <typename T, typename Hash = std::hash<T>>
class WorkQueue {
 public:
  explicit WorkQueue(WorkQueueOptions options = {})
      : clock_(options.clock != nullptr ? options.clock : &RealClock()),
        per_item_(options.limits.per_item),
        random_(options.random ? std::move(options.random) : DefaultRandomSource()),
        bucket_(options.limits.qps, options.limits.burst, clock_->Now()) {}
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `item` unless it is already queued. After shutdown, does nothing.
  void Add(const T& item) EXCLUDES(state_mutex_) {
    {
      common::MutexLock lock(state_mutex_);
      AddLocked(item);
    }
    state_changed_.notify_all();
  }

  // Queues `item` once `delay` has passed on the clock; a delay <= 0 is Add().
  // If the item already waits for a later time, the earlier time wins.
  void AddAfter(const T& item, Duration delay) EXCLUDES(state_mutex_) {
    {
      common::MutexLock lock(state_mutex_);
      AddAfterLocked(item, delay);
    }
    state_changed_.notify_all();
  }

  // AddAfter() with the item's next backoff delay (the larger of its
  // per-item backoff and the overall bucket's wait); counts one requeue.
  void AddRateLimited(const T& item) EXCLUDES(state_mutex_) {
    {
      common::MutexLock lock(state_mutex_);
      if (shutting_down_) return;
      std::uint32_t& requeues = requeues_[item];
      Duration delay = BackoffDelay(per_item_, requeues, random_());
      if (requeues < UINT32_MAX) ++requeues;
      delay = std::max(delay, bucket_.Reserve(clock_->Now()));
      AddAfterLocked(item, delay);
    }
    state_changed_.notify_all();
  }

  // Clears the item's requeue count, so its next failure starts the backoff
  // again. Does not remove it from the queue. Call after a success.
  void Forget(const T& item) EXCLUDES(state_mutex_) {
    common::MutexLock lock(state_mutex_);
    requeues_.erase(item);
  }

  // AddRateLimited() calls since the last Forget().
  std::uint32_t NumRequeues(const T& item) const EXCLUDES(state_mutex_) {
    common::MutexLock lock(state_mutex_);
    auto it = requeues_.find(item);
    return it == requeues_.end() ? 0 : it->second;
  }

  // Blocks until an item is ready and returns it, marking it in flight; the
  // caller must call Done(item) when finished with it. Returns nullopt when
  // the queue is shut down and empty, or when `stop` is requested while no
  // item is ready (a ready item is still handed out).
  std::optional<T> Get(std::stop_token stop) EXCLUDES(state_mutex_) {
    common::MutexLock lock(state_mutex_);
    while (true) {
      PromoteDueLocked();
      if (!queue_.empty()) {
        T item = std::move(queue_.front());
        queue_.pop_front();
        dirty_.erase(item);
        processing_.insert(item);
        return item;
      }
      if (shutting_down_ || stop.stop_requested()) return std::nullopt;
      const std::uint64_t seen = changes_;
      const TimePoint deadline = waiting_by_time_.empty() ? TimePoint::max()
                                                          : waiting_by_time_.begin()->first;
      clock_->WaitUntil(state_changed_, lock, deadline, stop, [&]() REQUIRES(state_mutex_) {
        return changes_ != seen || shutting_down_;
      });
    }
  }

  // Ends the processing of `item` taken by Get(). If it was added meanwhile,
  // it is queued again now. Done() for an item not in flight does nothing.
  void Done(const T& item) EXCLUDES(state_mutex_) {
    {
      common::MutexLock lock(state_mutex_);
      if (processing_.erase(item) == 0) return;
      if (dirty_.contains(item)) queue_.push_back(item);
      ++changes_;
    }
    state_changed_.notify_all();
  }

  // Stops accepting items and drops delayed ones; wakes blocked Get() calls,
  // which hand out the items still queued and then return nullopt.
  void ShutDown() EXCLUDES(state_mutex_) {
    {
      common::MutexLock lock(state_mutex_);
      shutting_down_ = true;
      waiting_by_time_.clear();
      waiting_.clear();
      ++changes_;
    }
    state_changed_.notify_all();
  }

  // ShutDown(), then blocks until every queued item has been handed out and
  // Done() (nothing queued or in flight), or until `stop` is
  // requested. Returns true when drained. Workers must keep calling Get() and
  // Done() for queued items to drain.
  bool ShutDownWithDrain(std::stop_token stop) EXCLUDES(state_mutex_) {
    ShutDown();
    common::MutexLock lock(state_mutex_);
    return clock_->WaitUntil(state_changed_, lock, TimePoint::max(), stop,
                             [&]() REQUIRES(state_mutex_) { return processing_.empty() && queue_.empty(); });
  }

  bool ShuttingDown() const EXCLUDES(state_mutex_) {
    common::MutexLock lock(state_mutex_);
    return shutting_down_;
  }

  // Items ready to be handed out (not those in flight or still delayed).
  // Delayed items whose time has come count as ready.
  std::size_t Len() EXCLUDES(state_mutex_) {
    common::MutexLock lock(state_mutex_);
    PromoteDueLocked();
    return queue_.size();
  }

  // Items still waiting for their AddAfter() time.
  std::size_t NumWaiting() EXCLUDES(state_mutex_) {
    common::MutexLock lock(state_mutex_);
    PromoteDueLocked();
    return waiting_.size();
  }

 private:
  using WaitingByTime = std::multimap<TimePoint, T>;

  void AddLocked(const T& item) REQUIRES(state_mutex_) {
    if (shutting_down_ || dirty_.contains(item)) return;
    dirty_.insert(item);
    ++changes_;
    // An item in flight is queued again by Done(), never handed out twice.
    if (!processing_.contains(item)) queue_.push_back(item);
  }

  void AddAfterLocked(const T& item, Duration delay) REQUIRES(state_mutex_) {
    if (shutting_down_) return;
    if (delay <= Duration::zero()) {
      AddLocked(item);
      return;
    }
    const TimePoint ready = clock_->Now() + delay;
    auto it = waiting_.find(item);
    if (it != waiting_.end()) {
      if (it->second->first <= ready) return;
      waiting_by_time_.erase(it->second);
      waiting_.erase(it);
    }
    waiting_.emplace(item, waiting_by_time_.emplace(ready, item));
    ++changes_;
  }

  // Moves delayed items whose time has come into the ready queue.
  void PromoteDueLocked() REQUIRES(state_mutex_) {
    const TimePoint now = clock_->Now();
    while (!waiting_by_time_.empty() && waiting_by_time_.begin()->first <= now) {
      auto first = waiting_by_time_.begin();
      T item = std::move(first->second);
      waiting_.erase(item);
      waiting_by_time_.erase(first);
      AddLocked(item);
    }
  }

  Clock* const clock_;
  const BackoffOptions per_item_;

  mutable common::Mutex state_mutex_;  // guards everything below
  std::condition_variable_any state_changed_;
  RandomSource random_ GUARDED_BY(state_mutex_);
  TokenBucket bucket_ GUARDED_BY(state_mutex_);
  std::deque<T> queue_ GUARDED_BY(state_mutex_);
  std::unordered_set<T, Hash> dirty_ GUARDED_BY(state_mutex_);       // queued or to be requeued on Done()
  std::unordered_set<T, Hash> processing_ GUARDED_BY(state_mutex_);  // handed out, not yet Done()
  WaitingByTime waiting_by_time_ GUARDED_BY(state_mutex_);
  std::unordered_map<T, typename WaitingByTime::iterator, Hash> waiting_ GUARDED_BY(state_mutex_);
  std::unordered_map<T, std::uint32_t, Hash> requeues_ GUARDED_BY(state_mutex_);
  std::uint64_t changes_ GUARDED_BY(state_mutex_) = 0;  // bumped on every change a waiting Get() must see
  bool shutting_down_ GUARDED_BY(state_mutex_) = false;
};

}  // namespace nvdra::k8s::workqueue
