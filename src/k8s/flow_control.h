#pragma once

// Client-side flow control for API requests: a thread-safe rate limiter (QPS
// and burst) and RetryOnConflict. The token bucket, backoff and clock are the
// work queue's (k8s/workqueue), shared rather than copied.
//
// Defines: RequestRateLimiter, ConflictRetry, kDefaultConflictRetry,
// RetryOnConflict.
//
// Ownership: RequestRateLimiter borrows its clock, which must outlive it.
// Thread-safety: RequestRateLimiter is thread-safe; the rest are values and
// re-entrant functions.

#include <chrono>
#include <cstdint>
#include <functional>
#include <stop_token>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "k8s/workqueue/backoff.h"
#include "k8s/workqueue/clock.h"
#include "k8s/workqueue/rate_limiter.h"

namespace nvdra::k8s {

// Requests may start at `qps` per second on average, with bursts of up to
// `burst` after a quiet period (client-go's default is 5 and 10). Waiters
// queue in arrival order: each takes a reservation and waits it out.
class RequestRateLimiter {
 public:
  // qps <= 0 means unlimited. burst < 1 counts as 1.
  RequestRateLimiter(double qps, int burst, workqueue::Clock& clock = workqueue::RealClock());

  // Takes one token; returns how long the caller must wait before using it.
  workqueue::Duration Reserve() EXCLUDES(mutex_);

  // Reserve() and wait it out on the clock. kCancelled when `stop` fires first
  // (the token is not given back: rare, and it keeps this simple).
  common::Status Acquire(std::stop_token stop);

 private:
  workqueue::Clock& clock_;
  common::Mutex mutex_;  // guards bucket_
  workqueue::TokenBucket bucket_ GUARDED_BY(mutex_);
};

// How RetryOnConflict paces its attempts.
struct ConflictRetry {
  workqueue::BackoffOptions backoff;
  int steps = 5;  // attempts in all, including the first
};

// client-go's retry.DefaultRetry: 5 tries about 10 ms apart (10% jitter).
inline const ConflictRetry kDefaultConflictRetry{
    {std::chrono::milliseconds(10), std::chrono::milliseconds(10), 1.0, 0.1}, 5};

// Runs `fn` (a whole read-modify-write: GET, change, PUT) until it returns
// anything but a conflict (kAborted), at most retry.steps times, waiting on
// `clock` between tries. Returns the last status: OK, a non-conflict error,
// the conflict after the last try, or kCancelled when `stop` fires in a wait.
common::Status RetryOnConflict(const ConflictRetry& retry, const std::function<common::Status()>& fn,
                               std::stop_token stop = {}, workqueue::Clock& clock = workqueue::RealClock());

}  // namespace nvdra::k8s
