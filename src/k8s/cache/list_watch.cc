#include "k8s/cache/list_watch.h"

#include <string>
#include <utility>

#include "common/json_fields.h"

namespace nvdra::k8s::cache {
std::string_view WatchEventTypeName(WatchEventType type) {
  switch (type) {
    case WatchEventType::kAdded: return "ADDED";
    case WatchEventType::kModified: return "MODIFIED";
    case WatchEventType::kDeleted: return "DELETED";
    case WatchEventType::kBookmark: return "BOOKMARK";
    case WatchEventType::kError: return "ERROR";
  }
  return "UNKNOWN";
}

common::StatusOr<WatchEventType> ParseWatchEventType(std::string_view name) {
  if (name == "ADDED") return WatchEventType::kAdded;
  if (name == "MODIFIED") return WatchEventType::kModified;
  if (name == "DELETED") return WatchEventType::kDeleted;
  if (name == "BOOKMARK") return WatchEventType::kBookmark;
  if (name == "ERROR") return WatchEventType::kError;
  return common::InvalidArgumentError("watch event type \"" + std::string(name) +
                                      "\": want ADDED, MODIFIED, DELETED, BOOKMARK or ERROR");
}

common::StatusOr<std::string> ListWatch::ListEach(const ListOptions& options, std::stop_token stop,
                                                  const ListVisitor& visitor) {
  common::StatusOr<ListResult> result = List(options, stop);
  if (!result.ok()) return result.status();
  for (nlohmann::json& item : result->items) visitor.on_item(item);
  return std::move(result->resource_version);
}

common::Status GoneError(std::string_view message) { return common::OutOfRangeError(message); }

bool IsGone(const common::Status& status) {
  return status.code() == common::StatusCode::kOutOfRange;
}

common::Status WatchErrorToStatus(const nlohmann::json& status_object) {
  const std::int64_t code = common::JsonInt(status_object, {"code"});
  const std::string reason = common::JsonString(status_object, "reason");
  const std::string message = "watch error " + std::to_string(code) + " " +
                              (reason.empty() ? "(no reason)" : reason) + ": " +
                              common::JsonString(status_object, "message");
  if (code == 410 || reason == "Expired" || reason == "Gone") return GoneError(message);
  if (code == 429 || (code >= 500 && code < 600)) return common::UnavailableError(message);
  if (code == 401) return common::UnauthenticatedError(message);
  if (code == 403) return common::PermissionDeniedError(message);
  if (code == 404) return common::NotFoundError(message);
  return common::UnknownError(message);
}

std::string ObjectResourceVersion(const nlohmann::json& object) {
  return common::JsonString(object, {"metadata", "resourceVersion"});
}

}  // namespace nvdra::k8s::cache
