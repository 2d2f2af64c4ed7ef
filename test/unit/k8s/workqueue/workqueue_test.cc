#include "k8s/workqueue/workqueue.h"

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "k8s/workqueue/clock.h"

namespace nvdra::k8s::workqueue {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Generous: only reached when the code under test is broken.
constexpr auto kTimeout = seconds(10);

using Queue = WorkQueue<std::string>;

WorkQueueOptions Options(FakeClock& clock, BackoffOptions per_item = {milliseconds(10),
                                                                      milliseconds(80), 2.0, 0.0},
                         double qps = 0.0, std::uint32_t burst = 1) {
  WorkQueueOptions options;
  options.limits.per_item = per_item;
  options.limits.qps = qps;
  options.limits.burst = burst;
  options.clock = &clock;
  options.random = [] { return 0.0; };
  return options;
}

TEST(WorkQueueTest, ItemAddedTwiceBeforeGetIsHandedOutOnce) {
  FakeClock clock;
  Queue queue(Options(clock));
  queue.Add("a");
  queue.Add("b");
  queue.Add("a");
  EXPECT_EQ(queue.Len(), 2u);
  EXPECT_EQ(queue.Get({}), "a");
  EXPECT_EQ(queue.Get({}), "b");
  EXPECT_EQ(queue.Len(), 0u);
}

TEST(WorkQueueTest, ItemReaddedWhileInFlightIsQueuedOnlyAfterDone) {
  FakeClock clock;
  Queue queue(Options(clock));
  queue.Add("a");
  ASSERT_EQ(queue.Get({}), "a");
  queue.Add("a");
  queue.Add("a");
  EXPECT_EQ(queue.Len(), 0u) << "an in-flight item must not be handed out again";
  queue.Done("a");
  EXPECT_EQ(queue.Len(), 1u);
  EXPECT_EQ(queue.Get({}), "a");
  queue.Done("a");
  EXPECT_EQ(queue.Len(), 0u);
}

TEST(WorkQueueTest, DoneWithoutReaddDoesNotRequeue) {
  FakeClock clock;
  Queue queue(Options(clock));
  queue.Add("a");
  ASSERT_EQ(queue.Get({}), "a");
  queue.Done("a");
  queue.Done("never-taken");
  EXPECT_EQ(queue.Len(), 0u);
}

TEST(WorkQueueTest, WorkersNeverProcessOneItemConcurrently) {
  Queue queue;  // real clock: no delays are used
  constexpr int kKeys = 4;
  constexpr int kAddsPerKey = 500;
  std::map<std::string, std::atomic<int>> in_flight;
  for (int k = 0; k < kKeys; ++k) in_flight[std::to_string(k)] = 0;
  std::atomic<int> overlaps{0};
  std::atomic<int> processed{0};
  std::vector<std::jthread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&](std::stop_token stop) {
      while (std::optional<std::string> item = queue.Get(stop)) {
        if (in_flight.at(*item).fetch_add(1) != 0) ++overlaps;
        std::this_thread::yield();  // widen the window for an overlap, not synchronisation
        in_flight.at(*item).fetch_sub(1);
        ++processed;
        queue.Done(*item);
      }
    });
  }
  for (int i = 0; i < kAddsPerKey; ++i) {
    for (int k = 0; k < kKeys; ++k) queue.Add(std::to_string(k));
  }
  std::stop_source drain_deadline;
  std::jthread watchdog([&](std::stop_token stop) {
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    if (!cv.wait_for(lock, stop, kTimeout, [] { return false; })) drain_deadline.request_stop();
  });
  EXPECT_TRUE(queue.ShutDownWithDrain(drain_deadline.get_token()));
  workers.clear();  // joins; Get() returns nullopt after shutdown
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_GE(processed.load(), kKeys);
  EXPECT_LE(processed.load(), kKeys * kAddsPerKey);
}

TEST(WorkQueueTest, RateLimitedDelayDoublesThenCaps) {
  FakeClock clock;
  Queue queue(Options(clock));
  const std::vector<milliseconds> expected = {milliseconds(10), milliseconds(20), milliseconds(40),
                                              milliseconds(80), milliseconds(80)};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    queue.AddRateLimited("a");
    EXPECT_EQ(queue.NumRequeues("a"), i + 1);
    clock.Advance(expected[i] - milliseconds(1));
    EXPECT_EQ(queue.Len(), 0u) << "requeue " << i << " came early";
    clock.Advance(milliseconds(1));
    EXPECT_EQ(queue.Len(), 1u) << "requeue " << i << " is late";
    ASSERT_EQ(queue.Get({}), "a");
    queue.Done("a");
  }
}

TEST(WorkQueueTest, ForgetResetsBackoff) {
  FakeClock clock;
  Queue queue(Options(clock));
  queue.AddRateLimited("a");
  queue.AddRateLimited("a");
  queue.AddRateLimited("a");
  EXPECT_EQ(queue.NumRequeues("a"), 3u);
  queue.Forget("a");
  EXPECT_EQ(queue.NumRequeues("a"), 0u);
  clock.Advance(seconds(1));
  ASSERT_EQ(queue.Get({}), "a");
  queue.Done("a");
  queue.AddRateLimited("a");
  clock.Advance(milliseconds(10));
  EXPECT_EQ(queue.Len(), 1u) << "after Forget the first delay is the initial one";
}

TEST(WorkQueueTest, OverallBucketDelaysBurstsAcrossItems) {
  FakeClock clock;
  Queue queue(Options(clock, {Duration::zero(), Duration::zero(), 2.0, 0.0}, /*qps=*/2.0,
                      /*burst=*/1));
  queue.AddRateLimited("a");
  queue.AddRateLimited("b");
  queue.AddRateLimited("c");
  EXPECT_EQ(queue.Len(), 1u);
  clock.Advance(milliseconds(500));
  EXPECT_EQ(queue.Len(), 2u);
  clock.Advance(milliseconds(500));
  EXPECT_EQ(queue.Len(), 3u);
}

