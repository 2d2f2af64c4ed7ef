// Leader election (src/k8s/leader_election.h) against a real API server:
// two electors in one process share a Lease and only one leads; then the
// issue's point, two processes (leader_elect_helper) where the standby takes
// over within the lease duration (+ one retry period) after the leader is
// SIGKILLed, and at once after a graceful stop that releases the lease.
//
// Short durations keep it fast: lease 3 s, renew deadline 2 s, retry 0.5 s.

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "k8s/api_error.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/leader_election.h"
#include "cluster_client.h"
#include "test_cluster.h"

namespace nvdra::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

constexpr char kNs[] = "leader-election-test";
constexpr auto kLease = 3s;
constexpr auto kRenew = 2s;
constexpr auto kRetry = 500ms;
// Generous: the machine running these tests is shared and loaded.
constexpr auto kEventDeadline = 60s;

// A child process whose stdout lines are collected with their arrival time.
// Owns the process (SIGKILLed and reaped on destruction; it also dies with
// the test through PR_SET_PDEATHSIG) and the reader thread.
class Process {
 public:
  explicit Process(const std::vector<std::string>& argv) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      dup2(fds[1], STDOUT_FILENO);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(fds[1]);
    reader_ = std::jthread([this, fd = fds[0]] { ReadLines(fd); });
  }
  ~Process() {
    Kill(SIGKILL);
    Wait();
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  void Kill(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }
  // Reaps the process; its exit code, or -1 when killed by a signal.
  int Wait() {
    if (pid_ <= 0) return exit_code_;
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return exit_code_;
  }
  // When the line `line` arrived; nullopt if it did not within `timeout`.
  std::optional<Steady::time_point> WaitForLine(const std::string& line, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    std::optional<Steady::time_point> at;
    cv_.wait_for(lock, timeout, [&] {
      for (const auto& [text, when] : lines_) {
        if (text == line) at = when;
      }
      return at.has_value() || eof_;
    });
    return at;
  }
  bool HasLine(const std::string& line) {
    std::lock_guard lock(mutex_);
    for (const auto& entry : lines_) {
      if (entry.first == line) return true;
    }
    return false;
  }

 private:
  void ReadLines(int fd) {
    std::string partial;
    char buf[512];
    while (true) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n <= 0) break;
      const auto now = Steady::now();
      partial.append(buf, static_cast<size_t>(n));
      size_t pos;
      while ((pos = partial.find('\n')) != std::string::npos) {
        std::lock_guard lock(mutex_);
        lines_.emplace_back(partial.substr(0, pos), now);
        partial.erase(0, pos + 1);
        cv_.notify_all();
      }
    }
    close(fd);
    std::lock_guard lock(mutex_);
    eof_ = true;
    cv_.notify_all();
  }

  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::pair<std::string, Steady::time_point>> lines_;  // guarded by mutex_
  bool eof_ = false;                                               // guarded by mutex_
  std::jthread reader_;
};

class LeaderElectionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    k8s::ClientOptions options;
    options.request_timeout = 1s;  // below the renew deadline
    ClusterClient started;
    ASSERT_EQ(StartClusterClient(started, kNs, options), "");
    cluster_ = started.cluster.release();
    client_ = started.client.release();
  }
  static void TearDownTestSuite() {
    delete client_;
    delete cluster_;
  }

  static std::unique_ptr<Process> StartHelper(const std::string& lease, const std::string& identity, bool release) {
    return std::make_unique<Process>(std::vector<std::string>{
        LEADER_ELECT_HELPER, cluster_->kubeconfig().string(), kNs, lease, identity,
        std::to_string(std::chrono::milliseconds(kLease).count()),
        std::to_string(std::chrono::milliseconds(kRenew).count()),
        std::to_string(std::chrono::milliseconds(kRetry).count()), release ? "1" : "0"});
  }

  std::string Holder(const std::string& lease) {
    auto got = client_->Get(k8s::resources::kLeases, kNs, lease);
    if (!got.ok()) return "<" + got.status().ToString() + ">";
    return k8s::LeaseRecord::FromLease(*got).holder_identity;
  }

  static inline TestCluster* cluster_ = nullptr;
  static inline k8s::Client* client_ = nullptr;
};

