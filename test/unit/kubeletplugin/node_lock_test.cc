#include "kubeletplugin/node_lock.h"

#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <stop_token>
#include <string>

namespace nvdra::kubeletplugin {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

class FileLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("nvdra-lock-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = dir_ / kPrepareLockFileName;
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  fs::path path_;
};

// One byte over a pipe: the cross-process event the tests wait on.
char Receive(int fd) {
  char c = 0;
  return ::read(fd, &c, 1) == 1 ? c : '\0';
}

int WaitExitCode(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST_F(FileLockTest, CreatesTheFileAndExcludesASecondHolderInTheSameProcess) {
  auto first = FileLock::Acquire(path_, 0ms);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(fs::exists(path_));
  auto second = FileLock::Acquire(path_, 0ms);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), common::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(second.status().message(), HasSubstr(path_.string()));
  first->Release();
  EXPECT_FALSE(first->held());
  EXPECT_TRUE(FileLock::Acquire(path_, 0ms).ok());
}

TEST_F(FileLockTest, OtherProcessTimesOutThenGetsTheLockOnceReleased) {
  auto held = FileLock::Acquire(path_, 0ms);
  ASSERT_TRUE(held.ok()) << held.status();
  int to_parent[2];
  ASSERT_EQ(::pipe(to_parent), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(to_parent[0]);
    // The child shares the parent's open file description, and with it the
    // lock, until it closes its copy; closing does not unlock while the
    // parent's copy stays open.
    held->Release();
    const auto start = std::chrono::steady_clock::now();
    auto blocked = FileLock::Acquire(path_, 200ms);
    if (blocked.ok() || blocked.status().code() != common::StatusCode::kDeadlineExceeded) _exit(10);
    if (std::chrono::steady_clock::now() - start < 200ms) _exit(11);
    char c = 'T';
    if (::write(to_parent[1], &c, 1) != 1) _exit(12);
    auto acquired = FileLock::Acquire(path_, 30s);
    if (!acquired.ok()) _exit(13);
    c = 'A';
    if (::write(to_parent[1], &c, 1) != 1) _exit(14);
    _exit(0);  // exiting releases the lock
  }
  ::close(to_parent[1]);
  EXPECT_EQ(Receive(to_parent[0]), 'T');  // the child timed out while we held it
  held->Release();
  EXPECT_EQ(Receive(to_parent[0]), 'A');  // and took it once released
  EXPECT_EQ(WaitExitCode(pid), 0);
  ::close(to_parent[0]);
  EXPECT_TRUE(FileLock::Acquire(path_, 0ms).ok());
}

TEST_F(FileLockTest, KilledHolderReleasesTheLock) {
  int to_parent[2];
  ASSERT_EQ(::pipe(to_parent), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(to_parent[0]);
    auto lock = FileLock::Acquire(path_, 0ms);
    char c = lock.ok() ? 'L' : 'E';
    if (::write(to_parent[1], &c, 1) != 1) _exit(1);
    ::pause();  // hold it until killed
    _exit(0);
  }
  ::close(to_parent[1]);
  ASSERT_EQ(Receive(to_parent[0]), 'L');
  EXPECT_EQ(FileLock::Acquire(path_, 0ms).status().code(), common::StatusCode::kDeadlineExceeded);
  ::kill(pid, SIGKILL);
  EXPECT_EQ(WaitExitCode(pid), 128 + SIGKILL);
  ::close(to_parent[0]);
  EXPECT_TRUE(FileLock::Acquire(path_, 0ms).ok());
}

TEST_F(FileLockTest, StopRequestEndsTheWait) {
  auto held = FileLock::Acquire(path_, 0ms);
  ASSERT_TRUE(held.ok());
  std::stop_source stop;
  stop.request_stop();
  const auto start = std::chrono::steady_clock::now();
  auto waiting = FileLock::Acquire(path_, 30s, stop.get_token());
  EXPECT_EQ(waiting.status().code(), common::StatusCode::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST_F(FileLockTest, MovedLockStaysHeld) {
  auto acquired = FileLock::Acquire(path_, 0ms);
  ASSERT_TRUE(acquired.ok());
  FileLock moved = std::move(*acquired);
  EXPECT_TRUE(moved.held());
  EXPECT_EQ(moved.path(), path_);
  EXPECT_FALSE(FileLock::Acquire(path_, 0ms).ok());
}

TEST_F(FileLockTest, UnopenableLockFileIsAnErrorNotATimeout) {
  auto lock = FileLock::Acquire(dir_ / "missing-dir" / "pu.lock", 1s);
  EXPECT_EQ(lock.status().code(), common::StatusCode::kNotFound);
}

}  // namespace
}  // namespace nvdra::kubeletplugin
