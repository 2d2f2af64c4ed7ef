#include "k8s/flow_control.h"

#include <algorithm>

#include "k8s/api_error.h"

namespace nvdra::k8s {

using common::Status;

RequestRateLimiter::RequestRateLimiter(double qps, int burst, workqueue::Clock& clock)
    : clock_(clock), bucket_(qps, static_cast<std::uint32_t>(std::max(burst, 1)), clock.Now()) {}

workqueue::Duration RequestRateLimiter::Reserve() {
  common::MutexLock lock(mutex_);
  return bucket_.Reserve(clock_.Now());
}

Status RequestRateLimiter::Acquire(std::stop_token stop) {
  const auto delay = Reserve();
  if (delay.count() > 0 && !workqueue::SleepUntil(clock_, clock_.Now() + delay, stop)) {
    return common::CancelledError("rate limiter wait cancelled");
  }
  return common::OkStatus();
}

Status RetryOnConflict(const ConflictRetry& retry, const std::function<Status()>& fn, std::stop_token stop,
                       workqueue::Clock& clock) {
  workqueue::Backoff backoff(retry.backoff);
  Status last;
  for (int attempt = 0; attempt < std::max(retry.steps, 1); ++attempt) {
    if (attempt > 0 && !workqueue::SleepUntil(clock, clock.Now() + backoff.Next(), stop)) {
      return common::CancelledError("retry on conflict cancelled");
    }
    last = fn();
    if (!IsConflict(last)) return last;
  }
  return last;
}

}  // namespace nvdra::k8s
