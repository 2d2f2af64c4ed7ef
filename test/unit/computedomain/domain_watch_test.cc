// DomainWatch over scripted list-watches (no API server): lookup by UID,
// readiness from the clique entry, this node's daemon pod or the
// ComputeDomain's status.nodes, and
// WaitFor woken by a watch event rather than a timer; Cancel ends waits; the
// deleted-domain handler.

#include "computedomain/domain_watch.h"

#include <chrono>
#include <future>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fake_list_watch.h"

namespace nvdra::computedomain {
namespace {

using k8s::cache::WatchEventType;
using k8s::cache::testing::FakeApi;
using k8s::cache::testing::kTestTimeout;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr char kNode[] = "node-a";
constexpr char kDriverNs[] = "driver";
constexpr char kClique[] = "cluster.7";

json Domain(const std::string& uid, const std::string& rv, const json& nodes = json()) {
  json cd = {{"apiVersion", "resource.nvidia.com/v1beta1"},
             {"kind", "ComputeDomain"},
             {"metadata", {{"name", "cd-" + uid}, {"namespace", "work"}, {"uid", uid}, {"resourceVersion", rv}}},
             {"spec", {{"numNodes", 1}}}};
  if (!nodes.is_null()) cd["status"] = {{"nodes", nodes}};
  return cd;
}

json Clique(const std::string& uid, const std::string& rv, const std::string& status,
            const std::string& clique = kClique) {
  return {{"apiVersion", "resource.nvidia.com/v1beta1"},
          {"kind", "ComputeDomainClique"},
          {"metadata", {{"name", uid + "." + clique}, {"namespace", kDriverNs}, {"resourceVersion", rv}}},
          {"daemons", json::array({{{"nodeName", kNode}, {"ipAddress", "10.0.0.1"}, {"cliqueID", clique},
                                    {"index", 0}, {"status", status}}})}};
}

// This node's (or `node`'s) IMEX daemon pod of domain `uid`, as the daemon
// labels and annotates it.
json DaemonPod(const std::string& uid, const std::string& rv, const std::string& status,
               const std::string& clique = kClique, const std::string& node = kNode) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", "daemon-" + uid + "-" + node},
            {"namespace", kDriverNs},
            {"resourceVersion", rv},
            {"labels", {{"resource.nvidia.com/computeDomain", uid},
                        {"resource.nvidia.com/computeDomain.cliqueID", clique}}},
            {"annotations", {{"resource.nvidia.com/computeDomain.daemonStatus", status}}}}},
          {"spec", {{"nodeName", node}}}};
}

// This node, with the domain label `uid` ("" for none).
json Node(const std::string& uid, const std::string& rv) {
  json node = {{"apiVersion", "v1"},
               {"kind", "Node"},
               {"metadata", {{"name", kNode}, {"resourceVersion", rv}, {"labels", json::object()}}}};
  if (!uid.empty()) node["metadata"]["labels"]["resource.nvidia.com/computeDomain"] = uid;
  return node;
}

class DomainWatchTest : public ::testing::Test {
 protected:
  void Start(bool cliques_enabled = true, bool node = false, const std::string& clique_id = kClique) {
    DomainWatch::ListWatchSource cliques;
    if (cliques_enabled) cliques = [this] { return cliques_.NewListWatch(); };
    auto started = DomainWatch::StartWith(domains_.NewListWatch(), std::move(cliques),
                                          cliques_enabled ? pods_.NewListWatch() : nullptr,
                                          {.node_name = kNode,
                                           .clique_id = clique_id,
                                           .driver_namespace = kDriverNs,
                                           .cliques_enabled = cliques_enabled,
                                           .sync_timeout = std::chrono::seconds(10)},
                                          node ? nodes_.NewListWatch() : nullptr);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    watch_ = std::move(*started);
  }
  bool Ready(const std::string& uid) {
    std::optional<k8s::ComputeDomain> cd = watch_->FindByUid(uid);
    return cd && watch_->NodeReady(*cd, kClique);
  }

  FakeApi domains_;
  FakeApi cliques_;
  FakeApi pods_;
  FakeApi nodes_;
  std::unique_ptr<DomainWatch> watch_;
};

