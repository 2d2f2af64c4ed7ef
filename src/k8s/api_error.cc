#include "k8s/api_error.h"

#include <charconv>
#include <ctime>

namespace nvdra::k8s {
namespace {

using common::Status;
using common::StatusCode;

StatusCode CodeFor(int http_code, std::string_view reason) {
  switch (http_code) {
    case 400: return StatusCode::kInvalidArgument;
    case 401: return StatusCode::kUnauthenticated;
    case 403: return StatusCode::kPermissionDenied;
    case 404: return StatusCode::kNotFound;
    case 408: return StatusCode::kDeadlineExceeded;
    case 409: return reason == "AlreadyExists" ? StatusCode::kAlreadyExists : StatusCode::kAborted;
    case 410: return StatusCode::kOutOfRange;
    case 422: return StatusCode::kInvalidArgument;
    case 429: return StatusCode::kUnavailable;
    case 504: return StatusCode::kDeadlineExceeded;
    default: break;
  }
  if (http_code >= 500 && http_code <= 599) return StatusCode::kUnavailable;
  // Watch ERROR events may carry only a reason.
  if (reason == "NotFound") return StatusCode::kNotFound;
  if (reason == "Expired" || reason == "Gone") return StatusCode::kOutOfRange;
  return StatusCode::kUnknown;
}

std::string ReasonForCode(int http_code) {
  switch (http_code) {
    case 400: return "BadRequest";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "NotFound";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 422: return "Invalid";
    case 429: return "TooManyRequests";
    case 500: return "InternalError";
    case 503: return "ServiceUnavailable";
    case 504: return "Timeout";
    default: return "";
  }
}

std::optional<std::chrono::seconds> ParseSeconds(std::string_view v) {
  long long n = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || ptr != v.data() + v.size() || n < 0) return std::nullopt;
  return std::chrono::seconds(n);
}

}  // namespace

std::optional<std::chrono::seconds> ParseRetryAfter(std::string_view value,
                                                    std::chrono::system_clock::time_point now) {
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
  if (value.empty()) return std::nullopt;
  if (auto s = ParseSeconds(value)) return s;
  // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT".
  std::tm tm{};
  const std::string text(value);
  const char* end = ::strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (end == nullptr || *end != '\0') return std::nullopt;
  const auto when = std::chrono::system_clock::from_time_t(::timegm(&tm));
  if (when <= now) return std::chrono::seconds(0);
  return std::chrono::duration_cast<std::chrono::seconds>(when - now);
}

ApiError ApiErrorFromStatusObject(const nlohmann::json& object) {
  ApiError e;
  if (!object.is_object()) return e;
  if (auto it = object.find("code"); it != object.end() && it->is_number_integer()) e.http_code = it->get<int>();
  if (auto it = object.find("reason"); it != object.end() && it->is_string()) e.reason = it->get<std::string>();
  if (auto it = object.find("message"); it != object.end() && it->is_string()) e.message = it->get<std::string>();
  if (auto it = object.find("details"); it != object.end() && it->is_object()) {
    e.details = *it;
    if (auto r = it->find("retryAfterSeconds"); r != it->end() && r->is_number_integer() && r->get<long>() >= 0) {
      e.retry_after = std::chrono::seconds(r->get<long>());
    }
  }
  return e;
}

ApiError ApiErrorFromResponse(int http_code, std::string_view body, std::string_view retry_after_header) {
  ApiError e;
  const auto parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && parsed.value("kind", "") == "Status") {
    e = ApiErrorFromStatusObject(parsed);
  } else if (!body.empty()) {
    // Not a Status (a proxy, or a plain-text answer): keep a bounded excerpt.
    e.message = std::string(body.substr(0, 512));
  }
  e.http_code = http_code;  // the transport's code is the truth
  if (e.reason.empty()) e.reason = ReasonForCode(http_code);
  if (auto header = ParseRetryAfter(retry_after_header)) e.retry_after = header;
  return e;
}

Status ApiError::ToStatus(std::string_view context) const {
  std::string text(context);
  if (!text.empty()) text += ": ";
  text += message.empty() ? "HTTP " + std::to_string(http_code) : message;
  text += " (HTTP " + std::to_string(http_code);
  if (!reason.empty()) text += " " + reason;
  if (retry_after) text += ", retry after " + std::to_string(retry_after->count()) + "s";
  text += ")";
  // 422 lists each cause; the server's message often summarises only some.
  if (auto causes = details.find("causes"); causes != details.end() && causes->is_array()) {
    for (const auto& cause : *causes) {
      if (!cause.is_object()) continue;
      text += "; " + cause.value("field", std::string("?")) + ": " + cause.value("message", std::string());
    }
  }
  return Status(CodeFor(http_code, reason), std::move(text));
}

}  // namespace nvdra::k8s
