#pragma once

// A scripted API server for informer tests. The test queues list answers and
// feeds events into the watch streams the informer opens; every call is
// recorded so the test can check what the informer asked for, and waited
// for (with a generous real-time bound) instead of slept on.
//
// Ownership: FakeApi is owned by the test and must outlive every ListWatch
// it hands out (NewListWatch). Thread-safety: thread-safe.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/status.h"
#include "k8s/cache/informer.h"
#include "k8s/cache/list_watch.h"

namespace nvdra::k8s::cache::testing {

inline constexpr std::chrono::seconds kTestTimeout{10};

class FakeWatchStream final : public WatchStream {
 public:
  void Push(WatchEventType type, nlohmann::json object) {
    Append(std::optional<WatchEvent>(WatchEvent{type, std::move(object)}));
  }
  // The server closes the stream normally.
  void End() { Append(std::optional<WatchEvent>()); }
  // The connection breaks (or the server answers 410 with `status`).
  void Fail(common::Status status) { Append(std::move(status)); }

  common::StatusOr<std::optional<WatchEvent>> Next(std::stop_token stop) override {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, stop, [&] { return stopped_ || !script_.empty(); });
    if (stopped_ || stop.stop_requested()) return common::CancelledError("watch stopped");
    auto next = std::move(script_.front());
    script_.pop_front();
    return next;
  }

  void Stop() override {
    {
      std::lock_guard lock(mutex_);
      stopped_ = true;
    }
    cv_.notify_all();
  }

 private:
  void Append(common::StatusOr<std::optional<WatchEvent>> item) {
    {
      std::lock_guard lock(mutex_);
      script_.push_back(std::move(item));
    }
    cv_.notify_all();
  }

  std::mutex mutex_;  // guards script_ and stopped_
  std::condition_variable_any cv_;
  std::deque<common::StatusOr<std::optional<WatchEvent>>> script_;
  bool stopped_ = false;
};

// One Watch() call: what was asked, and the stream handed out (null when the
// call was scripted to fail).
struct WatchCall {
  WatchOptions options;
  std::shared_ptr<FakeWatchStream> stream;
};

class FakeApi {
 public:
  // The next List() answer. List() blocks until one is queued.
  void QueueList(common::StatusOr<ListResult> answer) {
    {
      std::lock_guard lock(mutex_);
      lists_.push_back(std::move(answer));
    }
    cv_.notify_all();
  }
  void QueueList(std::vector<nlohmann::json> items, std::string resource_version) {
    QueueList(ListResult{std::move(items), std::move(resource_version)});
  }
  // The next Watch() call fails with `status` instead of opening a stream.
  void FailNextWatch(common::Status status) {
    std::lock_guard lock(mutex_);
    watch_failures_.push_back(std::move(status));
  }

