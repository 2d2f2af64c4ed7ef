#include "common/signals.h"

#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <future>
#include <mutex>

#include <gtest/gtest.h>

namespace nvdra::common {
namespace {

// kill(getpid()) rather than raise(): raise() targets the calling thread, and
// a signal pending on one thread is invisible to a signalfd read by another.
// Kubernetes and shells send process-directed signals, as kill() does.
void SignalSelf(int signal_number) { ASSERT_EQ(::kill(::getpid(), signal_number), 0); }

TEST(ShutdownSignalsTest, SigtermFiresStopTokenAndWaitReturnsSignal) {
  auto signals = ShutdownSignals::Install();
  ASSERT_TRUE(signals.ok()) << signals.status();
  std::promise<void> fired;
  std::stop_callback on_stop((*signals)->token(), [&fired] { fired.set_value(); });
  EXPECT_FALSE((*signals)->token().stop_requested());

  SignalSelf(SIGTERM);
  fired.get_future().wait();  // the stop callback ran: no sleeping, no polling

  EXPECT_TRUE((*signals)->token().stop_requested());
  EXPECT_EQ((*signals)->WaitForShutdown(), SIGTERM);
  EXPECT_EQ((*signals)->received_signal(), SIGTERM);
}

TEST(ShutdownSignalsTest, SigintAlsoRequestsStop) {
  auto signals = ShutdownSignals::Install();
  ASSERT_TRUE(signals.ok()) << signals.status();
  SignalSelf(SIGINT);
  EXPECT_EQ((*signals)->WaitForShutdown(), SIGINT);
}

TEST(ShutdownSignalsTest, SecondSignalCallsForceExit) {
  std::mutex mutex;
  std::condition_variable cv;
  int forced_with = 0;
  auto signals = ShutdownSignals::Install([&](int signal_number) {
    std::lock_guard lock(mutex);
    forced_with = signal_number;
    cv.notify_all();
  });
  ASSERT_TRUE(signals.ok()) << signals.status();
  SignalSelf(SIGTERM);
  EXPECT_EQ((*signals)->WaitForShutdown(), SIGTERM);
  SignalSelf(SIGINT);
  std::unique_lock lock(mutex);
  cv.wait(lock, [&] { return forced_with != 0; });
  EXPECT_EQ(forced_with, SIGINT);
}

TEST(ShutdownSignalsTest, RequestStopWakesWaiterWithoutSignal) {
  auto signals = ShutdownSignals::Install();
  ASSERT_TRUE(signals.ok()) << signals.status();
  std::jthread stopper([&signals] { (*signals)->RequestStop(); });
  EXPECT_EQ((*signals)->WaitForShutdown(), 0);
  EXPECT_TRUE((*signals)->token().stop_requested());
}

TEST(ShutdownSignalsTest, SecondInstallFailsWhileFirstExists) {
  auto first = ShutdownSignals::Install();
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = ShutdownSignals::Install();
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
}

TEST(ShutdownSignalsTest, DestructionWithoutSignalJoinsPromptlyAndRestoresMask) {
  sigset_t before;
  ASSERT_EQ(::pthread_sigmask(SIG_SETMASK, nullptr, &before), 0);
  { ASSERT_TRUE(ShutdownSignals::Install().ok()); }
  sigset_t after;
  ASSERT_EQ(::pthread_sigmask(SIG_SETMASK, nullptr, &after), 0);
  EXPECT_EQ(sigismember(&after, SIGTERM), sigismember(&before, SIGTERM));
  EXPECT_TRUE(ShutdownSignals::Install().ok());  // a new one can be installed
}

}  // namespace
}  // namespace nvdra::common
