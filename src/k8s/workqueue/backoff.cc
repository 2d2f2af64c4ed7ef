#include "k8s/workqueue/backoff.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <utility>

namespace nvdra::k8s::workqueue {

RandomSource DefaultRandomSource() {
  // shared_ptr: std::function must be copyable, and copies of one source
  // drawing from one engine keep the sequence unrepeated.
  auto engine = std::make_shared<std::mt19937_64>(std::random_device{}());
  return [engine] { return std::uniform_real_distribution<double>(0.0, 1.0)(*engine); };
}

Duration BackoffDelay(const BackoffOptions& options, std::uint32_t attempt, double random01) {
  using Seconds = std::chrono::duration<double>;
  const double initial = std::max(0.0, Seconds(options.initial).count());
  const double cap = std::max(0.0, Seconds(options.cap).count());
  const double factor = std::max(1.0, options.factor);
  const double jitter = std::clamp(options.jitter, 0.0, 1.0);
  const double random = std::clamp(random01, 0.0, 1.0);
  // pow may reach infinity for large attempts; min() with the cap absorbs it.
  const double ceiling = std::min(cap, initial * std::pow(factor, static_cast<double>(attempt)));
  const double delay = ceiling * (1.0 - jitter * random);
  return std::chrono::duration_cast<Duration>(Seconds(delay));
}

Backoff::Backoff(BackoffOptions options, RandomSource random)
    : options_(options), random_(random ? std::move(random) : DefaultRandomSource()) {}

Duration Backoff::Next() {
  const Duration delay = BackoffDelay(options_, attempts_, random_());
  if (attempts_ < std::numeric_limits<std::uint32_t>::max()) ++attempts_;
  return delay;
}

}  // namespace nvdra::k8s::workqueue