TEST(WorkQueueTest, ComputeDomainLimitsUseTheLargerOfItemAndBucketDelay) {
  FakeClock clock;
  WorkQueueOptions options;
  options.limits = ComputeDomainRateLimits();
  options.limits.per_item.jitter = 0.0;
  options.clock = &clock;
  Queue queue(std::move(options));
  queue.AddRateLimited("a");
  clock.Advance(milliseconds(249));
  EXPECT_EQ(queue.Len(), 0u);
  clock.Advance(milliseconds(1));
  EXPECT_EQ(queue.Len(), 1u);
}

TEST(WorkQueueTest, AddAfterWakesBlockedGetWhenFakeClockReachesIt) {
  FakeClock clock;
  Queue queue(Options(clock));
  auto got = std::async(std::launch::async, [&] { return queue.Get({}); });
  queue.AddAfter("a", seconds(5));
  const std::optional<TimePoint> deadline = clock.WaitForPendingDeadline(kTimeout);
  ASSERT_TRUE(deadline.has_value()) << "Get() never waited on the clock";
  EXPECT_EQ(*deadline - clock.Now(), seconds(5));
  EXPECT_EQ(got.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  clock.Advance(seconds(5));
  ASSERT_EQ(got.wait_for(kTimeout), std::future_status::ready);
  EXPECT_EQ(got.get(), "a");
}

TEST(WorkQueueTest, AddAfterKeepsTheEarliestTime) {
  FakeClock clock;
  Queue queue(Options(clock));
  queue.AddAfter("a", seconds(10));
  queue.AddAfter("a", seconds(2));
  queue.AddAfter("b", seconds(2));
  queue.AddAfter("b", seconds(10));
  EXPECT_EQ(queue.NumWaiting(), 2u);
  clock.Advance(seconds(2));
  EXPECT_EQ(queue.Len(), 2u);
  EXPECT_EQ(queue.NumWaiting(), 0u);
}

TEST(WorkQueueTest, AddAfterOfQueuedItemIsDeduplicatedWhenDue) {
  FakeClock clock;
  Queue queue(Options(clock));
  queue.Add("a");
  queue.AddAfter("a", seconds(1));
  clock.Advance(seconds(1));
  EXPECT_EQ(queue.Len(), 1u);
}

TEST(WorkQueueTest, ShutDownWakesBlockedGet) {
  FakeClock clock;
  Queue queue(Options(clock));
  auto got = std::async(std::launch::async, [&] { return queue.Get({}); });
  queue.ShutDown();
  ASSERT_EQ(got.wait_for(kTimeout), std::future_status::ready);
  EXPECT_EQ(got.get(), std::nullopt);
  EXPECT_TRUE(queue.ShuttingDown());
}

TEST(WorkQueueTest, StopTokenWakesBlockedGet) {
  FakeClock clock;
  Queue queue(Options(clock));
  std::stop_source stop;
  auto got = std::async(std::launch::async, [&] { return queue.Get(stop.get_token()); });
  stop.request_stop();
  ASSERT_EQ(got.wait_for(kTimeout), std::future_status::ready);
  EXPECT_EQ(got.get(), std::nullopt);
}

TEST(WorkQueueTest, ShutDownHandsOutQueuedItemsThenRefusesNewOnes) {
  FakeClock clock;
  Queue queue(Options(clock));
  queue.Add("a");
  queue.AddAfter("later", seconds(1));
  queue.ShutDown();
  queue.Add("b");
  queue.AddRateLimited("c");
  clock.Advance(seconds(1));
  EXPECT_EQ(queue.Get({}), "a");
  EXPECT_EQ(queue.Get({}), std::nullopt);
  EXPECT_EQ(queue.NumWaiting(), 0u);
}

TEST(WorkQueueTest, ShutDownWithDrainWaitsForInFlightItems) {
  FakeClock clock;
  Queue queue(Options(clock));
  queue.Add("a");
  ASSERT_EQ(queue.Get({}), "a");
  auto drained = std::async(std::launch::async, [&] { return queue.ShutDownWithDrain({}); });
  // It cannot finish while "a" is in flight, whatever the scheduling.
  EXPECT_EQ(drained.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  queue.Done("a");
  ASSERT_EQ(drained.wait_for(kTimeout), std::future_status::ready);
  EXPECT_TRUE(drained.get());
}

TEST(WorkQueueTest, ShutDownWithDrainGivesUpWhenStopped) {
  FakeClock clock;
  Queue queue(Options(clock));
  queue.Add("a");
  ASSERT_EQ(queue.Get({}), "a");
  std::stop_source stop;
  stop.request_stop();
  EXPECT_FALSE(queue.ShutDownWithDrain(stop.get_token()));
}

TEST(FakeClockTest, AdvanceWakesSleeperAtItsDeadline) {
  FakeClock clock;
  const TimePoint start = clock.Now();
  auto slept = std::async(std::launch::async,
                          [&] { return SleepUntil(clock, start + seconds(3), {}); });
  ASSERT_EQ(clock.WaitForPendingDeadline(kTimeout), start + seconds(3));
  clock.Advance(seconds(2));
  EXPECT_EQ(slept.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  clock.Advance(seconds(1));
  ASSERT_EQ(slept.wait_for(kTimeout), std::future_status::ready);
  EXPECT_TRUE(slept.get());
}

}  // namespace
}  // namespace nvdra::k8s::workqueue
