#pragma once

// What an informer needs from the API server: a full list and a watch from a
// resourceVersion. The REST client adapts to this interface; tests script it.
// Defines: ListOptions, ListResult, ListVisitor, WatchOptions, WatchEventType,
// WatchEvent, WatchStream, ListWatch, GoneError(), IsGone(), WatchErrorToStatus(),
// ObjectResourceVersion().
//
// Errors are common::Status codes. HTTP 410 Gone ("too old resource
// version", reason Expired or Gone) is kOutOfRange and nothing else is:
// the resourceVersion asked for lies outside the window the server keeps,
// which is what kOutOfRange means in the canonical codes. Test with IsGone().
// Other codes, as the REST client maps them: kUnavailable (connection errors,
// 429, 5xx: retry with backoff), kPermissionDenied / kUnauthenticated (403 /
// 401), kNotFound (no such resource type), kCancelled (stopped).
//
// Ownership: a ListWatch is owned by its informer; a WatchStream by whoever
// called Watch(). Thread-safety: ListWatch is thread-safe; a WatchStream is
// confined to one reader thread, except Stop(), which any thread may call.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace nvdra::k8s::cache {

struct ListOptions {
  std::string label_selector;  // labelSelector, passed through; empty: all
  std::string field_selector;  // fieldSelector, passed through; empty: all
  // resourceVersion of the list: empty is a quorum read (the newest state),
  // "0" allows the server's cache. The informer always lists with empty, so a
  // relist after 410 never goes back in time.
  std::string resource_version;
  // Page size (limit=); the implementation follows continue tokens itself.
  std::int64_t page_size = 500;
};

struct ListResult {
  // Every item of every page, each a complete object. Items of built-in lists
  // carry no apiVersion/kind; informers do not need them.
  std::vector<nlohmann::json> items;
  // The list's metadata.resourceVersion: where a watch continues from.
  std::string resource_version;
};

// Receives a list's items one at a time (ListWatch::ListEach).
struct ListVisitor {
  // One item, a complete object, to move from or copy.
  std::function<void(nlohmann::json& item)> on_item;
  // The list starts over (its snapshot expired midway): forget every item
  // received so far. May be empty when the caller keeps nothing.
  std::function<void()> on_restart;
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  // Start after this version; never empty from an informer, except for a
  // streaming list.
  std::string resource_version;
  bool allow_bookmarks = true;   // allowWatchBookmarks=true
  // A streaming list (WatchList): the server first sends every object as
  // ADDED, then a BOOKMARK annotated k8s.io/initial-events-end, then the
  // changes (sendInitialEvents=true, resourceVersionMatch=NotOlderThan,
  // resource_version empty: a consistent read).
  bool send_initial_events = false;
  // timeoutSeconds=; zero leaves it to the server.
  std::chrono::seconds timeout{0};
};

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark, kError };

// "ADDED", ... as on the wire.
std::string_view WatchEventTypeName(WatchEventType type);
// The type for a wire name; kInvalidArgument for anything else.
common::StatusOr<WatchEventType> ParseWatchEventType(std::string_view name);

struct WatchEvent {
  WatchEventType type = WatchEventType::kAdded;
  // The object; for kBookmark only metadata.resourceVersion is meaningful;
  // for kError a metav1.Status ({"code":410,"reason":"Expired",...}).
  nlohmann::json object;
};

// One open watch: a stream of events ending when the server closes it.
class WatchStream {
 public:
  virtual ~WatchStream() = default;  // closes the stream if still open

  // Blocks for the next event. Returns:
  //  - an event, ERROR events included (they are data, not a broken stream);
  //  - std::nullopt when the server ended the stream normally (its
  //    timeoutSeconds or its own limit): watch again from the last version;
  //  - kCancelled once `stop` is requested or Stop() was called;
  //  - IsGone() for an HTTP 410 answer; kUnavailable (or another code) when
  //    the connection broke or a line was not a valid event.
  // After an error or nullopt, further calls return the same again.
  virtual common::StatusOr<std::optional<WatchEvent>> Next(std::stop_token stop) = 0;

  // Ends the stream from any thread; a blocked Next() returns kCancelled
  // promptly. Idempotent.
  virtual void Stop() = 0;
};

// One resource type (one group/version/resource, optionally one namespace).
class ListWatch {
 public:
  virtual ~ListWatch() = default;

  // Lists every object matching `options`, following continue tokens. If a
  // continue token expires midway (410), the implementation starts the list
  // over itself rather than returning half a list. kCancelled when `stop` is
  // requested; other errors as in the file comment.
  virtual common::StatusOr<ListResult> List(const ListOptions& options, std::stop_token stop) = 0;

  // The same list, handed to `visitor` item by item as it is read, so that a
  // caller converting items (the informer packs them) never holds the whole
  // list as JSON trees at once; the list's resourceVersion is the result.
  // On error, items already visited belong to no complete list. The default
  // calls List() and visits its items; implementations override it to bound
  // their memory to about one item.
  virtual common::StatusOr<std::string> ListEach(const ListOptions& options, std::stop_token stop,
                                                 const ListVisitor& visitor);

  // Opens a watch. IsGone() when options.resource_version is too old (the
  // caller relists); kCancelled when `stop` is requested while connecting.
  virtual common::StatusOr<std::unique_ptr<WatchStream>> Watch(const WatchOptions& options,
                                                               std::stop_token stop) = 0;
};

// A kOutOfRange status: what a 410 Gone becomes.
common::Status GoneError(std::string_view message);
// True for a 410 Gone (kOutOfRange), false for everything else including OK.
bool IsGone(const common::Status& status);

// The Status for the object of an ERROR watch event (a metav1.Status):
// code 410 or reason Expired/Gone is GoneError, 429 and 5xx kUnavailable,
// 401 kUnauthenticated, 403 kPermissionDenied, 404 kNotFound, anything else
// kUnknown. The message names the reason and the server's message. Never OK.
common::Status WatchErrorToStatus(const nlohmann::json& status_object);

// metadata.resourceVersion of `object`, or empty when absent or not a string.
std::string ObjectResourceVersion(const nlohmann::json& object);

}  // namespace nvdra::k8s::cache