TEST_F(DomainWatchTest, CachedNodeDomainLabelFollowsThisNode) {
  domains_.QueueList({}, "1");
  cliques_.QueueList({}, "1");
  nodes_.QueueList({Node("", "5")}, "5");
  Start(/*cliques_enabled=*/true, /*node=*/true);
  // The node informer is not waited for at start: wait for its list here.
  auto stream = nodes_.WaitForWatch(0).stream;
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(watch_->WaitFor([&] { return watch_->CachedNodeDomainLabel().has_value(); },
                              Clock::now() + kTestTimeout));
  EXPECT_EQ(watch_->CachedNodeDomainLabel(), std::optional<std::string>(""));
  auto labelled = std::async(std::launch::async, [&] {
    return watch_->WaitFor([&] { return watch_->CachedNodeDomainLabel() == "u1"; },
                           Clock::now() + std::chrono::hours(1));
  });
  stream->Push(WatchEventType::kModified, Node("u1", "6"));
  ASSERT_EQ(labelled.wait_for(kTestTimeout), std::future_status::ready) << "the node event wakes waiters";
  EXPECT_TRUE(labelled.get());
  stream->Push(WatchEventType::kModified, Node("", "7"));
  EXPECT_TRUE(watch_->WaitFor([&] { return watch_->CachedNodeDomainLabel() == ""; }, Clock::now() + kTestTimeout));
}

TEST_F(DomainWatchTest, NoCachedNodeLabelWithoutTheNodeInformerOrBeforeItsList) {
  domains_.QueueList({}, "1");
  cliques_.QueueList({}, "1");
  Start();
  EXPECT_FALSE(watch_->CachedNodeDomainLabel().has_value()) << "no node informer: the caller reads the Node";
}

TEST_F(DomainWatchTest, FindsDomainsByUid) {
  domains_.QueueList({Domain("u1", "5"), Domain("u2", "6")}, "6");
  cliques_.QueueList({}, "1");
  Start();
  ASSERT_TRUE(watch_->FindByUid("u2").has_value());
  EXPECT_EQ(watch_->FindByUid("u2")->name(), "cd-u2");
  EXPECT_FALSE(watch_->FindByUid("u3").has_value());
}

TEST_F(DomainWatchTest, ReadyFromTheCliqueEntryOrTheDomainStatus) {
  domains_.QueueList({Domain("u1", "5"),
                      Domain("u2", "6", json::array({{{"name", kNode}, {"status", "Ready"}}})),
                      Domain("u3", "7", json::array({{{"name", "other"}, {"status", "Ready"}}}))},
                     "7");
  cliques_.QueueList({Clique("u1", "3", "Ready")}, "3");
  Start();
  EXPECT_TRUE(Ready("u1")) << "this node's clique entry is Ready";
  EXPECT_TRUE(Ready("u2")) << "status.nodes says Ready (the fallback)";
  EXPECT_FALSE(Ready("u3")) << "only another node is Ready";
  // Without a clique id only status.nodes counts.
  std::optional<k8s::ComputeDomain> cd = watch_->FindByUid("u1");
  ASSERT_TRUE(cd.has_value());
  EXPECT_FALSE(watch_->NodeReady(*cd, ""));
}

