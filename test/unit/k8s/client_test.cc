// Client request building, retry rules (429 with Retry-After, transport
// errors by idempotency) and watch stream decoding, over a fake transport.

#include "k8s/client.h"
#include "k8s/rest_list_watch.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace nvdra::k8s {
namespace {

using common::StatusCode;
using common::StatusOr;
using nlohmann::json;
using namespace std::chrono_literals;

// Blocks in Read until a chunk is queued, the end is queued, or Cancel.
class FakeStream : public HttpStream {
 public:
  explicit FakeStream(std::deque<std::string> chunks, bool end) : chunks_(std::move(chunks)), end_(end) {
    head_.status = 200;
  }
  const HttpResponse& head() const override { return head_; }
  StatusOr<std::optional<std::string>> Read(std::stop_token stop) override {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, stop, [&] { return !chunks_.empty() || end_ || cancelled_; });
    if (!chunks_.empty()) {
      auto c = std::move(chunks_.front());
      chunks_.pop_front();
      return std::optional<std::string>(std::move(c));
    }
    if (end_ && !cancelled_) return std::optional<std::string>();
    return common::CancelledError("cancelled");
  }
  void Cancel() override {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    cv_.notify_all();
  }

 private:
  HttpResponse head_;
  std::mutex mutex_;
  std::condition_variable_any cv_;
  std::deque<std::string> chunks_;
  bool end_;
  bool cancelled_ = false;
};

class FakeTransport : public HttpTransport {
 public:
  StatusOr<HttpResponse> RoundTrip(const HttpRequest& request, std::stop_token) override {
    requests.push_back(request);
    if (answers.empty()) return common::InternalError("no answer queued");
    auto a = std::move(answers.front());
    answers.pop_front();
    return a;
  }
  StatusOr<std::unique_ptr<HttpStream>> OpenStream(const HttpRequest& request, std::stop_token) override {
    requests.push_back(request);
    return std::unique_ptr<HttpStream>(std::make_unique<FakeStream>(stream_chunks, stream_ends));
  }
  void Answer(int status, std::string body, std::string retry_after = "") {
    HttpResponse r;
    r.status = status;
    r.body = std::move(body);
    r.retry_after = std::move(retry_after);
    answers.emplace_back(std::move(r));
  }

  std::vector<HttpRequest> requests;
  std::deque<StatusOr<HttpResponse>> answers;
  std::deque<std::string> stream_chunks;
  bool stream_ends = true;
};

struct Fixture {
  Fixture() {
    auto t = std::make_unique<FakeTransport>();
    transport = t.get();
    RestConfig config;
    config.server = "https://fake";
    config.qps = 0;  // unlimited
    ClientOptions options;
    options.retry_backoff = workqueue::BackoffOptions{1ms, 1ms, 1.0, 0.0};
    options.max_transport_retries = 2;
    options.max_throttle_retries = 2;
    client = std::make_unique<Client>(config, std::move(t), options);
  }
  FakeTransport* transport;
  std::unique_ptr<Client> client;
};

TEST(ResourceRef, BuildsCoreGroupNamespacedAndSubresourcePaths) {
  EXPECT_EQ(resources::kPods.Path("ns", "p"), "/api/v1/namespaces/ns/pods/p");
  EXPECT_EQ(resources::kPods.Path(""), "/api/v1/pods");
  EXPECT_EQ(resources::kPods.Path("ns", "p", "status"), "/api/v1/namespaces/ns/pods/p/status");
  EXPECT_EQ(resources::kResourceSlices.Path("ignored", "s"), "/apis/resource.k8s.io/v1/resourceslices/s");
  ResourceRef crd{"resource.nvidia.com", "v1beta1", "computedomains", true};
  EXPECT_EQ(crd.Path("a"), "/apis/resource.nvidia.com/v1beta1/namespaces/a/computedomains");
  EXPECT_EQ(crd.Name(), "computedomains.resource.nvidia.com");
}

