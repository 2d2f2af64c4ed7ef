#pragma once

// FileLock: an exclusive flock(2) on a file, held for the object's lifetime.
// The plugins take <plugins>/<driver>/pu.lock around each prepare/unprepare and
// cp.lock around each checkpoint read-modify-write, because more than one
// plugin instance may run on a node (an upgrade overlaps old and new pods) and
// those files are the only thing they share. flock locks belong to the open
// file description, so two FileLocks on one path exclude each other inside one
// process too, and the kernel releases the lock when the holder dies. A child
// forked while a FileLock is held shares it until the child execs (the
// descriptor is O_CLOEXEC) or exits.
//
// Ownership: owns the descriptor that holds the lock; releasing closes it.
// Movable, not copyable. Thread-safety: thread-compatible.

#include <chrono>
#include <filesystem>
#include <stop_token>

#include "common/status.h"
#include "common/unique_fd.h"

namespace nvdra::kubeletplugin {

inline constexpr const char* kPrepareLockFileName = "pu.lock";
inline constexpr const char* kCheckpointLockFileName = "cp.lock";
// Upstream's timeout for both locks.
inline constexpr std::chrono::seconds kDefaultLockTimeout{10};

class FileLock {
 public:
  // Opens `path` (creating it, mode 0644) and takes an exclusive lock.
  // A blocking flock() could only be interrupted by a signal, so, as upstream
  // does, this tries LOCK_NB and waits between tries; unlike upstream it starts
  // with short waits (1 ms, doubling up to 50 ms), so a lock released quickly
  // is taken quickly, and the waits end early when `stop` is requested.
  // A `timeout` of zero or less means a single try.
  // Errors: kDeadlineExceeded naming the file when `timeout` passes;
  // kCancelled when `stop` is requested; errno mappings for open/flock.
  static common::StatusOr<FileLock> Acquire(const std::filesystem::path& path,
                                            std::chrono::milliseconds timeout,
                                            std::stop_token stop = {});

  FileLock(FileLock&&) noexcept = default;
  FileLock& operator=(FileLock&&) noexcept = default;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock() = default;  // closing the descriptor releases the lock

  // Releases the lock now; later calls do nothing.
  void Release() { fd_.Reset(); }
  [[nodiscard]] bool held() const { return fd_.valid(); }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  FileLock(std::filesystem::path path, common::UniqueFd fd)
      : path_(std::move(path)), fd_(std::move(fd)) {}

  std::filesystem::path path_;
  common::UniqueFd fd_;
};

}  // namespace nvdra::kubeletplugin
