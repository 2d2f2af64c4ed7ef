#include "k8s/workqueue/rate_limiter.h"

#include <algorithm>

namespace nvdra::k8s::workqueue {

RateLimits DefaultControllerRateLimits() { return RateLimits{}; }

RateLimits ComputeDomainRateLimits() {
  RateLimits limits;
  limits.per_item.initial = std::chrono::milliseconds(250);
  limits.per_item.cap = std::chrono::seconds(3);
  limits.qps = 5.0;
  limits.burst = 10;
  return limits;
}

TokenBucket::TokenBucket(double qps, std::uint32_t burst, TimePoint now)
    : qps_(qps),
      burst_(static_cast<double>(std::max<std::uint32_t>(burst, 1))),
      tokens_(burst_),
      last_(now) {}

Duration TokenBucket::Reserve(TimePoint now) {
  if (qps_ <= 0.0) return Duration::zero();
  if (now > last_) {
    const double elapsed = std::chrono::duration<double>(now - last_).count();
    tokens_ = std::min(burst_, tokens_ + elapsed * qps_);
    last_ = now;
  }
  tokens_ -= 1.0;
  if (tokens_ >= 0.0) return Duration::zero();
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(-tokens_ / qps_));
}

}  // namespace nvdra::k8s::workqueue
