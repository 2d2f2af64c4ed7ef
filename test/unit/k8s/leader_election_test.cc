// The pure parts of leader election: the acquire/renew/wait decision judged
// on the local clock, the Lease spec round trip, MicroTime formatting and
// config validation. The loop itself is proved against a real API server in
// test/cluster/leader_election_test.cc.

#include "k8s/leader_election.h"

#include <gtest/gtest.h>

#include <chrono>

#include <nlohmann/json.hpp>

#include "k8s/micro_time.h"

namespace nvdra::k8s {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

TEST(MicroTimeTest, SixFractionalDigitsUtc) {
  // 2026-01-02T03:04:05.123456789Z; nanoseconds are truncated, not rounded.
  const auto t = std::chrono::sys_days{std::chrono::year{2026} / 1 / 2} + 3h + 4min + 5s + 123456789ns;
  EXPECT_EQ(FormatMicroTime(std::chrono::time_point_cast<std::chrono::system_clock::duration>(t)),
            "2026-01-02T03:04:05.123456Z");
  EXPECT_EQ(FormatMicroTime(std::chrono::system_clock::time_point{}), "1970-01-01T00:00:00.000000Z");
}

TEST(DecideLeaseTest, OwnLeaseIsRenewed) {
  const workqueue::TimePoint t0{};
  const LeaseRecord mine{"me", 15, "a", "b", 3};
  EXPECT_EQ(DecideLease(mine, t0, t0 + 1h, "me"), LeaseAction::kRenew);
}

TEST(DecideLeaseTest, ReleasedLeaseIsFree) {
  const workqueue::TimePoint t0{};
  EXPECT_EQ(DecideLease(LeaseRecord{"", 1, "a", "a", 2}, t0, t0, "me"), LeaseAction::kAcquire);
}

TEST(DecideLeaseTest, OthersLeaseExpiresByLocalObservationTime) {
  const workqueue::TimePoint seen{std::chrono::hours(5)};
  // The remote renewTime says nothing here: only when we saw the record change.
  const LeaseRecord other{"other", 15, "1999-01-01T00:00:00.000000Z", "1999-01-01T00:00:00.000000Z", 0};
  EXPECT_EQ(DecideLease(other, seen, seen, "me"), LeaseAction::kWait);
  EXPECT_EQ(DecideLease(other, seen, seen + 14999ms, "me"), LeaseAction::kWait);
  EXPECT_EQ(DecideLease(other, seen, seen + 15s, "me"), LeaseAction::kAcquire);
}

TEST(DecideLeaseTest, ExpiryUsesTheHoldersDuration) {
  const workqueue::TimePoint seen{};
  EXPECT_EQ(DecideLease(LeaseRecord{"other", 3, "", "", 0}, seen, seen + 3s, "me"), LeaseAction::kAcquire);
  EXPECT_EQ(DecideLease(LeaseRecord{"other", 60, "", "", 0}, seen, seen + 30s, "me"), LeaseAction::kWait);
}

TEST(LeaseRecordTest, RoundTripKeepsOtherFields) {
  json lease = {{"metadata", {{"name", "l"}, {"resourceVersion", "7"}}},
                {"spec", {{"holderIdentity", "a"}, {"leaseDurationSeconds", 15}, {"acquireTime", "t1"},
                          {"renewTime", "t2"}, {"leaseTransitions", 4}, {"strategy", "OldestEmulationVersion"}}}};
  const LeaseRecord record = LeaseRecord::FromLease(lease);
  EXPECT_EQ(record, (LeaseRecord{"a", 15, "t1", "t2", 4}));
  LeaseRecord released = record;
  released.holder_identity.clear();
  released.lease_duration_seconds = 1;
  released.ToLease(lease);
  EXPECT_EQ(lease["spec"]["holderIdentity"], "");
  EXPECT_EQ(lease["spec"]["leaseDurationSeconds"], 1);
  EXPECT_EQ(lease["spec"]["strategy"], "OldestEmulationVersion");
  EXPECT_EQ(lease["metadata"]["resourceVersion"], "7");
}

TEST(LeaseRecordTest, MissingSpecIsZero) {
  EXPECT_EQ(LeaseRecord::FromLease(json{{"metadata", json::object()}}), LeaseRecord{});
  json lease = json::object();
  LeaseRecord{"x", 2, "", "", 0}.ToLease(lease);
  EXPECT_FALSE(lease["spec"].contains("acquireTime"));  // empty MicroTime is left out
}

TEST(LeaderElectorTest, ValidatesConfig) {
  LeaderElectionConfig config;
  config.lease_name = "l";
  config.identity = "me";
  config.on_started_leading = [](std::stop_token) {};
  RestConfig rest;
  rest.server = "https://127.0.0.1:1";
  auto client = Client::New(rest);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE(LeaderElector::New(client->get(), config).ok());
  auto bad = config;
  bad.identity.clear();
  EXPECT_FALSE(LeaderElector::New(client->get(), bad).ok());
  bad = config;
  bad.renew_deadline = bad.lease_duration;
  EXPECT_FALSE(LeaderElector::New(client->get(), bad).ok());
  bad = config;
  bad.retry_period = 0ms;
  EXPECT_FALSE(LeaderElector::New(client->get(), bad).ok());
  bad = config;
  bad.on_started_leading = nullptr;
  EXPECT_FALSE(LeaderElector::New(client->get(), bad).ok());
}

}  // namespace
}  // namespace nvdra::k8s
