#include "common/status.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace nvdra::common {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kCancelled: return "CANCELLED";
    case StatusCode::kUnknown: return "UNKNOWN";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kAlreadyExists: return "ALREADY_EXISTS";
    case StatusCode::kPermissionDenied: return "PERMISSION_DENIED";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kAborted: return "ABORTED";
    case StatusCode::kOutOfRange: return "OUT_OF_RANGE";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kDataLoss: return "DATA_LOSS";
    case StatusCode::kUnauthenticated: return "UNAUTHENTICATED";
  }
  return "UNKNOWN_CODE";
}

Status::Status(StatusCode code, std::string message)
    : code_(code), message_(code == StatusCode::kOk ? std::string() : std::move(message)) {}

Status Status::WithContext(std::string_view context) const& {
  Status copy = *this;
  return std::move(copy).WithContext(context);
}

Status Status::WithContext(std::string_view context) && {
  if (ok() || context.empty()) return std::move(*this);
  std::string message;
  message.reserve(context.size() + 2 + message_.size());
  message.append(context);
  if (!message_.empty()) message.append(": ").append(message_);
  return Status(code_, std::move(message));
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(code_));
  if (!message_.empty()) out.append(": ").append(message_);
  return out;
}

std::ostream& operator<<(std::ostream& os, const Status& status) {
  return os << status.ToString();
}

#define NVDRA_DEFINE_STATUS_FACTORY(Name, code)            \
  Status Name(std::string_view message) {                 \
    return Status(StatusCode::code, std::string(message)); \
  }
NVDRA_DEFINE_STATUS_FACTORY(CancelledError, kCancelled)
NVDRA_DEFINE_STATUS_FACTORY(UnknownError, kUnknown)
NVDRA_DEFINE_STATUS_FACTORY(InvalidArgumentError, kInvalidArgument)
NVDRA_DEFINE_STATUS_FACTORY(DeadlineExceededError, kDeadlineExceeded)
NVDRA_DEFINE_STATUS_FACTORY(NotFoundError, kNotFound)
NVDRA_DEFINE_STATUS_FACTORY(AlreadyExistsError, kAlreadyExists)
NVDRA_DEFINE_STATUS_FACTORY(PermissionDeniedError, kPermissionDenied)
NVDRA_DEFINE_STATUS_FACTORY(ResourceExhaustedError, kResourceExhausted)
NVDRA_DEFINE_STATUS_FACTORY(FailedPreconditionError, kFailedPrecondition)
NVDRA_DEFINE_STATUS_FACTORY(AbortedError, kAborted)
NVDRA_DEFINE_STATUS_FACTORY(OutOfRangeError, kOutOfRange)
NVDRA_DEFINE_STATUS_FACTORY(UnimplementedError, kUnimplemented)
NVDRA_DEFINE_STATUS_FACTORY(InternalError, kInternal)
NVDRA_DEFINE_STATUS_FACTORY(UnavailableError, kUnavailable)
NVDRA_DEFINE_STATUS_FACTORY(DataLossError, kDataLoss)
NVDRA_DEFINE_STATUS_FACTORY(UnauthenticatedError, kUnauthenticated)
#undef NVDRA_DEFINE_STATUS_FACTORY

namespace {

StatusCode ErrnoToCode(int errno_value) {
  switch (errno_value) {
    case 0: return StatusCode::kUnknown;
    case ENOENT: case ENXIO: case ENODEV: case ESRCH: return StatusCode::kNotFound;
    case EEXIST: return StatusCode::kAlreadyExists;
    case EACCES: case EPERM: case EROFS: return StatusCode::kPermissionDenied;
    case EINVAL: case E2BIG: case ENAMETOOLONG: case EBADF: case EFAULT:
      return StatusCode::kInvalidArgument;
    case ENOTDIR: case EISDIR: case ENOTEMPTY: case ELOOP: case EXDEV: case ENOEXEC:
    case ETXTBSY: case ECHILD:
      return StatusCode::kFailedPrecondition;
    case EAGAIN: case EBUSY: case EINTR: case ECONNREFUSED: case ECONNRESET:
    case ECONNABORTED: case EPIPE: case ENETDOWN: case ENETUNREACH: case EHOSTUNREACH:
    case ENOTCONN: case EADDRINUSE: case EIO:
      return StatusCode::kUnavailable;
    case ETIMEDOUT: return StatusCode::kDeadlineExceeded;
    case ENOSPC: case ENOMEM: case EMFILE: case ENFILE: case EDQUOT: case ENOBUFS:
      return StatusCode::kResourceExhausted;
    case ERANGE: case EOVERFLOW: case EFBIG: return StatusCode::kOutOfRange;
    case ENOSYS: case EOPNOTSUPP: case EAFNOSUPPORT: case EPROTONOSUPPORT:
      return StatusCode::kUnimplemented;
    case ECANCELED: return StatusCode::kCancelled;
    default: return StatusCode::kInternal;
  }
}

}  // namespace

Status ErrnoToStatus(int errno_value, std::string_view context) {
  // strerrordesc_np/strerrorname_np (glibc >= 2.32) return static strings:
  // thread-safe, unlike strerror().
  const char* description = ::strerrordesc_np(errno_value);
  const char* name = ::strerrorname_np(errno_value);
  std::string message(context);
  if (!message.empty()) message.append(": ");
  if (description != nullptr) {
    message.append(description);
  } else {
    message.append("errno ").append(std::to_string(errno_value));
  }
  if (name != nullptr) message.append(" (").append(name).append(")");
  return Status(ErrnoToCode(errno_value), std::move(message));
}

namespace internal {
void StatusOrDie(const char* what, const Status& status) {
  std::fprintf(stderr, "fatal: %s: %s\n", what, status.ToString().c_str());
  std::abort();
}
}  // namespace internal

}  // namespace nvdra::common
