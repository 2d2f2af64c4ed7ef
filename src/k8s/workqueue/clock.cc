#include "k8s/workqueue/clock.h"

#include <algorithm>
#include <mutex>

namespace nvdra::k8s::workqueue {
namespace {

class SteadyClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }

  bool WaitUntil(std::condition_variable_any& cv, common::MutexLock& lock,
                 TimePoint deadline, std::stop_token stop,
                 const std::function<bool()>& pred) override {
    // Converting TimePoint::max() to the wait's native clock can overflow, so
    // "no deadline" takes the untimed wait.
    if (deadline == TimePoint::max()) return cv.wait(lock.native(), stop, pred);
    return cv.wait_until(lock.native(), stop, deadline, pred);
  }
};

}  // namespace

Clock& RealClock() {
  static SteadyClock clock;
  return clock;
}

bool SleepUntil(Clock& clock, TimePoint deadline, std::stop_token stop) {
  common::Mutex mutex;
  std::condition_variable_any cv;
  common::MutexLock lock(mutex);
  clock.WaitUntil(cv, lock, deadline, stop, [] { return false; });
  return !stop.stop_requested();
}

TimePoint FakeClock::Now() const {
  return TimePoint(Duration(now_.load(std::memory_order_acquire)));
}

bool FakeClock::WaitUntil(std::condition_variable_any& cv, common::MutexLock& lock,
                          TimePoint deadline, std::stop_token stop,
                          const std::function<bool()>& pred) {
  if (pred()) return true;
  Waiter waiter{lock.native().mutex(), &cv, deadline};
  // Registering needs waiters_mutex_, which must never be taken while the
  // caller's mutex is held (Advance takes them in the other order).
  lock.Unlock();
  Register(&waiter);
  lock.Lock();
  cv.wait(lock.native(), stop, [&] { return pred() || Now() >= deadline; });
  lock.Unlock();
  Unregister(&waiter);
  lock.Lock();
  return pred();
}

void FakeClock::Advance(Duration by) {
  if (by <= Duration::zero()) return;
  now_.fetch_add(by.count(), std::memory_order_acq_rel);
  common::MutexLock waiters_lock(waiters_mutex_);
  // Taking each waiter's mutex before notifying closes the window between
  // its predicate check and its wait; holding waiters_mutex_ keeps the waiter
  // (and so its mutex and cv) registered and alive meanwhile.
  for (Waiter* waiter : waiters_) {
    { std::lock_guard waiter_lock(*waiter->mutex); }
    waiter->cv->notify_all();
  }
}

std::optional<TimePoint> FakeClock::WaitForPendingDeadline(std::chrono::milliseconds real_timeout) {
  common::MutexLock lock(waiters_mutex_);
  TimePoint earliest = TimePoint::max();
  auto pending = [&]() REQUIRES(waiters_mutex_) {
    const TimePoint now = Now();
    earliest = TimePoint::max();
    for (const Waiter* waiter : waiters_) {
      if (waiter->deadline > now && waiter->deadline != TimePoint::max()) {
        earliest = std::min(earliest, waiter->deadline);
      }
    }
    return earliest != TimePoint::max();
  };
  if (!waiters_changed_.wait_for(lock.native(), real_timeout, pending)) return std::nullopt;
  return earliest;
}

void FakeClock::Register(Waiter* waiter) {
  {
    common::MutexLock lock(waiters_mutex_);
    waiters_.push_back(waiter);
  }
  waiters_changed_.notify_all();
}

void FakeClock::Unregister(Waiter* waiter) {
  {
    common::MutexLock lock(waiters_mutex_);
    std::erase(waiters_, waiter);
  }
  waiters_changed_.notify_all();
}

}  // namespace nvdra::k8s::workqueue