// A plugin lists and watches only the cliques of its node's clique ID (by
// label), so that in a rack of several cliques it does not receive the
// others' writes; a new clique ID swaps the informer, and "" watches none.
TEST_F(DomainWatchTest, OnlyTheCliquesOfThisNodesCliqueIdAreWatchedAndANewIdSwapsThem) {
  domains_.QueueList({Domain("u1", "5")}, "5");
  cliques_.QueueList({Clique("u1", "3", "Ready")}, "3");
  Start();
  ASSERT_EQ(cliques_.ListOptionsSeen().size(), 1u);
  EXPECT_EQ(cliques_.ListOptionsSeen()[0].label_selector,
            std::string("resource.nvidia.com/computeDomain.cliqueID=") + kClique);
  EXPECT_TRUE(Ready("u1"));

  cliques_.QueueList({}, "4");
  watch_->SetCliqueId("cluster.9");
  ASSERT_TRUE(cliques_.WaitForListCalls(2));
  EXPECT_EQ(cliques_.ListOptionsSeen()[1].label_selector, "resource.nvidia.com/computeDomain.cliqueID=cluster.9");
  std::optional<k8s::ComputeDomain> cd = watch_->FindByUid("u1");
  ASSERT_TRUE(cd.has_value());
  EXPECT_FALSE(Ready("u1")) << "the old clique ID's informer is gone";
  // The new informer's watch (call #1; #0 was the first informer's) feeds waiters.
  auto stream = cliques_.WaitForWatch(1).stream;
  ASSERT_NE(stream, nullptr);
  stream->Push(WatchEventType::kAdded, Clique("u1", "6", "Ready", "cluster.9"));
  EXPECT_TRUE(watch_->WaitFor([&] { return watch_->NodeReady(*cd, "cluster.9"); }, Clock::now() + kTestTimeout));

  watch_->SetCliqueId("");
  EXPECT_FALSE(watch_->NodeReady(*cd, "cluster.9")) << "no clique informer without a clique ID";
  EXPECT_EQ(cliques_.ListCalls(), 2u);
}

TEST_F(DomainWatchTest, NoCliqueInformerWhileTheNodeHasNoCliqueId) {
  domains_.QueueList({Domain("u1", "5", json::array({{{"name", kNode}, {"status", "Ready"}}}))}, "5");
  Start(/*cliques_enabled=*/true, /*node=*/false, /*clique_id=*/"");
  EXPECT_EQ(cliques_.ListWatchesMade(), 0u);
  EXPECT_TRUE(Ready("u1")) << "status.nodes still counts";
}

TEST_F(DomainWatchTest, WaitForWakesOnTheWatchEvent) {
  domains_.QueueList({Domain("u1", "5")}, "5");
  cliques_.QueueList({Clique("u1", "3", "NotReady")}, "3");
  Start();
  EXPECT_FALSE(Ready("u1"));
  // A deadline far beyond the test's bound: only the event can end the wait.
  auto waiting = std::async(std::launch::async, [&] {
    return watch_->WaitFor([&] { return Ready("u1"); }, Clock::now() + std::chrono::hours(1));
  });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  auto stream = cliques_.WaitForWatch(0).stream;
  ASSERT_NE(stream, nullptr);
  stream->Push(WatchEventType::kModified, Clique("u1", "4", "Ready"));
  ASSERT_EQ(waiting.wait_for(kTestTimeout), std::future_status::ready);
  EXPECT_TRUE(waiting.get());
}

TEST_F(DomainWatchTest, ReadyFromThisNodesDaemonPodBeforeTheCliqueSaysSo) {
  domains_.QueueList({Domain("u1", "5"), Domain("u2", "6"), Domain("u3", "7"), Domain("u4", "8"), Domain("u5", "9")},
                     "9");
  cliques_.QueueList({Clique("u1", "3", "NotReady")}, "3");
  json terminating = DaemonPod("u2", "12", "Ready");
  terminating["metadata"]["deletionTimestamp"] = "2026-11-23T23:00:00Z";
  pods_.QueueList({DaemonPod("u1", "10", "NotReady"), terminating, DaemonPod("u3", "13", "Ready", "other.1"),
                   DaemonPod("u4", "14", "Ready", kClique, "node-b")},
                  "14");
  Start();
  // The pod informer is not waited for at start; wait for its list here.
  auto stream = pods_.WaitForWatch(0).stream;
  ASSERT_NE(stream, nullptr);
  EXPECT_FALSE(Ready("u1")) << "the pod and the clique both say NotReady";
  EXPECT_FALSE(Ready("u2")) << "a terminating daemon is leaving";
  EXPECT_FALSE(Ready("u3")) << "a daemon of another clique";
  EXPECT_FALSE(Ready("u4")) << "another node's daemon";
  // The daemon turns Ready on its pod; the clique entry still says NotReady.
  auto waiting = std::async(std::launch::async, [&] {
    return watch_->WaitFor([&] { return Ready("u1"); }, Clock::now() + std::chrono::hours(1));
  });
  stream->Push(WatchEventType::kModified, DaemonPod("u1", "15", "Ready"));
  ASSERT_EQ(waiting.wait_for(kTestTimeout), std::future_status::ready);
  EXPECT_TRUE(waiting.get());
  stream->Push(WatchEventType::kAdded, DaemonPod("u5", "16", "Ready"));
  EXPECT_TRUE(watch_->WaitFor([&] { return Ready("u5"); }, Clock::now() + kTestTimeout))
      << "no clique object yet, the pod alone";
}

