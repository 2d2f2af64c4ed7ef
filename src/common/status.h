#pragma once

// Error values for every API edge: Status (a code and a message) and
// StatusOr<T> (a value or the Status saying why it is missing).
//
// Defines: StatusCode (gRPC canonical codes), Status, StatusOr<T>, one factory
// per code (NotFoundError, ...), ErrnoToStatus, and the RETURN_IF_ERROR /
// ASSIGN_OR_RETURN macros.
//
// Codes follow gRPC one to one, so the kubelet edge can pass them through.
// What a caller should do, by code:
//   kUnavailable         retry just this call (with backoff).
//   kAborted             redo the whole read-modify-write (a conflict).
//   kFailedPrecondition  do not retry until someone fixes the state.
//   kInvalidArgument     the input is wrong; retrying changes nothing.
// Callers test ok() or switch on code() with a default: branch; the message
// is for people and may change.
//
// Ownership: values; a Status owns its message. Thread-safety: thread-compatible
// (concurrent const calls are fine; mutation needs outside synchronization).

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace nvdra::common {

enum class StatusCode : std::uint8_t {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// The gRPC spelling of `code`: "NOT_FOUND", "INVALID_ARGUMENT", ...
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  // An OK status.
  Status() = default;
  // A status with `code` and `message`. With kOk the message is dropped, so
  // every OK status compares equal.
  Status(StatusCode code, std::string message);

  [[nodiscard]] bool ok() const { return code_ == StatusCode::kOk; }
  [[nodiscard]] StatusCode code() const { return code_; }
  [[nodiscard]] const std::string& message() const { return message_; }

  // The same status with "`context`: " put in front of the message, so each
  // layer names what it was working on ("claim ns/name: requests[1]: ...").
  // An OK status stays OK; an empty context changes nothing.
  [[nodiscard]] Status WithContext(std::string_view context) const&;
  [[nodiscard]] Status WithContext(std::string_view context) &&;

  // "OK" or "NOT_FOUND: message".
  [[nodiscard]] std::string ToString() const;

  // Documents that an error is dropped on purpose.
  void IgnoreError() const {}

  friend bool operator==(const Status&, const Status&) = default;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

std::ostream& operator<<(std::ostream& os, const Status& status);

// Factories, one per code.
inline Status OkStatus() { return Status(); }
Status CancelledError(std::string_view message);
Status UnknownError(std::string_view message);
Status InvalidArgumentError(std::string_view message);
Status DeadlineExceededError(std::string_view message);
Status NotFoundError(std::string_view message);
Status AlreadyExistsError(std::string_view message);
Status PermissionDeniedError(std::string_view message);
Status ResourceExhaustedError(std::string_view message);
Status FailedPreconditionError(std::string_view message);
Status AbortedError(std::string_view message);
Status OutOfRangeError(std::string_view message);
Status UnimplementedError(std::string_view message);
Status InternalError(std::string_view message);
Status UnavailableError(std::string_view message);
Status DataLossError(std::string_view message);
Status UnauthenticatedError(std::string_view message);

// The one place errno becomes a Status. The message is
// "`context`: <description> (<ENAME>)", e.g. "open /x: No such file or
// directory (ENOENT)". ENOENT is kNotFound, EEXIST kAlreadyExists, EACCES and
// EPERM kPermissionDenied, EAGAIN/EBUSY/EINTR/connection errors kUnavailable,
// ETIMEDOUT kDeadlineExceeded, ENOSPC/ENOMEM/EMFILE kResourceExhausted, EINVAL
// kInvalidArgument, ENOTDIR/EISDIR/ENOTEMPTY kFailedPrecondition, ENOSYS/ENOTSUP
// kUnimplemented, ECANCELED kCancelled, the rest kInternal. errno 0 is kUnknown
// (a caller bug: it asked for an error where there was none).
Status ErrnoToStatus(int errno_value, std::string_view context);

namespace internal {
// Aborts with a message: a StatusOr was misused (a programmer error).
[[noreturn]] void StatusOrDie(const char* what, const Status& status);
}  // namespace internal

// A T, or the non-OK Status saying why there is none. Never "OK but empty".
template <typename T>
class [[nodiscard]] StatusOr {
  static_assert(!std::is_same_v<std::remove_cvref_t<T>, Status>,
                "StatusOr<Status> is meaningless");

 public:
  // From an error. An OK `status` here is a programmer error: it would be a
  // StatusOr with neither value nor error, so it becomes kInternal.
  StatusOr(const Status& status) : status_(status) { CheckNotOk(); }  // NOLINT: implicit
  StatusOr(Status&& status) : status_(std::move(status)) { CheckNotOk(); }  // NOLINT
  // From a value.
  StatusOr(const T& value) : value_(value) {}  // NOLINT: implicit by design
  StatusOr(T&& value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  // From anything T can be built from (a string literal for StatusOr<std::string>).
  template <typename U>
    requires(std::is_constructible_v<T, U&&> &&
             !std::is_same_v<std::remove_cvref_t<U>, T> &&
             !std::is_same_v<std::remove_cvref_t<U>, Status> &&
             !std::is_same_v<std::remove_cvref_t<U>, StatusOr>)
  StatusOr(U&& value) : value_(std::in_place, std::forward<U>(value)) {}  // NOLINT

  [[nodiscard]] bool ok() const { return value_.has_value(); }
  // OK when a value is held.
  [[nodiscard]] const Status& status() const& { return status_; }
  [[nodiscard]] Status status() && { return std::move(status_); }
  // This StatusOr with `context` added to its error (Status::WithContext);
  // a value passes through: ASSIGN_OR_RETURN(x, Load().WithContext("load x")).
  [[nodiscard]] StatusOr WithContext(std::string_view context) && {
    if (ok()) return std::move(*this);
    return std::move(status_).WithContext(context);
  }

  // The value. Calling these without ok() is a programmer error and aborts.
  [[nodiscard]] const T& value() const& { CheckHasValue(); return *value_; }
  [[nodiscard]] T& value() & { CheckHasValue(); return *value_; }
  [[nodiscard]] T&& value() && { CheckHasValue(); return std::move(*value_); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  // The value, or `fallback` when there is none.
  template <typename U>
  [[nodiscard]] T value_or(U&& fallback) const& {
    return ok() ? *value_ : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  void CheckNotOk() {
    if (status_.ok()) {
      status_ = InternalError("StatusOr constructed from an OK status without a value");
    }
  }
  void CheckHasValue() const {
    if (!value_.has_value()) internal::StatusOrDie("StatusOr::value() on an error", status_);
  }

  Status status_;  // OK exactly when value_ holds a value
  std::optional<T> value_;
};

namespace internal {
inline const Status& AsStatus(const Status& status) { return status; }
template <typename T>
const Status& AsStatus(const StatusOr<T>& status_or) { return status_or.status(); }
}  // namespace internal

}  // namespace nvdra::common

#define NVDRA_STATUS_CONCAT_INNER(a, b) a##b
#define NVDRA_STATUS_CONCAT(a, b) NVDRA_STATUS_CONCAT_INNER(a, b)

// Evaluates `expr` (a Status or StatusOr) and returns its Status from the
// enclosing function when it is not OK. Add context at the call:
//   RETURN_IF_ERROR(store.Write(claim).WithContext("claim " + name));
#define RETURN_IF_ERROR(expr)                                                  \
  do {                                                                         \
    /* auto&& extends the life of a temporary Status or StatusOr. */           \
    auto&& nvdra_status_expr_ = (expr);                                        \
    if (!::nvdra::common::internal::AsStatus(nvdra_status_expr_).ok()) {       \
      return ::nvdra::common::internal::AsStatus(nvdra_status_expr_);          \
    }                                                                          \
  } while (false)

// Evaluates `rexpr` (a StatusOr<T>); on error returns its Status from the
// enclosing function, otherwise moves the value into `lhs`:
//   ASSIGN_OR_RETURN(auto config, ParseConfig(text));
// `lhs` may not contain unparenthesized commas.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  NVDRA_ASSIGN_OR_RETURN_IMPL(NVDRA_STATUS_CONCAT(nvdra_statusor_, __LINE__), lhs, rexpr)
#define NVDRA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()