TEST_F(LeaderElectionTest, TwoElectorsInOneProcessOnlyOneLeads) {
  std::mutex mutex;
  std::condition_variable cv;
  int leading = 0;
  int max_leading = 0;
  std::vector<std::string> leaders;
  auto make = [&](const std::string& identity) {
    k8s::LeaderElectionConfig config;
    config.lease_namespace = kNs;
    config.lease_name = "in-process";
    config.identity = identity;
    config.lease_duration = kLease;
    config.renew_deadline = kRenew;
    config.retry_period = kRetry;
    config.release_on_cancel = true;
    config.on_started_leading = [&, identity](std::stop_token) {
      std::lock_guard lock(mutex);
      ++leading;
      max_leading = std::max(max_leading, leading);
      leaders.push_back(identity);
      cv.notify_all();
    };
    config.on_stopped_leading = [&] {
      std::lock_guard lock(mutex);
      --leading;
      cv.notify_all();
    };
    auto elector = k8s::LeaderElector::New(client_, config);
    EXPECT_TRUE(elector.ok()) << elector.status();
    return std::move(elector).value();
  };
  auto a = make("a");
  auto b = make("b");
  common::Status a_result, b_result;
  std::jthread run_a([&](std::stop_token stop) { a_result = a->Run(stop); });
  std::jthread run_b([&](std::stop_token stop) { b_result = b->Run(stop); });

  {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(cv.wait_for(lock, kEventDeadline, [&] { return leaders.size() == 1; }));
    // Give the other a few of its retry periods: it must keep waiting. (This
    // wait is the observation window, not synchronisation.)
    EXPECT_FALSE(cv.wait_for(lock, 4 * kRetry, [&] { return leaders.size() > 1; }));
  }
  const std::string first = leaders[0];
  EXPECT_EQ(Holder("in-process"), first);
  EXPECT_TRUE(first == "a" ? a->IsLeader() && !b->IsLeader() : b->IsLeader() && !a->IsLeader());
  EXPECT_EQ(a->Leader(), first);
  EXPECT_EQ(b->Leader(), first);

  // Stop the leader (it releases): the other one takes over.
  (first == "a" ? run_a : run_b).request_stop();
  (first == "a" ? run_a : run_b).join();
  {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(cv.wait_for(lock, kEventDeadline, [&] { return leaders.size() == 2; }));
    EXPECT_NE(leaders[1], first);
    EXPECT_EQ(max_leading, 1);
  }
  EXPECT_EQ(Holder("in-process"), leaders[1]);
  auto lease = client_->Get(k8s::resources::kLeases, kNs, "in-process");
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ((*lease)["spec"]["leaseTransitions"], 1) << lease->dump();
  EXPECT_EQ((*lease)["spec"]["leaseDurationSeconds"], 3);
  for (std::jthread* run : {&run_a, &run_b}) {
    run->request_stop();
    if (run->joinable()) run->join();
  }
  EXPECT_TRUE(a_result.ok()) << a_result;
  EXPECT_TRUE(b_result.ok()) << b_result;
  // The last one released on its way out.
  EXPECT_EQ(Holder("in-process"), "");
}

TEST_F(LeaderElectionTest, StandbyProcessTakesOverWithinLeaseDurationAfterSigkill) {
  auto a = StartHelper("failover", "proc-a", /*release=*/false);
  ASSERT_TRUE(a->WaitForLine("leading proc-a", kEventDeadline));
  auto b = StartHelper("failover", "proc-b", /*release=*/false);
  // The standby has seen the leader's record (its expiry clock is running).
  ASSERT_TRUE(b->WaitForLine("leader proc-a", kEventDeadline));
  EXPECT_FALSE(b->HasLine("leading proc-b"));

  const auto killed = Steady::now();
  a->Kill(SIGKILL);
  EXPECT_EQ(a->Wait(), -1);
  const auto led = b->WaitForLine("leading proc-b", kEventDeadline);
  ASSERT_TRUE(led.has_value());
  const auto failover = std::chrono::duration_cast<std::chrono::milliseconds>(*led - killed);
  std::printf("failover after SIGKILL: %lld ms (lease %lld ms, retry %lld ms)\n",
              static_cast<long long>(failover.count()), static_cast<long long>(std::chrono::milliseconds(kLease).count()),
              static_cast<long long>(std::chrono::milliseconds(kRetry).count()));
  // Not before the lease could have expired (a renewed it at most one retry
  // period before the kill)...
  EXPECT_GE(failover, kLease - kRetry - 100ms);
  // ...and within the lease duration plus one retry period, with a margin for
  // request latency on a loaded machine.
  EXPECT_LE(failover, kLease + kRetry + 1s);
  EXPECT_EQ(Holder("failover"), "proc-b");
}

TEST_F(LeaderElectionTest, GracefulStopReleasesForImmediateTakeover) {
  auto a = StartHelper("release", "rel-a", /*release=*/true);
  ASSERT_TRUE(a->WaitForLine("leading rel-a", kEventDeadline));
  auto b = StartHelper("release", "rel-b", /*release=*/true);
  ASSERT_TRUE(b->WaitForLine("leader rel-a", kEventDeadline));

  const auto stopped = Steady::now();
  a->Kill(SIGTERM);
  ASSERT_TRUE(a->WaitForLine("stopped rel-a", kEventDeadline));
  EXPECT_EQ(a->Wait(), 0);
  const auto led = b->WaitForLine("leading rel-b", kEventDeadline);
  ASSERT_TRUE(led.has_value());
  const auto takeover = std::chrono::duration_cast<std::chrono::milliseconds>(*led - stopped);
  std::printf("takeover after release: %lld ms (lease %lld ms)\n", static_cast<long long>(takeover.count()),
              static_cast<long long>(std::chrono::milliseconds(kLease).count()));
  // One retry period of b plus latency; well under the lease duration.
  EXPECT_LT(takeover, kLease / 2 + 500ms);
  EXPECT_EQ(Holder("release"), "rel-b");
  b->Kill(SIGTERM);
  EXPECT_EQ(b->Wait(), 0);
  EXPECT_EQ(Holder("release"), "");
}

}  // namespace
}  // namespace nvdra::testing
