#include "k8s/event_recorder.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <utility>

#include "common/log.h"

namespace nvdra::k8s {

using nlohmann::json;

ObjectReference ObjectReference::FromObject(const json& object) {
  ObjectReference ref;
  ref.api_version = object.value("apiVersion", "");
  ref.kind = object.value("kind", "");
  if (const auto meta = object.find("metadata"); meta != object.end() && meta->is_object()) {
    ref.namespace_ = meta->value("namespace", "");
    ref.name = meta->value("name", "");
    ref.uid = meta->value("uid", "");
    ref.resource_version = meta->value("resourceVersion", "");
  }
  return ref;
}

json ObjectReference::ToJson() const {
  json out = json::object();
  auto put = [&out](const char* key, const std::string& value) {
    if (!value.empty()) out[key] = value;
  };
  put("apiVersion", api_version);
  put("kind", kind);
  put("namespace", namespace_);
  put("name", name);
  put("uid", uid);
  put("resourceVersion", resource_version);
  return out;
}

std::string TruncateNote(std::string_view note) {
  if (note.size() <= kMaxNoteBytes) return std::string(note);
  constexpr std::string_view kEllipsis = "...";
  std::size_t cut = kMaxNoteBytes - kEllipsis.size();
  // Back off continuation bytes (10xxxxxx) so no character is split.
  while (cut > 0 && (static_cast<unsigned char>(note[cut]) & 0xC0) == 0x80) --cut;
  std::string out(note.substr(0, cut));
  out += kEllipsis;
  return out;
}

std::string AggregationKey(const ObjectReference& regarding, EventType type, std::string_view reason,
                           std::string_view action, std::string_view note) {
  // A JSON array is an unambiguous join whatever the fields contain.
  return json::array({regarding.api_version, regarding.kind, regarding.namespace_, regarding.name, regarding.uid,
                      type == EventType::kWarning ? "Warning" : "Normal", reason, action, note})
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

common::StatusOr<std::unique_ptr<EventRecorder>> EventRecorder::New(Client* client, EventRecorderOptions options) {
  if (client == nullptr) return common::InvalidArgumentError("event recorder: no client");
  if (options.reporting_controller.empty() || options.reporting_instance.empty()) {
    return common::InvalidArgumentError("event recorder: reporting_controller and reporting_instance are required");
  }
  if (options.clock == nullptr || !options.wall_clock || options.queue_capacity == 0 ||
      options.max_aggregated == 0 || options.per_object_burst < 1 || options.per_object_refill.count() <= 0) {
    return common::InvalidArgumentError("event recorder: bad clock, capacity or rate limit");
  }
  return std::unique_ptr<EventRecorder>(new EventRecorder(client, std::move(options)));
}

EventRecorder::EventRecorder(Client* client, EventRecorderOptions options)
    : client_(client), options_(std::move(options)) {
  worker_ = std::jthread([this](std::stop_token stop) { Work(stop); });
}

// worker_, declared last, is stopped and joined first.
EventRecorder::~EventRecorder() = default;

EventRecorderStats EventRecorder::stats() const {
  common::MutexLock lock(mutex_);
  return stats_;
}

void EventRecorder::Emit(const ObjectReference& regarding, EventType type, std::string_view reason,
                         std::string_view action, std::string_view note) {
  const std::string truncated = TruncateNote(note);
  std::string key = AggregationKey(regarding, type, reason, action, truncated);
  const workqueue::TimePoint now = options_.clock->Now();
  const std::string wall = FormatMicroTime(options_.wall_clock());

  common::MutexLock lock(mutex_);
  ++stats_.emitted;
  auto it = entries_.find(key);
  if (it != entries_.end() && now - it->second.last_seen <= options_.aggregation_window) {
    Entry& entry = it->second;
    ++entry.count;
    entry.last_time = wall;
    entry.last_seen = now;
    entry.regarding.resource_version = regarding.resource_version;
    if (entry.queued) return;  // the pending write will carry this count
    if (queue_.size() >= options_.queue_capacity) {
      ++stats_.dropped_full;  // counted in memory; written with the next emit
      return;
    }
    entry.queued = true;
    queue_.push_back(std::move(key));
    cv_.notify_all();
    return;
  }
  if (it == entries_.end() && entries_.size() >= options_.max_aggregated) {
    EvictExpired(now);
    if (entries_.size() >= options_.max_aggregated) {
      ++stats_.dropped_full;
      return;
    }
  }
  const bool already_queued = it != entries_.end() && it->second.queued;
  if (!already_queued && queue_.size() >= options_.queue_capacity) {
    ++stats_.dropped_full;
    return;
  }
  Entry entry;
  entry.regarding = regarding;
  entry.type = type;
  entry.reason = std::string(reason);
  entry.action = std::string(action);
  entry.note = truncated;
  entry.count = 1;
  entry.first_time = wall;
  entry.last_time = wall;
  entry.last_seen = now;
  entry.generation = ++next_generation_;
  entry.queued = true;
  entries_[key] = std::move(entry);
  if (!already_queued) queue_.push_back(std::move(key));
  cv_.notify_all();
}

void EventRecorder::EvictExpired(workqueue::TimePoint now) {
  std::erase_if(entries_, [&](const auto& item) {
    const Entry& e = item.second;
    return !e.queued && e.written_count == e.count && now - e.last_seen > options_.aggregation_window;
  });
  const auto full_after = options_.per_object_refill * options_.per_object_burst;
  std::erase_if(buckets_, [&](const auto& item) { return now - item.second.updated >= full_after; });
}

bool EventRecorder::TakeToken(const std::string& object, workqueue::TimePoint now, workqueue::TimePoint* next) {
  const double burst = options_.per_object_burst;
  auto [it, inserted] = buckets_.try_emplace(object);
  Bucket& bucket = it->second;
  if (inserted) {
    bucket.tokens = burst;
  } else {
    const double refilled = std::chrono::duration<double>(now - bucket.updated) /
                            std::chrono::duration<double>(options_.per_object_refill);
    bucket.tokens = std::min(burst, bucket.tokens + refilled);
  }
  bucket.updated = now;
  if (bucket.tokens >= 1) {
    bucket.tokens -= 1;
    return true;
  }
  *next = now + std::chrono::duration_cast<workqueue::Duration>((1 - bucket.tokens) * options_.per_object_refill);
  return false;
}

bool EventRecorder::WaitIdle(std::chrono::milliseconds timeout) {
  common::MutexLock lock(mutex_);
  return cv_.wait_for(lock.native(), timeout,
                      [&]() REQUIRES(mutex_) { return queue_.empty() && deferred_.empty() && !in_flight_; });
}

void EventRecorder::Work(std::stop_token stop) {
  workqueue::Clock& clock = *options_.clock;
  common::MutexLock lock(mutex_);
  while (!stop.stop_requested()) {
    const workqueue::TimePoint now = clock.Now();
    while (!deferred_.empty() && deferred_.begin()->first <= now) {
      queue_.push_back(deferred_.begin()->second);
      deferred_.erase(deferred_.begin());
    }
    if (queue_.empty()) {
      const workqueue::TimePoint until = deferred_.empty() ? workqueue::TimePoint::max() : deferred_.begin()->first;
      clock.WaitUntil(cv_, lock, until, stop, [&]() REQUIRES(mutex_) { return !queue_.empty(); });
      continue;
    }
    std::string key = std::move(queue_.front());
    queue_.pop_front();
    auto it = entries_.find(key);
    if (it == entries_.end()) continue;
    Entry& entry = it->second;
    entry.queued = false;
    if (entry.count == entry.written_count) continue;
    const std::string object = entry.regarding.uid.empty()
                                   ? entry.regarding.kind + "/" + entry.regarding.namespace_ + "/" + entry.regarding.name
                                   : entry.regarding.uid;
    workqueue::TimePoint next{};
    if (!TakeToken(object, now, &next)) {
      if (entry.event_name.empty()) {
        // A flood of distinct events about one object: drop the new ones.
        ++stats_.dropped_rate_limited;
        entries_.erase(it);
      } else {
        // A series update only waits: its count keeps growing meanwhile.
        entry.queued = true;
        deferred_.emplace(next, std::move(key));
      }
      cv_.notify_all();
      continue;
    }
    Entry snapshot = entry;
    in_flight_ = true;
    lock.Unlock();
    try {
      Write(key, std::move(snapshot), stop);
    } catch (const std::exception& e) {  // e.g. a note that is not UTF-8, rejected by the JSON writer
      LOG_ERROR("event recorder: could not write an event", {{"err", e.what()}});
    }
    lock.Lock();
    in_flight_ = false;
    cv_.notify_all();
  }
}

std::string EventName(std::string_view object_name, std::string_view suffix) {
  constexpr std::size_t kMaxName = 253;  // a DNS subdomain
  std::string_view prefix = object_name.empty() ? std::string_view("event") : object_name;
  if (prefix.size() + suffix.size() > kMaxName) {
    prefix = prefix.substr(0, kMaxName > suffix.size() ? kMaxName - suffix.size() : 0);
    // A label may not end in '-' or '.', and the suffix starts a new one.
    while (!prefix.empty() && (prefix.back() == '-' || prefix.back() == '.')) prefix.remove_suffix(1);
    if (prefix.empty()) prefix = "event";
  }
  return std::string(prefix) + std::string(suffix);
}

void EventRecorder::Write(const std::string& key, Entry snapshot, std::stop_token stop) {
  const std::string ns = snapshot.regarding.namespace_.empty() ? "default" : snapshot.regarding.namespace_;
  json series = {{"count", snapshot.count}, {"lastObservedTime", snapshot.last_time}};
  std::string name = snapshot.event_name;
  common::Status status;
  bool created = false;
  if (name.empty()) {
    // Unique as client-go's "<object>.<unix nanos in hex>", plus the
    // generation against two events in the same nanosecond.
    const auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           options_.wall_clock().time_since_epoch())
                           .count();
    char suffix[48];
    std::snprintf(suffix, sizeof(suffix), ".%llx%llx", static_cast<unsigned long long>(nanos),
                  static_cast<unsigned long long>(snapshot.generation));
    name = EventName(snapshot.regarding.name, suffix);
    json event = {{"apiVersion", "events.k8s.io/v1"},
                  {"kind", "Event"},
                  {"metadata", {{"name", name}, {"namespace", ns}}},
                  {"eventTime", snapshot.first_time},
                  {"reportingController", options_.reporting_controller},
                  {"reportingInstance", options_.reporting_instance},
                  {"action", snapshot.action},
                  {"reason", snapshot.reason},
                  {"note", snapshot.note},
                  {"type", snapshot.type == EventType::kWarning ? "Warning" : "Normal"},
                  {"regarding", snapshot.regarding.ToJson()}};
    if (snapshot.count > 1) event["series"] = series;
    status = client_->Create(resources::kEvents, ns, event, {}, stop).status();
    created = true;
  } else {
    status = client_->Patch(resources::kEvents, ns, name, PatchType::kMerge, {{"series", series}}, {}, stop).status();
  }

  common::MutexLock lock(mutex_);
  auto it = entries_.find(key);
  const bool current = it != entries_.end() && it->second.generation == snapshot.generation;
  if (!status.ok()) {
    if (stop.stop_requested()) return;
    ++stats_.failed;
    LOG_WARNING("event recorder: writing an event failed",
                {{"event", ns + "/" + name}, {"reason", snapshot.reason}, {"err", status}});
    if (!created && IsNotFound(status) && current) {
      // Expired on the server (events have a TTL): start a new one next time.
      it->second.event_name.clear();
      it->second.written_count = 0;
    }
    return;
  }
  if (created) {
    ++stats_.created;
  } else {
    ++stats_.patched;
  }
  if (!current) return;
  it->second.event_name = name;
  it->second.written_count = snapshot.count;
}

}  // namespace nvdra::k8s
