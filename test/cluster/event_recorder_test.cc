// The event recorder (src/k8s/event_recorder.h) against a real API server:
// identical events aggregate into one events.k8s.io/v1 Event whose
// series.count is the number of emits, different reasons are different
// Events, the fields read back as `kubectl get events` shows them, a hot loop
// costs a handful of requests, and the per-object rate limit drops a flood of
// distinct events.

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "k8s/api_error.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/event_recorder.h"
#include "cluster_client.h"
#include "test_cluster.h"

namespace nvdra::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using k8s::EventType;

constexpr char kNs[] = "event-recorder-test";
constexpr auto kIdleDeadline = 60s;  // generous: the machine is shared

class EventRecorderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterClient started;
    ASSERT_EQ(StartClusterClient(started, kNs), "");
    cluster_ = started.cluster.release();
    client_ = started.client.release();
  }
  static void TearDownTestSuite() {
    delete client_;
    delete cluster_;
  }

  static k8s::ObjectReference MakeConfigMap(const std::string& name) {
    auto cm = client_->Create(k8s::resources::kConfigMaps, kNs,
                              {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", name}}}});
    EXPECT_TRUE(cm.ok()) << cm.status();
    json object = cm.ok() ? *cm : json::object();
    // Built-in kinds come back without apiVersion/kind on some paths; be explicit.
    object["apiVersion"] = "v1";
    object["kind"] = "ConfigMap";
    return k8s::ObjectReference::FromObject(object);
  }

  static std::unique_ptr<k8s::EventRecorder> NewRecorder(k8s::EventRecorderOptions options = {}) {
    options.reporting_controller = "nvidia.com/nvdra-test";
    options.reporting_instance = "test-0";
    auto recorder = k8s::EventRecorder::New(client_, options);
    EXPECT_TRUE(recorder.ok()) << recorder.status();
    return std::move(recorder).value();
  }

  // The Events about `name`, by reason.
  static std::multimap<std::string, json> EventsAbout(const std::string& name) {
    std::multimap<std::string, json> out;
    auto list = client_->ListAll(k8s::resources::kEvents, kNs);
    EXPECT_TRUE(list.ok()) << list.status();
    if (!list.ok()) return out;
    for (const auto& item : (*list)["items"]) {
      if (item["regarding"].value("name", "") == name) out.emplace(item.value("reason", ""), item);
    }
    return out;
  }

  static inline TestCluster* cluster_ = nullptr;
  static inline k8s::Client* client_ = nullptr;
};

TEST_F(EventRecorderTest, IdenticalEventsAggregateIntoOneSeries) {
  const k8s::ObjectReference cm = MakeConfigMap("aggregated");
  auto recorder = NewRecorder();
  for (int i = 0; i < 50; ++i) recorder->Emit(cm, EventType::kNormal, "Synced", "Sync", "configuration synced");
  recorder->Emit(cm, EventType::kWarning, "SyncFailed", "Sync", "device 3 is gone");
  recorder->Emit(cm, EventType::kNormal, "Prepared", "Prepare", "claim prepared");
  ASSERT_TRUE(recorder->WaitIdle(kIdleDeadline));

  const auto stats = recorder->stats();
  EXPECT_EQ(stats.emitted, 52u);
  EXPECT_EQ(stats.created, 3u);
  EXPECT_EQ(stats.failed, 0u);
  EXPECT_EQ(stats.dropped_full + stats.dropped_rate_limited, 0u);
  EXPECT_LT(stats.patched, 49u);  // coalesced, not one request per emit

  const auto events = EventsAbout("aggregated");
  ASSERT_EQ(events.size(), 3u);
  const json& synced = events.find("Synced")->second;
  EXPECT_EQ(synced["series"]["count"], 50) << synced.dump();
  EXPECT_EQ(synced["type"], "Normal");
  EXPECT_EQ(synced["action"], "Sync");
  EXPECT_EQ(synced["note"], "configuration synced");
  EXPECT_EQ(synced["reportingController"], "nvidia.com/nvdra-test");
  EXPECT_EQ(synced["reportingInstance"], "test-0");
  EXPECT_EQ(synced["regarding"]["kind"], "ConfigMap");
  EXPECT_EQ(synced["regarding"]["namespace"], kNs);
  EXPECT_EQ(synced["regarding"]["uid"], cm.uid);
  const std::regex micro_time(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)");
  EXPECT_TRUE(std::regex_match(synced.value("eventTime", ""), micro_time)) << synced.dump();
  EXPECT_TRUE(std::regex_match(synced["series"].value("lastObservedTime", ""), micro_time)) << synced.dump();

  const json& failed = events.find("SyncFailed")->second;
  EXPECT_EQ(failed["type"], "Warning");
  EXPECT_EQ(failed["note"], "device 3 is gone");
  EXPECT_FALSE(failed.contains("series"));  // a single occurrence has no series
  EXPECT_EQ(events.count("Prepared"), 1u);

  // Later identical emits (within the window) keep counting on the same Event.
  for (int i = 0; i < 5; ++i) recorder->Emit(cm, EventType::kNormal, "Synced", "Sync", "configuration synced");
  ASSERT_TRUE(recorder->WaitIdle(kIdleDeadline));
  const auto again = EventsAbout("aggregated");
  EXPECT_EQ(again.size(), 3u);
  EXPECT_EQ(again.find("Synced")->second["series"]["count"], 55);
}

TEST_F(EventRecorderTest, HotLoopCostsAFewRequests) {
  const k8s::ObjectReference cm = MakeConfigMap("hot");
  auto recorder = NewRecorder();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10000; ++i) recorder->Emit(cm, EventType::kWarning, "Retry", "Reconcile", "still failing");
  const auto emit_time = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(recorder->WaitIdle(kIdleDeadline));
  const auto stats = recorder->stats();
  std::printf("10000 emits: %lld us in Emit, %llu creates, %llu patches\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(emit_time).count()),
              static_cast<unsigned long long>(stats.created), static_cast<unsigned long long>(stats.patched));
  EXPECT_EQ(stats.created, 1u);
  EXPECT_LE(stats.created + stats.patched, 26u);  // at most the per-object burst
  const auto events = EventsAbout("hot");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events.begin()->second["series"]["count"], 10000);
}

TEST_F(EventRecorderTest, FloodOfDistinctEventsIsRateLimitedPerObject) {
  const k8s::ObjectReference flooded = MakeConfigMap("flooded");
  const k8s::ObjectReference quiet = MakeConfigMap("quiet");
  k8s::EventRecorderOptions options;
  options.per_object_burst = 3;
  options.per_object_refill = 1h;
  auto recorder = NewRecorder(options);
  for (int i = 0; i < 10; ++i) {
    recorder->Emit(flooded, EventType::kNormal, "Tick", "Count", "tick " + std::to_string(i));
  }
  recorder->Emit(quiet, EventType::kNormal, "Tick", "Count", "tick");  // its own budget
  ASSERT_TRUE(recorder->WaitIdle(kIdleDeadline));
  const auto stats = recorder->stats();
  EXPECT_EQ(stats.created, 4u);
  EXPECT_EQ(stats.dropped_rate_limited, 7u);
  EXPECT_EQ(EventsAbout("flooded").size(), 3u);
  EXPECT_EQ(EventsAbout("quiet").size(), 1u);
}

}  // namespace
}  // namespace nvdra::testing
