#include "common/status.h"

#include <cerrno>
#include <memory>
#include <string>

#include <gtest/gtest.h>

namespace nvdra::common {
namespace {

TEST(StatusTest, DefaultIsOkWithEmptyMessage) {
  Status status;
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kOk);
  EXPECT_EQ(status.ToString(), "OK");
  EXPECT_EQ(status, OkStatus());
}

TEST(StatusTest, OkCodeDropsMessage) {
  EXPECT_EQ(Status(StatusCode::kOk, "ignored"), OkStatus());
}

TEST(StatusTest, FactoriesSetCodeAndMessage) {
  EXPECT_EQ(NotFoundError("x").code(), StatusCode::kNotFound);
  EXPECT_EQ(InvalidArgumentError("x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(UnavailableError("x").code(), StatusCode::kUnavailable);
  EXPECT_EQ(AbortedError("x").code(), StatusCode::kAborted);
  EXPECT_EQ(FailedPreconditionError("x").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(DataLossError("x").code(), StatusCode::kDataLoss);
  EXPECT_EQ(UnauthenticatedError("x").code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(NotFoundError("claim ns/a").message(), "claim ns/a");
}

TEST(StatusTest, ToStringUsesGrpcCodeName) {
  EXPECT_EQ(NotFoundError("claim ns/a").ToString(), "NOT_FOUND: claim ns/a");
  EXPECT_EQ(DeadlineExceededError("").ToString(), "DEADLINE_EXCEEDED");
}

TEST(StatusTest, WithContextPrefixesMessageAndKeepsCode) {
  const Status status = InvalidArgumentError("sharing.strategy: unknown").WithContext(
      "claim ns/name: requests[1].config");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "claim ns/name: requests[1].config: sharing.strategy: unknown");
}

TEST(StatusTest, WithContextLeavesOkStatusOk) {
  EXPECT_EQ(OkStatus().WithContext("claim ns/name"), OkStatus());
}

TEST(StatusTest, WithContextOnLvalueLeavesOriginalUnchanged) {
  const Status original = NotFoundError("gone");
  const Status wrapped = original.WithContext("ctx");
  EXPECT_EQ(original.message(), "gone");
  EXPECT_EQ(wrapped.message(), "ctx: gone");
}

TEST(ErrnoToStatusTest, MapsCommonErrnosToCodes) {
  EXPECT_EQ(ErrnoToStatus(ENOENT, "").code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrnoToStatus(EEXIST, "").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(ErrnoToStatus(EACCES, "").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoToStatus(EPERM, "").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoToStatus(EAGAIN, "").code(), StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoToStatus(EINTR, "").code(), StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoToStatus(ETIMEDOUT, "").code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(ErrnoToStatus(ENOSPC, "").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus(EINVAL, "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrnoToStatus(ENOTDIR, "").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrnoToStatus(ENOSYS, "").code(), StatusCode::kUnimplemented);
  EXPECT_EQ(ErrnoToStatus(ECANCELED, "").code(), StatusCode::kCancelled);
  EXPECT_EQ(ErrnoToStatus(0, "").code(), StatusCode::kUnknown);
}

TEST(ErrnoToStatusTest, MessageNamesContextDescriptionAndErrnoName) {
  EXPECT_EQ(ErrnoToStatus(ENOENT, "open /var/lib/x").message(),
            "open /var/lib/x: No such file or directory (ENOENT)");
}

StatusOr<int> Half(int value) {
  if (value % 2 != 0) return InvalidArgumentError("odd");
  return value / 2;
}

TEST(StatusOrTest, HoldsValue) {
  StatusOr<int> result = Half(4);
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result.status().ok());
  EXPECT_EQ(*result, 2);
  EXPECT_EQ(result.value(), 2);
}

TEST(StatusOrTest, HoldsError) {
  StatusOr<int> result = Half(3);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(result.value_or(-1), -1);
}

TEST(StatusOrTest, ConstructedFromOkStatusBecomesInternalError) {
  StatusOr<int> result(OkStatus());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kInternal);
}

TEST(StatusOrTest, HoldsMoveOnlyValue) {
  StatusOr<std::unique_ptr<int>> result = std::make_unique<int>(7);
  ASSERT_TRUE(result.ok());
  std::unique_ptr<int> owned = std::move(result).value();
  EXPECT_EQ(*owned, 7);
}

TEST(StatusOrTest, ConvertsFromConstructibleType) {
  StatusOr<std::string> result = "literal";
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->size(), 7u);
}

TEST(StatusOrDeathTest, ValueOnErrorAborts) {
  StatusOr<int> result = NotFoundError("nothing");
  EXPECT_DEATH({ (void)result.value(); }, "NOT_FOUND: nothing");
}

Status QuarterViaMacros(int value, int& out) {
  ASSIGN_OR_RETURN(int half, Half(value));
  ASSIGN_OR_RETURN(out, Half(half));
  return OkStatus();
}

TEST(StatusMacrosTest, AssignOrReturnAssignsOnSuccess) {
  int out = 0;
  EXPECT_TRUE(QuarterViaMacros(8, out).ok());
  EXPECT_EQ(out, 2);
}

TEST(StatusMacrosTest, AssignOrReturnPropagatesFirstError) {
  int out = 0;
  EXPECT_EQ(QuarterViaMacros(6, out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out, 0);
}

Status Check(int value, int& calls) {
  ++calls;
  RETURN_IF_ERROR(Half(value));
  RETURN_IF_ERROR(value > 10 ? OutOfRangeError("big").WithContext("value") : OkStatus());
  return OkStatus();
}

TEST(StatusMacrosTest, ReturnIfErrorPassesOkAndReturnsErrors) {
  int calls = 0;
  EXPECT_TRUE(Check(4, calls).ok());
  EXPECT_EQ(Check(3, calls).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Check(12, calls).message(), "value: big");
  EXPECT_EQ(calls, 3);
}

}  // namespace
}  // namespace nvdra::common