TEST(Client, ListEncodesEveryOption) {
  Fixture f;
  f.transport->Answer(200, R"({"kind":"ConfigMapList","items":[]})");
  ListOptions o;
  o.label_selector = "app in (a,b),tier!=x";
  o.field_selector = "metadata.name=c";
  o.limit = 50;
  o.continue_token = "tok/+=";
  o.resource_version = "123";
  o.resource_version_match = "NotOlderThan";
  ASSERT_TRUE(f.client->List(resources::kConfigMaps, "ns", o).ok());
  EXPECT_EQ(f.transport->requests[0].path,
            "/api/v1/namespaces/ns/configmaps?labelSelector=app%20in%20%28a%2Cb%29%2Ctier%21%3Dx"
            "&fieldSelector=metadata.name%3Dc&limit=50&continue=tok%2F%2B%3D&resourceVersion=123"
            "&resourceVersionMatch=NotOlderThan");
}

TEST(Client, ListAllFollowsContinueAndDropsRvOnLaterPages) {
  Fixture f;
  f.transport->Answer(200, R"({"metadata":{"resourceVersion":"9","continue":"c1"},"items":[{"a":1}]})");
  f.transport->Answer(200, R"({"metadata":{"resourceVersion":"9"},"items":[{"a":2},{"a":3}]})");
  ListOptions o;
  o.limit = 1;
  o.resource_version = "0";
  auto all = f.client->ListAll(resources::kConfigMaps, "", o);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ((*all)["items"].size(), 3u);
  EXPECT_EQ((*all)["metadata"]["resourceVersion"], "9");
  EXPECT_FALSE((*all)["metadata"].contains("continue"));
  EXPECT_EQ(f.transport->requests[1].path, "/api/v1/configmaps?limit=1&continue=c1");
}

TEST(Client, WritesUseTheRightVerbsBodiesAndContentTypes) {
  Fixture f;
  for (int i = 0; i < 4; ++i) f.transport->Answer(200, "{}");
  DeleteOptions d;
  d.precondition_uid = "u1";
  d.precondition_resource_version = "7";
  d.propagation_policy = "Foreground";
  d.grace_period_seconds = 0;
  ASSERT_TRUE(f.client->Delete(resources::kPods, "ns", "p", d).ok());
  const auto& del = f.transport->requests[0];
  EXPECT_EQ(del.method, "DELETE");
  EXPECT_EQ(json::parse(del.body), json::parse(R"({"kind":"DeleteOptions","apiVersion":"v1",
      "preconditions":{"uid":"u1","resourceVersion":"7"},"propagationPolicy":"Foreground","gracePeriodSeconds":0})"));

  PatchOptions p;
  p.field_manager = "mgr";
  p.force = true;
  ASSERT_TRUE(f.client->Apply(resources::kConfigMaps, "ns", {{"metadata", {{"name", "c"}}}}, p).ok());
  const auto& apply = f.transport->requests[1];
  EXPECT_EQ(apply.method, "PATCH");
  EXPECT_EQ(apply.path, "/api/v1/namespaces/ns/configmaps/c?fieldManager=mgr&force=true");
  EXPECT_EQ(apply.headers.at(0), (std::pair<std::string, std::string>("Content-Type", "application/apply-patch+yaml")));

  PatchOptions status_patch;
  status_patch.subresource = "status";
  ASSERT_TRUE(f.client->Patch(resources::kPods, "ns", "p", PatchType::kStrategicMerge, json::object(), status_patch)
                  .ok());
  EXPECT_EQ(f.transport->requests[2].path, "/api/v1/namespaces/ns/pods/p/status");
  EXPECT_EQ(f.transport->requests[2].headers.at(0).second, "application/strategic-merge-patch+json");

  WriteOptions status_update;
  status_update.subresource = "status";
  ASSERT_TRUE(f.client->Update(resources::kConfigMaps, "ns", {{"metadata", {{"name", "c"}, {"resourceVersion", "4"}}}},
                               status_update).ok());
  EXPECT_EQ(f.transport->requests[3].method, "PUT");
  EXPECT_EQ(f.transport->requests[3].path, "/api/v1/namespaces/ns/configmaps/c/status");

  EXPECT_EQ(f.client->Apply(resources::kConfigMaps, "ns", {{"metadata", {{"name", "c"}}}}, {}).status().code(),
            StatusCode::kInvalidArgument);  // no field manager
}

TEST(Client, HonoursRetryAfterOn429ThenSucceeds) {
  Fixture f;
  f.transport->Answer(429, R"({"kind":"Status","code":429,"reason":"TooManyRequests"})", "0");
  f.transport->Answer(200, R"({"metadata":{"name":"x"}})");
  auto r = f.client->Create(resources::kConfigMaps, "ns", {{"metadata", {{"name", "x"}}}});
  ASSERT_TRUE(r.ok()) << r.status();  // even a POST: APF rejected it before running it
  EXPECT_EQ(f.transport->requests.size(), 2u);
}

