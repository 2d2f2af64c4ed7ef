// Mapping of Kubernetes Status bodies and HTTP codes to typed results, and
// Retry-After parsing.

#include "k8s/api_error.h"

#include <gtest/gtest.h>

namespace nvdra::k8s {
namespace {

using common::StatusCode;

std::string StatusBody(int code, const std::string& reason, const std::string& details = "{}") {
  return R"({"kind":"Status","apiVersion":"v1","status":"Failure","message":"m )" + reason + R"(","reason":")" +
         reason + R"(","details":)" + details + R"(,"code":)" + std::to_string(code) + "}";
}

TEST(ApiError, MapsEachHttpCodeOnce) {
  struct Case {
    int code;
    std::string reason;
    StatusCode want;
  } cases[] = {
      {404, "NotFound", StatusCode::kNotFound},
      {409, "AlreadyExists", StatusCode::kAlreadyExists},
      {409, "Conflict", StatusCode::kAborted},
      {410, "Expired", StatusCode::kOutOfRange},
      {410, "Gone", StatusCode::kOutOfRange},
      {422, "Invalid", StatusCode::kInvalidArgument},
      {400, "BadRequest", StatusCode::kInvalidArgument},
      {401, "Unauthorized", StatusCode::kUnauthenticated},
      {403, "Forbidden", StatusCode::kPermissionDenied},
      {429, "TooManyRequests", StatusCode::kUnavailable},
      {500, "InternalError", StatusCode::kUnavailable},
      {503, "ServiceUnavailable", StatusCode::kUnavailable},
      {504, "Timeout", StatusCode::kDeadlineExceeded},
      {418, "Teapot", StatusCode::kUnknown},
  };
  for (const auto& c : cases) {
    ApiError e = ApiErrorFromResponse(c.code, StatusBody(c.code, c.reason), "");
    EXPECT_EQ(e.http_code, c.code);
    EXPECT_EQ(e.reason, c.reason);
    auto s = e.ToStatus("GET /x");
    EXPECT_EQ(s.code(), c.want) << c.code << " " << c.reason;
    EXPECT_NE(s.message().find("GET /x: m " + c.reason), std::string::npos) << s;
  }
}

TEST(ApiError, HelpersBranchWithoutText) {
  EXPECT_TRUE(IsNotFound(ApiErrorFromResponse(404, "", "").ToStatus("")));
  EXPECT_TRUE(IsConflict(ApiErrorFromResponse(409, StatusBody(409, "Conflict"), "").ToStatus("")));
  EXPECT_FALSE(IsConflict(ApiErrorFromResponse(409, StatusBody(409, "AlreadyExists"), "").ToStatus("")));
  EXPECT_TRUE(IsAlreadyExists(ApiErrorFromResponse(409, StatusBody(409, "AlreadyExists"), "").ToStatus("")));
  EXPECT_TRUE(IsGone(ApiErrorFromResponse(410, StatusBody(410, "Expired"), "").ToStatus("")));
  EXPECT_TRUE(IsForbidden(ApiErrorFromResponse(403, "", "").ToStatus("")));
  EXPECT_TRUE(IsUnauthorized(ApiErrorFromResponse(401, "", "").ToStatus("")));

  ApiResult<int> throttled(ApiErrorFromResponse(429, StatusBody(429, "TooManyRequests"), "3"), "GET /y");
  EXPECT_EQ(throttled.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(IsTooManyRequests(throttled));
  EXPECT_EQ(RetryAfter(throttled), std::chrono::seconds(3));
  ApiResult<int> unavailable(ApiErrorFromResponse(503, "", ""), "GET /y");
  EXPECT_FALSE(IsTooManyRequests(unavailable));
  ApiResult<int> local(common::UnavailableError("connect"));
  EXPECT_FALSE(local.api_error().has_value());
  EXPECT_FALSE(RetryAfter(local).has_value());
}

TEST(ApiError, InvalidListsEveryCause) {
  const std::string details =
      R"({"name":"x","kind":"ConfigMap","causes":[{"reason":"FieldValueInvalid","message":"bad key","field":"data[a b]"},)"
      R"({"reason":"FieldValueRequired","message":"Required value","field":"metadata.name"}]})";
  auto s = ApiErrorFromResponse(422, StatusBody(422, "Invalid", details), "").ToStatus("POST /c");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("data[a b]: bad key"), std::string::npos) << s;
  EXPECT_NE(s.message().find("metadata.name: Required value"), std::string::npos) << s;
}

TEST(ApiError, RetryAfterFromDetailsWhenNoHeaderAndHeaderWins) {
  auto from_details = ApiErrorFromResponse(429, StatusBody(429, "TooManyRequests", R"({"retryAfterSeconds":7})"), "");
  EXPECT_EQ(from_details.retry_after, std::chrono::seconds(7));
  auto header_wins = ApiErrorFromResponse(429, StatusBody(429, "TooManyRequests", R"({"retryAfterSeconds":7})"), "2");
  EXPECT_EQ(header_wins.retry_after, std::chrono::seconds(2));
}

TEST(ApiError, NonStatusBodiesStillMap) {
  auto text = ApiErrorFromResponse(502, "<html>bad gateway</html>", "");
  EXPECT_EQ(text.reason, "");
  EXPECT_EQ(text.ToStatus("").code(), StatusCode::kUnavailable);
  EXPECT_NE(text.message.find("bad gateway"), std::string::npos);
  auto empty = ApiErrorFromResponse(404, "", "");
  EXPECT_EQ(empty.reason, "NotFound");
}

TEST(ApiError, WatchErrorObjectWithoutCodeUsesReason) {
  auto e = ApiErrorFromStatusObject(nlohmann::json::parse(R"({"kind":"Status","reason":"Expired","message":"too old"})"));
  EXPECT_TRUE(IsGone(e.ToStatus("")));
}

TEST(RetryAfter, ParsesSecondsAndHttpDates) {
  EXPECT_EQ(ParseRetryAfter("5"), std::chrono::seconds(5));
  EXPECT_EQ(ParseRetryAfter(" 0 "), std::chrono::seconds(0));
  EXPECT_FALSE(ParseRetryAfter("").has_value());
  EXPECT_FALSE(ParseRetryAfter("-1").has_value());
  EXPECT_FALSE(ParseRetryAfter("soon").has_value());
  EXPECT_FALSE(ParseRetryAfter("1.5").has_value());
  const auto now = std::chrono::system_clock::from_time_t(784111767);  // Sun, 06 Nov 1994 08:49:27 GMT
  EXPECT_EQ(ParseRetryAfter("Sun, 06 Nov 1994 08:49:37 GMT", now), std::chrono::seconds(10));
  EXPECT_EQ(ParseRetryAfter("Sun, 06 Nov 1994 08:49:00 GMT", now), std::chrono::seconds(0));
}

}  // namespace
}  // namespace nvdra::k8s
