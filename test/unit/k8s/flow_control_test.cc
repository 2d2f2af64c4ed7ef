// The request rate limiter against a fake clock, and RetryOnConflict.

#include "k8s/flow_control.h"

#include <gtest/gtest.h>

#include <thread>

namespace nvdra::k8s {
namespace {

using namespace std::chrono_literals;

TEST(RequestRateLimiter, AllowsBurstThenPacesAtQps) {
  workqueue::FakeClock clock;
  RequestRateLimiter limiter(5, 10, clock);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(limiter.Reserve(), 0ns) << i;
  EXPECT_EQ(limiter.Reserve(), 200ms);  // one token owed at 5/s
  EXPECT_EQ(limiter.Reserve(), 400ms);  // queued behind the previous one
  clock.Advance(400ms);                 // repays both
  EXPECT_EQ(limiter.Reserve(), 200ms);
}

TEST(RequestRateLimiter, ZeroQpsIsUnlimited) {
  workqueue::FakeClock clock;
  RequestRateLimiter limiter(0, 1, clock);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(limiter.Reserve(), 0ns);
}

TEST(RequestRateLimiter, AcquireWaitsOnTheClockUntilItsTokenExists) {
  workqueue::FakeClock clock;
  RequestRateLimiter limiter(2, 1, clock);
  ASSERT_TRUE(limiter.Acquire({}).ok());  // the burst
  std::atomic<bool> done{false};
  std::jthread waiter([&] {
    EXPECT_TRUE(limiter.Acquire({}).ok());
    done = true;
  });
  auto deadline = clock.WaitForPendingDeadline(10s);
  ASSERT_TRUE(deadline.has_value());
  EXPECT_EQ(*deadline - clock.Now(), 500ms);
  EXPECT_FALSE(done);
  clock.Advance(500ms);
  waiter.join();
  EXPECT_TRUE(done);
}

TEST(RequestRateLimiter, AcquireIsCancelledByStop) {
  workqueue::FakeClock clock;
  RequestRateLimiter limiter(0.001, 1, clock);  // the second token is 1000 s away
  ASSERT_TRUE(limiter.Acquire({}).ok());
  std::stop_source stop;
  std::jthread stopper([&] {
    ASSERT_TRUE(clock.WaitForPendingDeadline(10s).has_value());
    stop.request_stop();
  });
  EXPECT_EQ(limiter.Acquire(stop.get_token()).code(), common::StatusCode::kCancelled);
}

TEST(RetryOnConflict, RetriesConflictsOnlyAndIsBounded) {
  ConflictRetry fast{{1ms, 1ms, 1.0, 0.0}, 4};
  int calls = 0;
  auto ok_on_third = RetryOnConflict(fast, [&] {
    return ++calls < 3 ? common::AbortedError("conflict") : common::OkStatus();
  });
  EXPECT_TRUE(ok_on_third.ok());
  EXPECT_EQ(calls, 3);

  calls = 0;
  auto always = RetryOnConflict(fast, [&] {
    ++calls;
    return common::AbortedError("conflict");
  });
  EXPECT_EQ(always.code(), common::StatusCode::kAborted);
  EXPECT_EQ(calls, 4);

  calls = 0;
  auto other = RetryOnConflict(kDefaultConflictRetry, [&] {
    ++calls;
    return common::NotFoundError("gone");
  });
  EXPECT_EQ(other.code(), common::StatusCode::kNotFound);
  EXPECT_EQ(calls, 1);
}

TEST(RetryOnConflict, StopEndsTheWaitBetweenTries) {
  std::stop_source stop;
  stop.request_stop();
  ConflictRetry slow{{1h, 1h, 1.0, 0.0}, 3};
  auto s = RetryOnConflict(slow, [] { return common::AbortedError("conflict"); }, stop.get_token());
  EXPECT_EQ(s.code(), common::StatusCode::kCancelled);
}

}  // namespace
}  // namespace nvdra::k8s
