#pragma once

// A bearer token read from a file that someone else rotates (the projected
// ServiceAccount token of in-cluster config, or a kubeconfig `tokenFile`).
//
// Rotation: the kubelet replaces the token long before it expires, so the file
// is read again when its modification time changes (checked on every call: one
// stat) and in any case at most a minute after the last read, like client-go.
// If a re-read fails, the last good token is kept (it is still valid for a
// while) and the error is logged; only a first read that fails is an error.
//
// Ownership: holds the path and the cached token; borrows `clock`, which must
// outlive it. Thread-safety: thread-safe.

#include <chrono>
#include <filesystem>
#include <string>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "k8s/workqueue/clock.h"

namespace nvdra::k8s {

class FileTokenSource {
 public:
  explicit FileTokenSource(std::filesystem::path path, const workqueue::Clock& clock = workqueue::RealClock(),
                           std::chrono::nanoseconds max_age = std::chrono::minutes(1));

  // The current token, whitespace trimmed. kNotFound / kPermissionDenied
  // naming the file when it was never readable; kFailedPrecondition when the
  // file is empty and no earlier token exists.
  common::StatusOr<std::string> Token() EXCLUDES(mutex_);

  const std::filesystem::path& path() const { return path_; }

 private:
  const std::filesystem::path path_;
  const workqueue::Clock& clock_;
  const std::chrono::nanoseconds max_age_;

  common::Mutex mutex_;  // guards the cache below
  std::string token_ GUARDED_BY(mutex_);
  std::filesystem::file_time_type mtime_ GUARDED_BY(mutex_){};
  workqueue::TimePoint read_at_ GUARDED_BY(mutex_){};
  bool have_token_ GUARDED_BY(mutex_) = false;
};

}  // namespace nvdra::k8s
