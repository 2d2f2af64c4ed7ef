#pragma once

// How fast a work queue hands a failing item back: per-item exponential
// backoff combined with an overall token bucket, the slower of the two
// winning. Defines: RateLimits, DefaultControllerRateLimits(),
// ComputeDomainRateLimits(), TokenBucket.
//
// The per-item backoff protects against one hot item; the bucket bounds the
// total retry rate when many items fail at once (an API server outage).
//
// Ownership: values. Thread-safety: thread-compatible (the work queue calls
// them under its own mutex).

#include <cstdint>

#include "k8s/workqueue/backoff.h"
#include "k8s/workqueue/clock.h"

namespace nvdra::k8s::workqueue {

struct RateLimits {
  // Per item: the delay of its n-th consecutive AddRateLimited. The default
  // jitter of 0.5 keeps every delay within [ceiling/2, ceiling], so the
  // backoff still grows while items failing together spread out; full jitter
  // would let a 17-minute backoff come out as a few milliseconds.
  BackoffOptions per_item{std::chrono::milliseconds(5), std::chrono::seconds(1000), 2.0, 0.5};
  // Overall: a token bucket shared by all items. qps <= 0 disables it.
  double qps = 10.0;
  std::uint32_t burst = 100;
};

// client-go's controller default: 5 ms doubling to 1000 s per item, overall
// 10 qps with a burst of 100.
RateLimits DefaultControllerRateLimits();

// What NVIDIA's ComputeDomain plugin uses: 250 ms doubling to 3 s per item,
// overall 5 qps with a burst of 10.
RateLimits ComputeDomainRateLimits();

// A token bucket that hands out reservations: every Reserve() takes a token,
// going into debt when none is left, and returns how long the caller must
// wait for its token to exist. Starts full.
class TokenBucket {
 public:
  // qps <= 0 makes a bucket that never delays. A burst of 0 counts as 1.
  TokenBucket(double qps, std::uint32_t burst, TimePoint now);

  // Takes one token at `now` and returns the wait until it is available
  // (zero when a token was in the bucket). Time going backwards is ignored.
  Duration Reserve(TimePoint now);

 private:
  double qps_;
  double burst_;
  double tokens_;
  TimePoint last_;
};

}  // namespace nvdra::k8s::workqueue