TEST(Client, GivesUpAfterMaxThrottleRetriesWithTheApiError) {
  Fixture f;
  for (int i = 0; i < 3; ++i) f.transport->Answer(429, R"({"kind":"Status","code":429})", "0");
  auto r = f.client->Get(resources::kConfigMaps, "ns", "x");
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(IsTooManyRequests(r));
  EXPECT_EQ(RetryAfter(r), 0s);
  EXPECT_EQ(f.transport->requests.size(), 3u);  // 1 + max_throttle_retries
}

TEST(Client, RetriesBrokenConnectionsOnlyForIdempotentRequests) {
  Fixture f;
  f.transport->answers.emplace_back(common::UnknownError("connection reset"));
  f.transport->Answer(200, "{}");
  EXPECT_TRUE(f.client->Get(resources::kConfigMaps, "ns", "x").ok());
  EXPECT_EQ(f.transport->requests.size(), 2u);

  f.transport->answers.emplace_back(common::UnknownError("connection reset"));
  auto post = f.client->Create(resources::kConfigMaps, "ns", {{"metadata", {{"name", "x"}}}});
  EXPECT_EQ(post.status().code(), StatusCode::kUnknown);  // may have run: not replayed
  EXPECT_EQ(f.transport->requests.size(), 3u);

  f.transport->answers.emplace_back(common::UnavailableError("connection refused"));
  f.transport->Answer(201, "{}");
  EXPECT_TRUE(f.client->Create(resources::kConfigMaps, "ns", {{"metadata", {{"name", "x"}}}}).ok());
  EXPECT_EQ(f.transport->requests.size(), 5u);  // never sent: replayed even for POST

  f.transport->answers.emplace_back(common::UnknownError("reset"));
  EXPECT_EQ(f.client->Patch(resources::kPods, "ns", "p", PatchType::kJson, json::array()).status().code(),
            StatusCode::kUnknown);
  EXPECT_EQ(f.transport->requests.size(), 6u);

  for (int i = 0; i < 3; ++i) f.transport->answers.emplace_back(common::UnavailableError("refused"));
  EXPECT_EQ(f.client->Get(resources::kConfigMaps, "ns", "x").status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(f.transport->requests.size(), 9u);  // 1 + max_transport_retries
}

TEST(Watch, DecodesEventsSplitAcrossChunksAndTracksResourceVersion) {
  Fixture f;
  f.transport->stream_chunks = {
      R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"1"}}})" "\n" R"({"type":"MODI)",
      R"(FIED","object":{"metadata":{"name":"a","resourceVersion":"2"}}})" "\n \r\n\n",  // blank lines skipped
      R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"5"}}})" "\n"
      R"({"type":"DELETED","object":{"metadata":{"name":"a","resourceVersion":"6"}}})"};
  WatchOptions o;
  o.resource_version = "0";
  o.timeout_seconds = 30;
  auto w = f.client->Watch(resources::kConfigMaps, "ns", o);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(f.transport->requests[0].path,
            "/api/v1/namespaces/ns/configmaps?watch=1&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=30");
  std::vector<WatchEventType> types;
  while (true) {
    auto e = (*w)->Next();
    ASSERT_TRUE(e.ok()) << e.status();
    if (!e->has_value()) break;
    types.push_back((*e)->type);
  }
  EXPECT_EQ(types, (std::vector<WatchEventType>{WatchEventType::kAdded, WatchEventType::kModified,
                                                WatchEventType::kBookmark, WatchEventType::kDeleted}));
  EXPECT_EQ((*w)->last_resource_version(), "6");
}

TEST(Watch, ErrorEventEndsTheStreamAsGone) {
  Fixture f;
  f.transport->stream_chunks = {
      R"x({"type":"ERROR","object":{"kind":"Status","status":"Failure","message":"too old resource version: 1 (50)","reason":"Expired","code":410}})x"
      "\n"};
  f.transport->stream_ends = false;
  auto w = f.client->Watch(resources::kConfigMaps, "ns");
  ASSERT_TRUE(w.ok());
  auto e = (*w)->Next();
  EXPECT_TRUE(IsGone(e.status())) << e.status();
  ASSERT_TRUE(e.api_error().has_value());
  EXPECT_EQ(e.api_error()->http_code, 410);
}

