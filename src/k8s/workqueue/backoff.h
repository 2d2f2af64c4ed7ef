#pragma once

// Exponential backoff with jitter and a cap, for retry loops (an informer
// reconnecting to the API server) and per-item requeues (the work queue).
// Defines: BackoffOptions, RandomSource, DefaultRandomSource(), BackoffDelay(),
// Backoff.
//
// The delay before retry n (n = 0 for the first retry) has a ceiling of
// min(cap, initial * factor^n); the delay itself is drawn uniformly from
// [ceiling * (1 - jitter), ceiling]. jitter = 1 is "full jitter" (AWS
// architecture blog, 2015): many clients that failed together spread their
// retries over the whole window instead of retrying in lock step.
//
// Ownership: values. Thread-safety: Backoff is thread-compatible; BackoffDelay
// is a pure function.

#include <chrono>
#include <cstdint>
#include <functional>

#include "k8s/workqueue/clock.h"

namespace nvdra::k8s::workqueue {

struct BackoffOptions {
  Duration initial = std::chrono::milliseconds(800);
  Duration cap = std::chrono::seconds(30);
  double factor = 2.0;
  // Fraction of the ceiling that is randomised, in [0, 1]; 1 is full jitter,
  // 0 makes delays deterministic.
  double jitter = 1.0;
};

// Returns a uniformly distributed value in [0, 1). Injected so tests can
// pin the jitter; must be safe to call from the thread that owns the user.
using RandomSource = std::function<double()>;

// A source backed by its own std::mt19937_64 seeded from std::random_device.
// Each returned function owns its engine (not shared between copies' calls
// from different threads: copy it per thread).
RandomSource DefaultRandomSource();

// The delay before retry `attempt` (0-based) given a draw `random01` in
// [0, 1). Out-of-range options are clamped (factor < 1 becomes 1, jitter to
// [0, 1], a negative initial or cap to 0), so bad input never aborts.
Duration BackoffDelay(const BackoffOptions& options, std::uint32_t attempt, double random01);

class Backoff {
 public:
  explicit Backoff(BackoffOptions options = {}, RandomSource random = DefaultRandomSource());

  // The delay to wait before the next retry; each call counts one attempt.
  Duration Next();
  // Back to the first attempt (after a success).
  void Reset() { attempts_ = 0; }
  // Calls to Next() since construction or the last Reset().
  std::uint32_t attempts() const { return attempts_; }
  const BackoffOptions& options() const { return options_; }

 private:
  BackoffOptions options_;
  RandomSource random_;
  std::uint32_t attempts_ = 0;
};

}  // namespace nvdra::k8s::workqueue
