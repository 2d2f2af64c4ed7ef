#pragma once

// A watch response read event by event: WatchStream, the events it yields,
// and the options of a watch request (Client::Watch opens one).
//
// The API server answers `?watch=1` with a chunked stream of JSON objects,
// one per line: {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": …}.
// A BOOKMARK carries only metadata.resourceVersion; an ERROR carries a
// Status and ends the watch (code 410: the resourceVersion is too old, the
// caller must relist).
//
// Ownership: a WatchStream owns its HTTP transfer, which ends when the stream
// is destroyed. Thread-safety: confined to one reader thread, except Stop(),
// which any thread may call to end a blocked Next() promptly.

#include <cstddef>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "k8s/api_error.h"
#include "k8s/cache/list_watch.h"
#include "k8s/transport.h"

namespace nvdra::k8s {

// One event type and event shape for the REST watch and the informer's
// ListWatch interface (k8s/cache/list_watch.h), so the adapter passes events
// through unchanged.
using cache::WatchEventType;
using cache::WatchEventTypeName;
using cache::WatchEvent;

struct WatchOptions {
  std::string resource_version;  // start after this RV; "" = from now, after a synthetic ADDED of each object
  std::string label_selector;
  std::string field_selector;
  bool allow_bookmarks = true;
  // The server ends the watch after this; nullopt leaves the server's
  // default (min-request-timeout, randomized).
  std::optional<int> timeout_seconds;
  // Streaming list (WatchList): initial events, then a BOOKMARK annotated
  // k8s.io/initial-events-end. Sets resourceVersionMatch=NotOlderThan.
  bool send_initial_events = false;
};

// One line of a watch stream. kInvalidArgument for a line that is not a
// watch event (bad JSON, unknown type, object missing).
common::StatusOr<WatchEvent> ParseWatchEvent(std::string_view line);

class WatchStream {
 public:
  // `what` names the watch in messages ("watch /api/v1/configmaps").
  WatchStream(std::unique_ptr<HttpStream> stream, std::string what);
  ~WatchStream();
  WatchStream(const WatchStream&) = delete;
  WatchStream& operator=(const WatchStream&) = delete;

  // The next ADDED, MODIFIED, DELETED or BOOKMARK event. nullopt when the
  // server ended the watch (timeoutSeconds): watch again from
  // last_resource_version(). An ERROR event ends the stream and comes back as
  // its Status, with the ApiError (IsGone for 410: relist). kCancelled after
  // Stop() or when `stop` fires; transport errors as HttpTransport gives them;
  // kDataLoss for a line that is not a watch event.
  ApiResult<std::optional<WatchEvent>> Next(std::stop_token stop = {});

  // Ends the watch; a Next() blocked in another thread returns kCancelled at
  // once. Idempotent.
  void Stop();

  // metadata.resourceVersion of the last event returned (bookmarks included),
  // or "" before the first.
  const std::string& last_resource_version() const { return last_resource_version_; }

  // Status, headers and connection facts of the watch response (HTTP version,
  // local port: equal ports mean one shared connection).
  const HttpResponse& head() const { return stream_->head(); }

 private:
  const std::unique_ptr<HttpStream> stream_;
  const std::string what_;
  std::string buffer_;  // bytes received and not yet returned as events
  std::size_t consumed_ = 0;  // buffer_[0, consumed_) are lines already parsed
  std::string last_resource_version_;
  bool ended_ = false;
};

}  // namespace nvdra::k8s