TEST_F(DomainWatchTest, WaitForADomainThatAppearsLater) {
  domains_.QueueList({}, "1");
  cliques_.QueueList({}, "1");
  Start();
  auto waiting = std::async(std::launch::async, [&] {
    return watch_->WaitFor([&] { return watch_->FindByUid("late").has_value(); },
                           Clock::now() + std::chrono::hours(1));
  });
  auto stream = domains_.WaitForWatch(0).stream;
  ASSERT_NE(stream, nullptr);
  stream->Push(WatchEventType::kAdded, Domain("late", "2"));
  ASSERT_EQ(waiting.wait_for(kTestTimeout), std::future_status::ready);
  EXPECT_TRUE(waiting.get());
}

TEST_F(DomainWatchTest, DeletedHandlerRunsWhenTheDomainIsGone) {
  domains_.QueueList({Domain("u1", "5"), Domain("u2", "6")}, "6");
  cliques_.QueueList({}, "1");
  Start();
  std::promise<bool> called;
  watch_->SetDomainDeletedHandler([&] { called.set_value(!watch_->FindByUid("u1").has_value()); });
  auto stream = domains_.WaitForWatch(0).stream;
  ASSERT_NE(stream, nullptr);
  stream->Push(WatchEventType::kModified, Domain("u2", "7"));  // no call for an update
  stream->Push(WatchEventType::kDeleted, Domain("u1", "8"));
  std::future<bool> result = called.get_future();
  ASSERT_EQ(result.wait_for(kTestTimeout), std::future_status::ready);
  EXPECT_TRUE(result.get()) << "the cache no longer holds the domain when the handler runs";
  watch_->SetDomainDeletedHandler(nullptr);  // a later delete calls nothing
  stream->Push(WatchEventType::kDeleted, Domain("u2", "9"));
  EXPECT_TRUE(watch_->WaitFor([&] { return !watch_->FindByUid("u2").has_value(); }, Clock::now() + kTestTimeout));
}

TEST_F(DomainWatchTest, DeadlinePassesAndCancelEndsWaits) {
  domains_.QueueList({Domain("u1", "5")}, "5");
  cliques_.QueueList({}, "1");
  Start();
  EXPECT_FALSE(watch_->WaitFor([] { return false; }, Clock::now() + std::chrono::milliseconds(1)));
  auto waiting = std::async(std::launch::async, [&] {
    return watch_->WaitFor([] { return false; }, Clock::now() + std::chrono::hours(1));
  });
  watch_->Cancel();
  ASSERT_EQ(waiting.wait_for(kTestTimeout), std::future_status::ready);
  EXPECT_FALSE(waiting.get());
  EXPECT_FALSE(watch_->WaitFor([] { return false; }, Clock::now() + std::chrono::hours(1)))
      << "a wait after Cancel returns at once";
}

TEST_F(DomainWatchTest, WithoutCliquesOnlyTheDomainStatusCounts) {
  domains_.QueueList({Domain("u1", "5", json::array({{{"name", kNode}, {"status", "NotReady"}}}))}, "5");
  Start(/*cliques_enabled=*/false);
  EXPECT_FALSE(Ready("u1"));
  auto stream = domains_.WaitForWatch(0).stream;
  ASSERT_NE(stream, nullptr);
  stream->Push(WatchEventType::kModified, Domain("u1", "6", json::array({{{"name", kNode}, {"status", "Ready"}}})));
  EXPECT_TRUE(watch_->WaitFor([&] { return Ready("u1"); }, Clock::now() + kTestTimeout));
}

}  // namespace
}  // namespace nvdra::computedomain