  // Waits until Watch() has been called `index + 1` times and returns call
  // `index`. Fails the test (returns an empty call) on timeout.
  WatchCall WaitForWatch(std::size_t index) {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, kTestTimeout, [&] { return watch_calls_.size() > index; })) {
      ADD_FAILURE() << "no Watch() call #" << index;
      return {};
    }
    return watch_calls_[index];
  }
  // Waits until List() has been called `count` times.
  bool WaitForListCalls(std::size_t count) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, kTestTimeout, [&] { return list_calls_.size() >= count; });
  }
  std::size_t ListCalls() {
    std::lock_guard lock(mutex_);
    return list_calls_.size();
  }
  std::vector<ListOptions> ListOptionsSeen() {
    std::lock_guard lock(mutex_);
    return list_calls_;
  }
  std::size_t WatchCalls() {
    std::lock_guard lock(mutex_);
    return watch_calls_.size();
  }
  std::size_t ListWatchesMade() {
    std::lock_guard lock(mutex_);
    return list_watches_made_;
  }

  std::unique_ptr<ListWatch> NewListWatch();

  common::StatusOr<ListResult> List(const ListOptions& options, std::stop_token stop) {
    std::unique_lock lock(mutex_);
    list_calls_.push_back(options);
    cv_.notify_all();
    cv_.wait(lock, stop, [&] { return !lists_.empty(); });
    if (stop.stop_requested()) return common::CancelledError("list stopped");
    common::StatusOr<ListResult> answer = std::move(lists_.front());
    lists_.pop_front();
    return answer;
  }

  common::StatusOr<std::unique_ptr<WatchStream>> Watch(const WatchOptions& options) {
    std::lock_guard lock(mutex_);
    WatchCall call{options, nullptr};
    common::Status failure;
    if (!watch_failures_.empty()) {
      failure = std::move(watch_failures_.front());
      watch_failures_.pop_front();
    } else {
      call.stream = std::make_shared<FakeWatchStream>();
    }
    watch_calls_.push_back(call);
    cv_.notify_all();
    if (!failure.ok()) return failure;
    return std::unique_ptr<WatchStream>(std::make_unique<StreamHandle>(call.stream));
  }

 private:
  // The informer owns (and destroys) its stream; the test keeps feeding the
  // shared FakeWatchStream behind it.
  class StreamHandle final : public WatchStream {
   public:
    explicit StreamHandle(std::shared_ptr<FakeWatchStream> stream) : stream_(std::move(stream)) {}
    common::StatusOr<std::optional<WatchEvent>> Next(std::stop_token stop) override {
      return stream_->Next(stop);
    }
    void Stop() override { stream_->Stop(); }

   private:
    std::shared_ptr<FakeWatchStream> stream_;
  };

  class Adapter final : public ListWatch {
   public:
    explicit Adapter(FakeApi& api) : api_(api) {}
    common::StatusOr<ListResult> List(const ListOptions& options, std::stop_token stop) override {
      return api_.List(options, stop);
    }
    common::StatusOr<std::unique_ptr<WatchStream>> Watch(const WatchOptions& options,
                                                         std::stop_token) override {
      return api_.Watch(options);
    }

   private:
    FakeApi& api_;
  };

  std::mutex mutex_;  // guards everything below
  std::condition_variable_any cv_;
  std::deque<common::StatusOr<ListResult>> lists_;
  std::deque<common::Status> watch_failures_;
  std::vector<ListOptions> list_calls_;
  std::vector<WatchCall> watch_calls_;
  std::size_t list_watches_made_ = 0;
};

inline std::unique_ptr<ListWatch> FakeApi::NewListWatch() {
  {
    std::lock_guard lock(mutex_);
    ++list_watches_made_;
  }
  return std::make_unique<Adapter>(*this);
}

// A namespaced object with a resourceVersion.
inline nlohmann::json Obj(const std::string& name, const std::string& rv,
                          const std::string& ns = "ns") {
  return {{"metadata", {{"name", name}, {"namespace", ns}, {"resourceVersion", rv}}}};
}

inline nlohmann::json Bookmark(const std::string& rv) {
  return {{"kind", "ConfigMap"}, {"metadata", {{"resourceVersion", rv}}}};
}

// Records handler calls as strings ("add ns/a@1", "update ns/a@1->2",
// "delete ns/a@1") and lets the test wait for a number of them.
class EventRecorder {
 public:
  EventHandler Handler() {
    EventHandler handler;
    handler.on_add = [this](const ObjectPtr& o) { Record("add " + Describe(o)); };
    handler.on_update = [this](const ObjectPtr& old_object, const ObjectPtr& new_object) {
      Record("update " + Describe(old_object) + "->" + ObjectResourceVersion(*new_object));
    };
    handler.on_delete = [this](const ObjectPtr& o) { Record("delete " + Describe(o)); };
    return handler;
  }

  // Waits for at least `count` events; returns all recorded so far.
  std::vector<std::string> WaitFor(std::size_t count) {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, kTestTimeout, [&] { return events_.size() >= count; })) {
      ADD_FAILURE() << "only " << events_.size() << " of " << count << " events arrived";
    }
    return events_;
  }
  std::vector<std::string> Events() {
    std::lock_guard lock(mutex_);
    return events_;
  }

 private:
  static std::string Describe(const ObjectPtr& object) {
    const nlohmann::json& metadata = (*object)["metadata"];
    return metadata.value("namespace", "") + "/" + metadata.value("name", "") + "@" +
           metadata.value("resourceVersion", "");
  }
  void Record(std::string event) {
    {
      std::lock_guard lock(mutex_);
      events_.push_back(std::move(event));
    }
    cv_.notify_all();
  }

  std::mutex mutex_;  // guards events_
  std::condition_variable cv_;
  std::vector<std::string> events_;
};

}  // namespace nvdra::k8s::cache::testing
