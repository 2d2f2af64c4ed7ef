#pragma once

// API errors as typed results: the Kubernetes `Status` body and HTTP code of
// a failed request become a common::Status once, here, and the structured
// details travel beside it in ApiError (inside ApiResult<T>), so callers
// branch on codes or fields, never on message text.
//
// Defines: ApiError, ApiErrorFromResponse, ApiResult<T>, ParseRetryAfter, and
// the helpers IsNotFound, IsAlreadyExists, IsConflict, IsGone, IsInvalid,
// IsForbidden, IsUnauthorized, IsTooManyRequests, RetryAfter.
//
// HTTP to code (what the caller should do):
//   404               kNotFound           the object is not there
//   409 AlreadyExists kAlreadyExists      a create found a name taken
//   409 (other)       kAborted            conflict: re-read, re-apply, retry
//   410 Gone/Expired  kOutOfRange         the resourceVersion or continue token expired: relist
//   422 Invalid       kInvalidArgument    message lists details.causes
//   400               kInvalidArgument
//   401               kUnauthenticated
//   403               kPermissionDenied
//   429, 5xx          kUnavailable        retry after RetryAfter() / backoff
//   504, 408          kDeadlineExceeded
//   other             kUnknown
// kOutOfRange is used for nothing else in this library, so IsGone() is exact.
//
// Ownership: values. Thread-safety: thread-compatible.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace nvdra::k8s {

// The parsed body of a failed request (kind: Status) and its HTTP facts.
struct ApiError {
  int http_code = 0;
  std::string reason;   // "NotFound", "AlreadyExists", "Conflict", "Expired", ...
  std::string message;  // the server's message
  nlohmann::json details = nlohmann::json::object();  // name, kind, causes[], retryAfterSeconds
  // From the Retry-After header, else details.retryAfterSeconds.
  std::optional<std::chrono::seconds> retry_after;

  // The Status this error maps to (see the table above); `context` names the
  // request ("GET /api/v1/namespaces/a/pods/b").
  common::Status ToStatus(std::string_view context) const;
};

// Reads an HTTP answer that is not 2xx. `body` may be a Status object, other
// JSON, text or empty: the error is built from what is there.
// `retry_after_header` is the raw Retry-After value ("" when absent).
ApiError ApiErrorFromResponse(int http_code, std::string_view body, std::string_view retry_after_header);

// ApiError from a Status object already parsed (a watch ERROR event).
ApiError ApiErrorFromStatusObject(const nlohmann::json& status_object);

// Retry-After in seconds ("3") or as an HTTP date; nullopt when unparsable.
// A date in the past is zero. `now` is the wall clock (for the date form).
std::optional<std::chrono::seconds> ParseRetryAfter(
    std::string_view value, std::chrono::system_clock::time_point now = std::chrono::system_clock::now());

// A StatusOr<T> that also carries the ApiError of a failed API call (absent
// when the failure was local: transport, cancellation, bad input). Works with
// RETURN_IF_ERROR and ASSIGN_OR_RETURN as a StatusOr does.
template <typename T>
class [[nodiscard]] ApiResult : public common::StatusOr<T> {
 public:
  using common::StatusOr<T>::StatusOr;
  ApiResult(common::StatusOr<T> result) : common::StatusOr<T>(std::move(result)) {}  // NOLINT
  ApiResult(ApiError error, std::string_view context)
      : common::StatusOr<T>(error.ToStatus(context)), api_error_(std::move(error)) {}

  const std::optional<ApiError>& api_error() const { return api_error_; }

 private:
  std::optional<ApiError> api_error_;
};

// Code-based helpers: exact, because each code has one source (table above).
inline bool IsNotFound(const common::Status& s) { return s.code() == common::StatusCode::kNotFound; }
inline bool IsAlreadyExists(const common::Status& s) { return s.code() == common::StatusCode::kAlreadyExists; }
inline bool IsConflict(const common::Status& s) { return s.code() == common::StatusCode::kAborted; }
inline bool IsGone(const common::Status& s) { return s.code() == common::StatusCode::kOutOfRange; }
inline bool IsInvalid(const common::Status& s) { return s.code() == common::StatusCode::kInvalidArgument; }
inline bool IsForbidden(const common::Status& s) { return s.code() == common::StatusCode::kPermissionDenied; }
inline bool IsUnauthorized(const common::Status& s) { return s.code() == common::StatusCode::kUnauthenticated; }

// Helpers that need the HTTP facts (429 and 503 share kUnavailable).
inline bool IsTooManyRequests(const std::optional<ApiError>& e) { return e && e->http_code == 429; }
inline std::optional<std::chrono::seconds> RetryAfter(const std::optional<ApiError>& e) {
  return e ? e->retry_after : std::nullopt;
}
template <typename T>
bool IsTooManyRequests(const ApiResult<T>& r) { return IsTooManyRequests(r.api_error()); }
template <typename T>
std::optional<std::chrono::seconds> RetryAfter(const ApiResult<T>& r) { return RetryAfter(r.api_error()); }

}  // namespace nvdra::k8s
