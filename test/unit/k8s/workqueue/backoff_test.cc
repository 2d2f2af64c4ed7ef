#include "k8s/workqueue/backoff.h"

#include <chrono>
#include <cstdint>

#include <gtest/gtest.h>

#include "k8s/workqueue/clock.h"
#include "k8s/workqueue/rate_limiter.h"

namespace nvdra::k8s::workqueue {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

RandomSource Fixed(double value) {
  return [value] { return value; };
}

TEST(BackoffTest, WithoutJitterDoublesUntilCap) {
  Backoff backoff({milliseconds(100), seconds(1), 2.0, 0.0}, Fixed(0.7));
  EXPECT_EQ(backoff.Next(), milliseconds(100));
  EXPECT_EQ(backoff.Next(), milliseconds(200));
  EXPECT_EQ(backoff.Next(), milliseconds(400));
  EXPECT_EQ(backoff.Next(), milliseconds(800));
  EXPECT_EQ(backoff.Next(), seconds(1));
  EXPECT_EQ(backoff.Next(), seconds(1));
  EXPECT_EQ(backoff.attempts(), 6u);
}

TEST(BackoffTest, FullJitterSpansZeroToCeiling) {
  const BackoffOptions options{milliseconds(100), seconds(1), 2.0, 1.0};
  EXPECT_EQ(BackoffDelay(options, 2, 0.0), milliseconds(400));
  EXPECT_EQ(BackoffDelay(options, 2, 0.5), milliseconds(200));
  EXPECT_LT(BackoffDelay(options, 2, 0.999999), milliseconds(1));
}

TEST(BackoffTest, PartialJitterKeepsLowerBound) {
  const BackoffOptions options{milliseconds(100), seconds(1), 2.0, 0.5};
  EXPECT_EQ(BackoffDelay(options, 1, 0.0), milliseconds(200));
  EXPECT_EQ(BackoffDelay(options, 1, 0.5), milliseconds(150));
  EXPECT_GT(BackoffDelay(options, 1, 0.999999), milliseconds(99));
}

TEST(BackoffTest, RealRandomDelaysStayWithinCeiling) {
  Backoff backoff({milliseconds(10), milliseconds(640), 2.0, 1.0});
  for (std::uint32_t attempt = 0; attempt < 200; ++attempt) {
    const Duration ceiling = attempt < 6 ? milliseconds(10) * (1 << attempt) : milliseconds(640);
    const Duration delay = backoff.Next();
    EXPECT_GE(delay, Duration::zero());
    EXPECT_LE(delay, ceiling) << "attempt " << attempt;
  }
}

TEST(BackoffTest, ResetStartsAgainFromInitial) {
  Backoff backoff({milliseconds(100), seconds(10), 2.0, 0.0}, Fixed(0.0));
  backoff.Next();
  backoff.Next();
  backoff.Next();
  backoff.Reset();
  EXPECT_EQ(backoff.attempts(), 0u);
  EXPECT_EQ(backoff.Next(), milliseconds(100));
}

TEST(BackoffTest, HugeAttemptCountStaysAtCapWithoutOverflow) {
  const BackoffOptions options{milliseconds(5), seconds(1000), 2.0, 0.0};
  EXPECT_EQ(BackoffDelay(options, 100000, 0.0), seconds(1000));
  EXPECT_EQ(BackoffDelay(options, UINT32_MAX, 0.0), seconds(1000));
}

TEST(BackoffTest, OutOfRangeOptionsAreClampedNotFatal) {
  const BackoffOptions shrinking{milliseconds(100), seconds(1), 0.5, 3.0};
  EXPECT_EQ(BackoffDelay(shrinking, 5, 0.0), milliseconds(100));  // factor 1, jitter 1
  const BackoffOptions negative{milliseconds(-5), seconds(1), 2.0, 0.0};
  EXPECT_EQ(BackoffDelay(negative, 3, 0.0), Duration::zero());
}

TEST(TokenBucketTest, BurstThenSpacedByQps) {
  FakeClock clock;
  TokenBucket bucket(5.0, 2, clock.Now());
  EXPECT_EQ(bucket.Reserve(clock.Now()), Duration::zero());
  EXPECT_EQ(bucket.Reserve(clock.Now()), Duration::zero());
  EXPECT_EQ(bucket.Reserve(clock.Now()), milliseconds(200));
  EXPECT_EQ(bucket.Reserve(clock.Now()), milliseconds(400));
  // Two seconds refill 10 tokens, of which the debt of 2 is paid and the
  // rest capped at the burst of 2.
  clock.Advance(seconds(2));
  EXPECT_EQ(bucket.Reserve(clock.Now()), Duration::zero());
  EXPECT_EQ(bucket.Reserve(clock.Now()), Duration::zero());
  EXPECT_EQ(bucket.Reserve(clock.Now()), milliseconds(200));
}

TEST(TokenBucketTest, ZeroQpsNeverDelays) {
  FakeClock clock;
  TokenBucket bucket(0.0, 1, clock.Now());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(bucket.Reserve(clock.Now()), Duration::zero());
}

TEST(RateLimitsTest, PresetsMatchDocumentedValues) {
  const RateLimits controller = DefaultControllerRateLimits();
  EXPECT_EQ(controller.per_item.initial, milliseconds(5));
  EXPECT_EQ(controller.per_item.cap, seconds(1000));
  EXPECT_EQ(controller.qps, 10.0);
  EXPECT_EQ(controller.burst, 100u);
  const RateLimits compute_domain = ComputeDomainRateLimits();
  EXPECT_EQ(compute_domain.per_item.initial, milliseconds(250));
  EXPECT_EQ(compute_domain.per_item.cap, seconds(3));
  EXPECT_EQ(compute_domain.qps, 5.0);
  EXPECT_EQ(compute_domain.burst, 10u);
}

}  // namespace
}  // namespace nvdra::k8s::workqueue
