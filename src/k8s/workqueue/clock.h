#pragma once

// A monotonic clock that can also wait, so that delays (work-queue AddAfter,
// per-item backoff, informer reconnect backoff) can be driven by a test
// without sleeping. Defines: Clock, RealClock(), FakeClock.
//
// Why not only Now(): a component that waits "until time T or until something
// changes" must be woken when a fake clock moves, so the wait itself goes
// through the clock.
//
// Ownership: a Clock is borrowed by whoever uses it and must outlive them;
// RealClock() lives for the whole process.
// Thread-safety: thread-safe (FakeClock too: a test advances it from one
// thread while the code under test waits on it in another).

#include <chrono>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <stop_token>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace nvdra::k8s::workqueue {

using TimePoint = std::chrono::steady_clock::time_point;
using Duration = std::chrono::steady_clock::duration;

class Clock {
 public:
  virtual ~Clock() = default;

  virtual TimePoint Now() const = 0;

  // Blocks until `pred()` holds, Now() >= `deadline`, or `stop` is requested,
  // and returns pred() as last evaluated. `lock` must hold the mutex that
  // guards pred's state (a predicate reading guarded members says so:
  // `[&]() REQUIRES(mu_) {...}`); whoever changes that state notifies `cv`
  // while (or after) holding that mutex. Like any condition-variable wait,
  // `lock` may be released and re-taken in between, so the caller's
  // invariants must hold on entry. TimePoint::max() means no deadline.
  virtual bool WaitUntil(std::condition_variable_any& cv, common::MutexLock& lock,
                         TimePoint deadline, std::stop_token stop,
                         const std::function<bool()>& pred) = 0;
};

// std::chrono::steady_clock.
Clock& RealClock();

// Waits on `clock` until `deadline` or until `stop` is requested, whichever
// comes first. Returns false when stopped. The backoff sleep of a retry loop.
bool SleepUntil(Clock& clock, TimePoint deadline, std::stop_token stop);

// A clock that moves only when told to. Starts at an arbitrary fixed point.
// Waiters are woken by Advance(); tests use WaitForPendingDeadline() to learn that the
// code under test is parked on the clock before moving it.
class FakeClock final : public Clock {
 public:
  FakeClock() = default;
  FakeClock(const FakeClock&) = delete;
  FakeClock& operator=(const FakeClock&) = delete;

  TimePoint Now() const override;
  // Unchecked: it releases and retakes the caller's `lock`, which the
  // analysis cannot name in a parameter's annotation.
  bool WaitUntil(std::condition_variable_any& cv, common::MutexLock& lock,
                 TimePoint deadline, std::stop_token stop,
                 const std::function<bool()>& pred) override NO_THREAD_SAFETY_ANALYSIS;

  // Moves time forward by `by` (negative values are ignored) and wakes every
  // waiter so it re-checks its deadline.
  void Advance(Duration by) EXCLUDES(waiters_mutex_);

  // Blocks (in real time, up to `real_timeout`) until some thread waits on
  // this clock for a deadline later than Now(), and returns the earliest such
  // deadline; nullopt on timeout. Tests call it to learn that the code under
  // test is parked on the clock, and until when, before advancing it.
  std::optional<TimePoint> WaitForPendingDeadline(std::chrono::milliseconds real_timeout) EXCLUDES(waiters_mutex_);

 private:
  struct Waiter {
    std::mutex* mutex;
    std::condition_variable_any* cv;
    TimePoint deadline;
  };
  void Register(Waiter* waiter) EXCLUDES(waiters_mutex_);
  void Unregister(Waiter* waiter) EXCLUDES(waiters_mutex_);

  std::atomic<Duration::rep> now_{std::chrono::duration_cast<Duration>(std::chrono::hours(1000)).count()};
  // Guards waiters_. Lock order: waiters_mutex_ before a waiter's own mutex
  // (Advance); a waiter never holds its mutex while taking waiters_mutex_.
  mutable common::Mutex waiters_mutex_;
  std::condition_variable waiters_changed_;
  std::vector<Waiter*> waiters_ GUARDED_BY(waiters_mutex_);
};

}  // namespace nvdra::k8s::workqueue
