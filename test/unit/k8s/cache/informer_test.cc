#include "k8s/cache/informer.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fake_list_watch.h"
#include "k8s/cache/shared_informer_factory.h"
#include "k8s/workqueue/clock.h"

namespace nvdra::k8s::cache {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::Bookmark;
using testing::EventRecorder;
using testing::FakeApi;
using testing::kTestTimeout;
using testing::Obj;
using Strings = std::vector<std::string>;

Strings Sorted(Strings s) {
  std::sort(s.begin(), s.end());
  return s;
}
Strings Slice(const Strings& s, std::size_t from, std::size_t to) {
  return Strings(s.begin() + static_cast<std::ptrdiff_t>(from),
                 s.begin() + static_cast<std::ptrdiff_t>(std::min(to, s.size())));
}

InformerOptions TestOptions(workqueue::Clock* clock = &workqueue::RealClock()) {
  InformerOptions options;
  options.description = "test";
  options.label_selector = "app=gpu";
  options.field_selector = "spec.nodeName=n1";
  options.clock = clock;
  options.random = [] { return 0.5; };
  options.reconnect_backoff = {seconds(1), seconds(4), 2.0, 1.0};
  options.min_watch_duration = workqueue::Duration::zero();
  return options;
}

TEST(InformerTest, ListsThenWatchesFromTheListVersionAndDeliversEvents) {
  FakeApi api;
  EventRecorder recorder;
  Informer informer(api.NewListWatch(), TestOptions());
  informer.AddEventHandler(recorder.Handler());
  api.QueueList({Obj("a", "1"), Obj("b", "1")}, "10");
  informer.Start();
  ASSERT_TRUE(informer.WaitForSyncUntil(workqueue::RealClock().Now() + kTestTimeout));
  EXPECT_EQ(Sorted(recorder.WaitFor(2)), (Strings{"add ns/a@1", "add ns/b@1"}));
  EXPECT_EQ(informer.store().size(), 2u);

  const std::vector<ListOptions> lists = api.ListOptionsSeen();
  ASSERT_EQ(lists.size(), 1u);
  EXPECT_EQ(lists[0].label_selector, "app=gpu");
  EXPECT_EQ(lists[0].field_selector, "spec.nodeName=n1");
  EXPECT_EQ(lists[0].resource_version, "0") << "the first list may come from the watch cache";

  testing::WatchCall watch = api.WaitForWatch(0);
  ASSERT_NE(watch.stream, nullptr);
  EXPECT_EQ(watch.options.resource_version, "10");
  EXPECT_TRUE(watch.options.allow_bookmarks);
  EXPECT_EQ(watch.options.label_selector, "app=gpu");
  EXPECT_EQ(watch.options.field_selector, "spec.nodeName=n1");
  // [watch_timeout, 2 * watch_timeout) with the random draw pinned at 0.5.
  EXPECT_EQ(watch.options.timeout, seconds(450));

  watch.stream->Push(WatchEventType::kAdded, Obj("c", "11"));
  watch.stream->Push(WatchEventType::kModified, Obj("a", "12"));
  watch.stream->Push(WatchEventType::kDeleted, Obj("b", "13"));
  EXPECT_EQ(Slice(recorder.WaitFor(5), 2, 5),
            (Strings{"add ns/c@11", "update ns/a@1->12", "delete ns/b@13"}));
  EXPECT_EQ(informer.store().ResourceVersion(), "13");
  EXPECT_EQ((*informer.store().Get("ns/a"))["metadata"]["resourceVersion"], "12");
  EXPECT_EQ(informer.store().Get("ns/b"), nullptr);
}

// The bookmark that ends a streaming list's initial events.
nlohmann::json InitialEventsEnd(const std::string& rv) {
  nlohmann::json bookmark = Bookmark(rv);
  bookmark["metadata"]["annotations"] = {{"k8s.io/initial-events-end", "true"}};
  return bookmark;
}

TEST(InformerTest, StreamingListIsOneWatchWhoseInitialEventsAreTheList) {
  FakeApi api;
  EventRecorder recorder;
  InformerOptions options = TestOptions();
  options.streaming_list = true;
  Informer informer(api.NewListWatch(), options);
  informer.AddEventHandler(recorder.Handler());
  informer.Start();
  testing::WatchCall watch = api.WaitForWatch(0);
  ASSERT_NE(watch.stream, nullptr);
  EXPECT_TRUE(watch.options.send_initial_events);
  EXPECT_EQ(watch.options.resource_version, "") << "a consistent read (resourceVersionMatch=NotOlderThan)";
  EXPECT_EQ(watch.options.label_selector, "app=gpu");
  EXPECT_EQ(watch.options.field_selector, "spec.nodeName=n1");
  watch.stream->Push(WatchEventType::kAdded, Obj("a", "1"));
  watch.stream->Push(WatchEventType::kBookmark, Bookmark("5"));  // a plain bookmark does not end the list
  watch.stream->Push(WatchEventType::kAdded, Obj("b", "2"));
  EXPECT_FALSE(informer.HasSynced()) << "synced only once the initial events end";
  watch.stream->Push(WatchEventType::kBookmark, InitialEventsEnd("10"));
  ASSERT_TRUE(informer.WaitForSyncUntil(workqueue::RealClock().Now() + kTestTimeout));
  EXPECT_EQ(Sorted(recorder.WaitFor(2)), (Strings{"add ns/a@1", "add ns/b@2"}));
  EXPECT_EQ(informer.store().ResourceVersion(), "10");
  // The same stream goes on with the changes.
  watch.stream->Push(WatchEventType::kModified, Obj("a", "11"));
  EXPECT_EQ(Slice(recorder.WaitFor(3), 2, 3), (Strings{"update ns/a@1->11"}));
  watch.stream->End();
  testing::WatchCall resumed = api.WaitForWatch(1);
  EXPECT_FALSE(resumed.options.send_initial_events) << "a resumed watch is a plain watch";
  EXPECT_EQ(resumed.options.resource_version, "11");
  EXPECT_EQ(api.ListCalls(), 0u) << "no list request at all";
}

TEST(InformerTest, StreamingListRefusedByTheServerListsAndWatchesInstead) {
  FakeApi api;
  EventRecorder recorder;
  InformerOptions options = TestOptions();
  options.streaming_list = true;
  Informer informer(api.NewListWatch(), options);
  informer.AddEventHandler(recorder.Handler());
  // 422, as an API server with the WatchList gate off answers sendInitialEvents.
  api.FailNextWatch(common::InvalidArgumentError("sendInitialEvents is forbidden"));
  api.QueueList({Obj("a", "1")}, "10");
  informer.Start();
  ASSERT_TRUE(informer.WaitForSyncUntil(workqueue::RealClock().Now() + kTestTimeout));
  EXPECT_EQ(recorder.WaitFor(1), (Strings{"add ns/a@1"}));
  testing::WatchCall watch = api.WaitForWatch(1);
  EXPECT_FALSE(watch.options.send_initial_events);
  EXPECT_EQ(watch.options.resource_version, "10");
  EXPECT_EQ(api.ListCalls(), 1u);
}

TEST(InformerTest, StreamingListThatEndsEarlyIsStreamedAgainAndNothingHalfIsCached) {
  FakeApi api;
  EventRecorder recorder;
  workqueue::FakeClock clock;
  InformerOptions options = TestOptions(&clock);
  options.streaming_list = true;
  Informer informer(api.NewListWatch(), options);
  informer.AddEventHandler(recorder.Handler());
  informer.Start();
  testing::WatchCall first = api.WaitForWatch(0);
  first.stream->Push(WatchEventType::kAdded, Obj("a", "1"));
  first.stream->Fail(common::UnavailableError("connection reset"));
  // A backoff, then a whole new streaming list.
  const std::optional<workqueue::TimePoint> wake = clock.WaitForPendingDeadline(kTestTimeout);
  ASSERT_TRUE(wake.has_value()) << "the informer did not back off";
  EXPECT_FALSE(informer.HasSynced());
  clock.Advance(*wake - clock.Now());
  testing::WatchCall second = api.WaitForWatch(1);
  EXPECT_TRUE(second.options.send_initial_events);
  second.stream->Push(WatchEventType::kAdded, Obj("b", "2"));
  second.stream->Push(WatchEventType::kBookmark, InitialEventsEnd("3"));
  ASSERT_TRUE(informer.WaitForSync(std::stop_token()));
  EXPECT_EQ(recorder.WaitFor(1), (Strings{"add ns/b@2"})) << "the broken stream's object was never cached";
  EXPECT_EQ(informer.store().size(), 1u);
}

TEST(InformerTest, UpdateHandlerThatNeedsNoOldObjectGetsNullAndOthersStillGetIt) {
  FakeApi api;
  EventRecorder recorder;  // needs the old object (the default)
  std::mutex mutex;
  Strings lean_seen;
  EventHandler lean;
  lean.needs_old_object = false;
  lean.on_update = [&](const ObjectPtr& old_object, const ObjectPtr& new_object) {
    std::lock_guard lock(mutex);
    lean_seen.push_back((old_object == nullptr ? std::string("null") : std::string("old")) + "->" +
                        ObjectResourceVersion(*new_object));
  };
  Informer informer(api.NewListWatch(), TestOptions());
  informer.AddEventHandler(std::move(lean));
  informer.AddEventHandler(recorder.Handler());
  api.QueueList({Obj("a", "1")}, "10");
  informer.Start();
  ASSERT_TRUE(informer.WaitForSyncUntil(workqueue::RealClock().Now() + kTestTimeout));
  testing::WatchCall watch = api.WaitForWatch(0);
  ASSERT_NE(watch.stream, nullptr);
  watch.stream->Push(WatchEventType::kModified, Obj("a", "11"));
  watch.stream->Push(WatchEventType::kModified, Obj("a", "12"));
  // The recorder runs after the lean handler for each event, so once it has
  // both updates the lean handler has had them too.
  EXPECT_EQ(Slice(recorder.WaitFor(3), 1, 3), (Strings{"update ns/a@1->11", "update ns/a@11->12"}));
  std::lock_guard lock(mutex);
  EXPECT_EQ(lean_seen, (Strings{"null->11", "null->12"}));
}

TEST(InformerTest, BookmarkMovesTheResumeVersionWithoutAnEvent) {
  FakeApi api;
  EventRecorder recorder;
  Informer informer(api.NewListWatch(), TestOptions());
  informer.AddEventHandler(recorder.Handler());
  api.QueueList({Obj("a", "1")}, "10");
  informer.Start();
  testing::WatchCall first = api.WaitForWatch(0);
  first.stream->Push(WatchEventType::kBookmark, Bookmark("25"));
  first.stream->End();

  testing::WatchCall second = api.WaitForWatch(1);
  EXPECT_EQ(second.options.resource_version, "25");
  second.stream->Push(WatchEventType::kAdded, Obj("sentinel", "26"));
  // The sentinel follows the initial add directly: the bookmark was no change.
  EXPECT_EQ(recorder.WaitFor(2), (Strings{"add ns/a@1", "add ns/sentinel@26"}));
  EXPECT_EQ(api.ListCalls(), 1u) << "a normal watch end resumes, it does not relist";
}

TEST(InformerTest, WatchEndResumesFromTheLastEventVersion) {
  FakeApi api;
  EventRecorder recorder;
  Informer informer(api.NewListWatch(), TestOptions());
  informer.AddEventHandler(recorder.Handler());
  api.QueueList({}, "10");
  informer.Start();
  testing::WatchCall first = api.WaitForWatch(0);
  first.stream->Push(WatchEventType::kAdded, Obj("a", "11"));
  first.stream->Push(WatchEventType::kModified, Obj("a", "12"));
  first.stream->End();
  testing::WatchCall second = api.WaitForWatch(1);
  EXPECT_EQ(second.options.resource_version, "12");
  // A server replaying an event the cache already has (same version) is not
  // a change; the next real event is.
  second.stream->Push(WatchEventType::kModified, Obj("a", "12"));
  second.stream->Push(WatchEventType::kModified, Obj("a", "13"));
  EXPECT_EQ(recorder.WaitFor(3), (Strings{"add ns/a@11", "update ns/a@11->12", "update ns/a@12->13"}));
  EXPECT_EQ(api.ListCalls(), 1u);
}

// The relist after 410 must turn the outage into exactly the missed changes.
void ExpectGoneRelistDeliversTheDifference(bool gone_as_error_event) {
  FakeApi api;
  EventRecorder recorder;
  Informer informer(api.NewListWatch(), TestOptions());
  informer.AddEventHandler(recorder.Handler());
  api.QueueList({Obj("a", "1"), Obj("b", "1"), Obj("c", "1")}, "10");
  informer.Start();
  recorder.WaitFor(3);
  testing::WatchCall first = api.WaitForWatch(0);
  if (gone_as_error_event) {
    first.stream->Push(WatchEventType::kError,
                       {{"kind", "Status"}, {"code", 410}, {"reason", "Expired"},
                        {"message", "too old resource version: 10 (15)"}});
  } else {
    // Scripted before End(): the informer re-watches as soon as it ends.
    api.FailNextWatch(GoneError("too old resource version"));
    first.stream->End();
  }
  // During the outage: a unchanged, b modified, c deleted, d created.
  api.QueueList({Obj("a", "1"), Obj("b", "5"), Obj("d", "6")}, "20");
  const std::size_t watch_after_relist = gone_as_error_event ? 1 : 2;
  testing::WatchCall resumed = api.WaitForWatch(watch_after_relist);
  EXPECT_EQ(resumed.options.resource_version, "20");
  ASSERT_EQ(api.ListCalls(), 2u);
  // The cache gave a 410: the relist must not be served from it again.
  EXPECT_EQ(api.ListOptionsSeen()[1].resource_version, "") << "a relist after 410 is a quorum read";
  resumed.stream->Push(WatchEventType::kAdded, Obj("sentinel", "21"));

  const Strings events = recorder.WaitFor(7);
  EXPECT_EQ(Sorted(Slice(events, 3, 6)),
            (Strings{"add ns/d@6", "delete ns/c@1", "update ns/b@1->5"}));
  EXPECT_EQ(Slice(events, 6, 100), (Strings{"add ns/sentinel@21"})) << "no extra events";
  EXPECT_EQ(Sorted(informer.store().ListKeys()), (Strings{"ns/a", "ns/b", "ns/d", "ns/sentinel"}));
}

TEST(InformerTest, GoneErrorEventRelistsAndDeliversExactlyTheDifference) {
  ExpectGoneRelistDeliversTheDifference(/*gone_as_error_event=*/true);
}

TEST(InformerTest, GoneWatchAnswerRelistsAndDeliversExactlyTheDifference) {
  ExpectGoneRelistDeliversTheDifference(/*gone_as_error_event=*/false);
}

TEST(InformerTest, ErrorsBackOffWithJitterThenRecover) {
  workqueue::FakeClock clock;
  FakeApi api;
  EventRecorder recorder;
  Informer informer(api.NewListWatch(), TestOptions(&clock));
  informer.AddEventHandler(recorder.Handler());
  api.QueueList(common::UnavailableError("apiserver down"));
  api.QueueList(common::UnavailableError("apiserver still down"));
  informer.Start();

  // Full jitter with the draw pinned at 0.5: half of 1 s, then half of 2 s.
  for (const milliseconds expected : {milliseconds(500), milliseconds(1000)}) {
    const std::optional<workqueue::TimePoint> wake = clock.WaitForPendingDeadline(kTestTimeout);
    ASSERT_TRUE(wake.has_value()) << "informer did not back off";
    EXPECT_EQ(*wake - clock.Now(), expected);
    EXPECT_FALSE(informer.HasSynced());
    clock.Advance(*wake - clock.Now());
  }
  api.QueueList({Obj("a", "1")}, "10");
  ASSERT_TRUE(informer.WaitForSync(std::stop_token()));
  EXPECT_EQ(api.ListCalls(), 3u);

  // A broken watch backs off from the start again (the list reset it), then
  // resumes from the same version without relisting.
  testing::WatchCall first = api.WaitForWatch(0);
  api.FailNextWatch(common::UnavailableError("connection refused"));
  first.stream->Fail(common::UnavailableError("connection reset"));
  std::optional<workqueue::TimePoint> wake = clock.WaitForPendingDeadline(kTestTimeout);
  ASSERT_TRUE(wake.has_value());
  EXPECT_EQ(*wake - clock.Now(), milliseconds(500));
  clock.Advance(*wake - clock.Now());
  wake = clock.WaitForPendingDeadline(kTestTimeout);
  ASSERT_TRUE(wake.has_value());
  EXPECT_EQ(*wake - clock.Now(), milliseconds(1000));
  clock.Advance(*wake - clock.Now());
  testing::WatchCall recovered = api.WaitForWatch(2);
  EXPECT_EQ(recovered.options.resource_version, "10");
  recovered.stream->Push(WatchEventType::kAdded, Obj("b", "11"));
  EXPECT_EQ(recorder.WaitFor(2), (Strings{"add ns/a@1", "add ns/b@11"}));
  EXPECT_EQ(api.ListCalls(), 1u + 2u);
}

TEST(InformerTest, WatchClosedAtOnceWithoutEventsBacksOff) {
  workqueue::FakeClock clock;
  FakeApi api;
  InformerOptions options = TestOptions(&clock);
  options.min_watch_duration = seconds(1);
  Informer informer(api.NewListWatch(), options);
  api.QueueList({}, "10");
  informer.Start();
  api.WaitForWatch(0).stream->End();
  const std::optional<workqueue::TimePoint> wake = clock.WaitForPendingDeadline(kTestTimeout);
  ASSERT_TRUE(wake.has_value()) << "an empty, instant watch must not be retried hot";
  EXPECT_EQ(api.WatchCalls(), 1u);
  clock.Advance(*wake - clock.Now());
  EXPECT_EQ(api.WaitForWatch(1).options.resource_version, "10");
}

TEST(InformerTest, GoneRightAfterAFreshListBacksOffBeforeRelisting) {
  workqueue::FakeClock clock;
  FakeApi api;
  InformerOptions options = TestOptions(&clock);
  options.min_watch_duration = seconds(1);
  Informer informer(api.NewListWatch(), options);
  api.QueueList({}, "10");
  api.FailNextWatch(GoneError("too old resource version"));
  informer.Start();
  const std::optional<workqueue::TimePoint> wake = clock.WaitForPendingDeadline(kTestTimeout);
  ASSERT_TRUE(wake.has_value()) << "a server that cannot serve a fresh list must not be relisted hot";
  EXPECT_EQ(api.ListCalls(), 1u);
  api.QueueList({}, "30");
  clock.Advance(*wake - clock.Now());
  EXPECT_EQ(api.WaitForWatch(1).options.resource_version, "30");
  EXPECT_EQ(api.ListCalls(), 2u);
}

TEST(InformerTest, LateHandlerGetsSyntheticAddsThenLiveEvents) {
  FakeApi api;
  EventRecorder early;
  EventRecorder late;
  Informer informer(api.NewListWatch(), TestOptions());
  informer.AddEventHandler(early.Handler());
  api.QueueList({Obj("a", "1"), Obj("b", "1")}, "10");
  informer.Start();
  testing::WatchCall watch = api.WaitForWatch(0);
  watch.stream->Push(WatchEventType::kAdded, Obj("c", "11"));
  early.WaitFor(3);

  informer.AddEventHandler(late.Handler());
  watch.stream->Push(WatchEventType::kModified, Obj("a", "12"));
  const Strings events = late.WaitFor(4);
  EXPECT_EQ(Sorted(Slice(events, 0, 3)), (Strings{"add ns/a@1", "add ns/b@1", "add ns/c@11"}));
  EXPECT_EQ(Slice(events, 3, 100), (Strings{"update ns/a@1->12"}));
  EXPECT_EQ(early.WaitFor(4).back(), "update ns/a@1->12");
}

TEST(InformerTest, StopWhileListBlocksReturnsPromptly) {
  FakeApi api;
  Informer informer(api.NewListWatch(), TestOptions());
  informer.Start();
  ASSERT_TRUE(api.WaitForListCalls(1));
  informer.Stop();  // the fake List honours the stop token; a hang fails by ctest timeout
  EXPECT_FALSE(informer.HasSynced());
  std::stop_source stopped;
  stopped.request_stop();
  EXPECT_FALSE(informer.WaitForSync(stopped.get_token()));
}

TEST(SharedInformerFactoryTest, OneWatchServesEveryHandlerOfAKey) {
  FakeApi api;
  SharedInformerFactory factory([&](const InformerKey&) { return api.NewListWatch(); },
                                TestOptions());
  const InformerKey key{"resource.k8s.io/v1/resourceslices", "", "", "spec.nodeName=n1"};
  EventRecorder first;
  EventRecorder second;
  Informer& informer = factory.ForResource(key);
  informer.AddEventHandler(first.Handler());
  Informer& same = factory.ForResource(key);
  EXPECT_EQ(&informer, &same);
  same.AddEventHandler(second.Handler());
  EXPECT_EQ(same.options().field_selector, "spec.nodeName=n1");

  api.QueueList({Obj("s", "1", "")}, "10");
  factory.Start();
  std::stop_source never;
  ASSERT_TRUE(factory.WaitForCacheSync(never.get_token()));
  api.WaitForWatch(0).stream->Push(WatchEventType::kModified, Obj("s", "2", ""));
  EXPECT_EQ(first.WaitFor(2), (Strings{"add /s@1", "update /s@1->2"}));
  EXPECT_EQ(second.WaitFor(2), (Strings{"add /s@1", "update /s@1->2"}));
  EXPECT_EQ(api.ListWatchesMade(), 1u);
  EXPECT_EQ(api.ListCalls(), 1u);
  EXPECT_EQ(api.WatchCalls(), 1u);

  InformerKey other = key;
  other.field_selector = "spec.nodeName=n2";
  EXPECT_NE(&factory.ForResource(other), &informer);
  EXPECT_EQ(api.ListWatchesMade(), 2u);
  factory.Shutdown();
}

}  // namespace
}  // namespace nvdra::k8s::cache
