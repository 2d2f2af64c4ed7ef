#pragma once

// UniqueFd: sole owner of one file descriptor; closes it when destroyed.
// Owns: the descriptor. Movable, not copyable. Thread-compatible.

#include <unistd.h>

#include <utility>

namespace nvdra::common {

class UniqueFd {
 public:
  UniqueFd() = default;
  // Takes ownership of `fd`; a negative value means "no descriptor".
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }

  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(other.Release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  [[nodiscard]] int get() const { return fd_; }
  [[nodiscard]] bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }

  // Closes the current descriptor (if any) and takes ownership of `fd`.
  // close() is not retried on EINTR: on Linux the descriptor is released
  // even when close() reports EINTR, and a retry could close a reused number.
  void Reset(int fd = -1) {
    if (fd_ >= 0 && fd_ != fd) ::close(fd_);
    fd_ = fd;
  }

  // Gives up ownership without closing; the caller now owns the descriptor.
  [[nodiscard]] int Release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

}  // namespace nvdra::common
