#pragma once

// Records events.k8s.io/v1 Events about objects, for `kubectl describe` and
// `kubectl get events`, without ever slowing down or failing the caller.
//
// Defines: ObjectReference, EventType, EventRecorderOptions,
// EventRecorderStats, AggregationKey, TruncateNote, EventRecorder.
//
// Aggregation (the rule the tests check): events with the same regarding
// object (apiVersion, kind, namespace, name, uid), reason, action, type and
// note, emitted within `aggregation_window` of the previous one, are one
// Event: the first emit creates it, later ones only count in memory, and the
// worker PATCHes series {count, lastObservedTime} with the count so far. So
// N identical emits in a burst give one Event whose series.count is N (no
// series when N is 1), with a handful of PATCHes, not N requests. After a
// quiet window a new Event is started.
//
// Rate limit: API writes per regarding object go through a token bucket
// (burst, then one per refill interval). A new Event without a token is
// dropped (counted); a series update without one waits for the next token
// (counts keep accumulating meanwhile, nothing is lost).
//
// Emit only takes a mutex and enqueues: a bounded queue of pending writes
// (distinct aggregation keys) feeds one owned worker thread. A full queue or
// full aggregation table drops the event (counted). API errors are logged and
// counted, never returned.
//
// Ownership: borrows the Client and clocks (they must outlive it); owns the
// worker thread, stopped and joined by the destructor (pending writes are
// abandoned; call WaitIdle first to flush).
// Thread-safety: thread-safe.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "k8s/client.h"
#include "k8s/micro_time.h"
#include "k8s/workqueue/clock.h"

namespace nvdra::k8s {

// The `regarding` of an Event.
struct ObjectReference {
  std::string api_version;  // "v1", "resource.k8s.io/v1"
  std::string kind;
  std::string namespace_;   // "" for cluster-scoped objects
  std::string name;
  std::string uid;
  std::string resource_version;  // informational; not part of the aggregation key

  // From an object's apiVersion, kind and metadata.
  static ObjectReference FromObject(const nlohmann::json& object);
  nlohmann::json ToJson() const;
};

enum class EventType { kNormal, kWarning };

inline constexpr std::size_t kMaxNoteBytes = 1024;  // the API server rejects longer notes

// `note` cut to at most kMaxNoteBytes bytes on a UTF-8 character boundary,
// with "..." at the end when cut.
std::string TruncateNote(std::string_view note);

// An Event's metadata.name: "<object name><suffix>" (suffix ".<hex>"), with
// the object name cut so that the whole stays a valid object name of at most
// 253 characters (a 253-character ComputeDomain still gets its Events), and
// "event" for an object without a name.
std::string EventName(std::string_view object_name, std::string_view suffix);

// Events that map to one Event object share this key.
std::string AggregationKey(const ObjectReference& regarding, EventType type, std::string_view reason,
                           std::string_view action, std::string_view note);

struct EventRecorderOptions {
  std::string reporting_controller;  // "resource.nvidia.com/gpu-controller"; required
  std::string reporting_instance;    // this replica (pod or node name); required
  std::chrono::milliseconds aggregation_window = std::chrono::minutes(6);
  std::size_t queue_capacity = 1000;       // pending distinct writes
  std::size_t max_aggregated = 4096;       // events remembered for aggregation
  int per_object_burst = 25;               // API writes per regarding object...
  std::chrono::milliseconds per_object_refill = std::chrono::seconds(5);  // ...then one per this
  workqueue::Clock* clock = &workqueue::RealClock();
  WallClock wall_clock = SystemWallClock();
};

struct EventRecorderStats {
  std::uint64_t emitted = 0;         // Emit calls
  std::uint64_t created = 0;         // Event objects created
  std::uint64_t patched = 0;         // series updates written
  std::uint64_t dropped_full = 0;    // queue or aggregation table full
  std::uint64_t dropped_rate_limited = 0;
  std::uint64_t failed = 0;          // API errors (logged)
};

class EventRecorder {
 public:
  // kInvalidArgument without client, reporting controller or instance.
  static common::StatusOr<std::unique_ptr<EventRecorder>> New(Client* client, EventRecorderOptions options);
  ~EventRecorder();
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  // Records an event; never blocks on the API, never fails (see above).
  // The Event is created in regarding.namespace_ ("default" when empty).
  void Emit(const ObjectReference& regarding, EventType type, std::string_view reason, std::string_view action,
            std::string_view note) EXCLUDES(mutex_);

  // Waits until no write is pending or in flight (deferred series updates
  // count as pending); false on timeout. For tests and orderly shutdown.
  bool WaitIdle(std::chrono::milliseconds timeout) EXCLUDES(mutex_);

  EventRecorderStats stats() const EXCLUDES(mutex_);

 private:
  struct Entry {
    ObjectReference regarding;
    EventType type = EventType::kNormal;
    std::string reason, action, note;
    std::int64_t count = 0;          // emits so far
    std::int64_t written_count = 0;  // as last written to the API
    std::string first_time;          // MicroTime of the first emit (eventTime)
    std::string last_time;           // MicroTime of the latest emit
    workqueue::TimePoint last_seen{};
    std::string event_name;  // "" until created
    std::uint64_t generation = 0;
    bool queued = false;
  };
  struct Bucket {
    double tokens = 0;
    workqueue::TimePoint updated{};
  };

  EventRecorder(Client* client, EventRecorderOptions options);
  void Work(std::stop_token stop) EXCLUDES(mutex_);
  // Takes a token for `object`, or returns when the next one is due.
  bool TakeToken(const std::string& object, workqueue::TimePoint now, workqueue::TimePoint* next)
      REQUIRES(mutex_);
  void Write(const std::string& key, Entry snapshot, std::stop_token stop) EXCLUDES(mutex_);
  void EvictExpired(workqueue::TimePoint now) REQUIRES(mutex_);

  Client* const client_;
  const EventRecorderOptions options_;

  mutable common::Mutex mutex_;  // guards the members below
  std::condition_variable_any cv_;
  std::unordered_map<std::string, Entry> entries_ GUARDED_BY(mutex_);
  std::deque<std::string> queue_ GUARDED_BY(mutex_);
  std::multimap<workqueue::TimePoint, std::string> deferred_ GUARDED_BY(mutex_);
  std::unordered_map<std::string, Bucket> buckets_ GUARDED_BY(mutex_);
  bool in_flight_ GUARDED_BY(mutex_) = false;
  std::uint64_t next_generation_ GUARDED_BY(mutex_) = 0;
  EventRecorderStats stats_ GUARDED_BY(mutex_);

  std::jthread worker_;  // last: stopped and joined before the members above go
};

}  // namespace nvdra::k8s