TEST(Watch, StopFromAnotherThreadEndsABlockedNext) {
  Fixture f;
  f.transport->stream_ends = false;  // no data, ever
  auto w = f.client->Watch(resources::kConfigMaps, "ns");
  ASSERT_TRUE(w.ok());
  WatchStream* stream = w->get();
  std::jthread stopper([stream] { stream->Stop(); });
  auto e = stream->Next();
  EXPECT_EQ(e.status().code(), StatusCode::kCancelled);
}

TEST(Watch, RejectsMalformedLines) {
  EXPECT_EQ(ParseWatchEvent("nope").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseWatchEvent(R"({"type":"SOMETHING","object":{}})").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseWatchEvent(R"({"type":"ADDED"})").status().code(), StatusCode::kInvalidArgument);
}

// The informer's list: pages visited item by item; an expired continue token
// starts the list over (visitor told to forget); resourceVersion only on the
// first page.
TEST(RestListWatch, ListEachVisitsItemsOfEveryPageAndRestartsOnExpiredContinue) {
  Fixture f;
  f.transport->Answer(200, R"({"metadata":{"resourceVersion":"9","continue":"c1"},
      "items":[{"metadata":{"name":"a","labels":{"items":"x"}}},{"metadata":{"name":"b"}}]})");
  f.transport->Answer(410, R"({"kind":"Status","code":410,"reason":"Expired","message":"too old"})");
  f.transport->Answer(200, R"({"metadata":{"resourceVersion":"11","continue":"c2"},"items":[{"metadata":{"name":"a"}}]})");
  f.transport->Answer(200, R"({"kind":"ConfigMapList","items":[{"metadata":{"name":"c"},"data":{"items":[1]}}],
      "metadata":{"resourceVersion":"11"}})");
  RestListWatch list_watch(*f.client, resources::kConfigMaps, "ns");
  std::vector<json> items;
  int restarts = 0;
  cache::ListVisitor visitor;
  visitor.on_item = [&](json& item) { items.push_back(std::move(item)); };
  visitor.on_restart = [&] {
    ++restarts;
    items.clear();
  };
  cache::ListOptions options;
  options.resource_version = "0";
  options.page_size = 1;
  StatusOr<std::string> rv = list_watch.ListEach(options, {}, visitor);
  ASSERT_TRUE(rv.ok()) << rv.status();
  EXPECT_EQ(*rv, "11");
  EXPECT_EQ(restarts, 1);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0], json::parse(R"({"metadata":{"name":"a"}})"));
  EXPECT_EQ(items[1], json::parse(R"({"metadata":{"name":"c"},"data":{"items":[1]}})"))
      << "nested \"items\" keys are not list items";
  ASSERT_EQ(f.transport->requests.size(), 4u);
  EXPECT_EQ(f.transport->requests[0].path, "/api/v1/namespaces/ns/configmaps?limit=1&resourceVersion=0");
  EXPECT_EQ(f.transport->requests[1].path, "/api/v1/namespaces/ns/configmaps?limit=1&continue=c1");
  EXPECT_EQ(f.transport->requests[3].path, "/api/v1/namespaces/ns/configmaps?limit=1&continue=c2");

  // List() collects the same way.
  f.transport->Answer(200, R"({"metadata":{"resourceVersion":"12"},"items":[{"metadata":{"name":"d"}}]})");
  StatusOr<cache::ListResult> listed = list_watch.List(options, {});
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->resource_version, "12");
  ASSERT_EQ(listed->items.size(), 1u);
  EXPECT_EQ(listed->items[0]["metadata"]["name"], "d");
}

TEST(RestListWatch, ListEachRejectsABodyThatIsNotJson) {
  Fixture f;
  f.transport->Answer(200, R"({"metadata":{},"items":[{"metadata":{"name":"a"}},)");
  RestListWatch list_watch(*f.client, resources::kConfigMaps, "");
  cache::ListVisitor visitor;
  visitor.on_item = [](json&) {};
  StatusOr<std::string> rv = list_watch.ListEach({}, {}, visitor);
  EXPECT_EQ(rv.status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace nvdra::k8s
