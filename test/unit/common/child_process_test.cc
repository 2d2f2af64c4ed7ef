#include "common/child_process.h"

#include <signal.h>

#include <chrono>

#include <gtest/gtest.h>

namespace nvdra::common {
namespace {

using namespace std::chrono_literals;

TEST(RunCommandTest, CapturesStdoutAndStderrAndExitCode) {
  auto out = RunCommand({.argv = {"sh", "-c", "echo out; echo err >&2; exit 3"}}, 10s);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->output, "out\nerr\n");
  EXPECT_FALSE(out->exit.signaled);
  EXPECT_EQ(out->exit.code, 3);
}

TEST(RunCommandTest, ExtraEnvironmentReachesTheChild) {
  auto out = RunCommand({.argv = {"sh", "-c", "printf %s \"$CP_TEST\""}, .extra_env = {"CP_TEST=yes"}}, 10s);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->output, "yes");
}

TEST(RunCommandTest, TimeoutKillsTheCommand) {
  const auto start = std::chrono::steady_clock::now();
  auto out = RunCommand({.argv = {"sleep", "30"}}, 200ms);
  EXPECT_EQ(out.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(ChildProcessTest, MissingBinaryIsNotFound) {
  EXPECT_EQ(ChildProcess::Spawn({.argv = {"/nonexistent/binary"}}).status().code(), StatusCode::kNotFound);
}

TEST(ChildProcessTest, ChildDoesNotInheritBlockedSigterm) {
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigset_t previous;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, &previous), 0);
  auto child = ChildProcess::Spawn({.argv = {"sleep", "30"}});
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  ASSERT_TRUE(child.ok()) << child.status();
  const ExitInfo exit = child->Terminate(5s);
  EXPECT_TRUE(exit.signaled);
  EXPECT_EQ(exit.code, SIGTERM);  // not SIGKILL after the grace period
  EXPECT_FALSE(child->running());
}

TEST(ChildProcessTest, PidfdBecomesReadableOnExitAndTryWaitReaps) {
  auto child = ChildProcess::Spawn({.argv = {"true"}});
  ASSERT_TRUE(child.ok());
  auto exit = child->WaitUntil(std::chrono::steady_clock::now() + 10s);
  ASSERT_TRUE(exit.has_value());
  EXPECT_TRUE(exit->success());
  EXPECT_FALSE(child->running());
  EXPECT_EQ(child->Signal(SIGTERM).code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace nvdra::common
