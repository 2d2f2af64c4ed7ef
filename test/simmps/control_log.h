#pragma once

// ControlLog: the control daemon's control.log, in the real daemon's line
// format. Test infrastructure, not product.
//
//   [YYYY-MM-DD HH:MM:SS.mmm Control %5d] <message>
//
// (local time, milliseconds, the daemon's pid right-aligned in five columns,
// as real logs show "Control    72"). The file is opened for appending and
// every line goes out in one write(2): readers such as `tail -f` see whole
// lines at once, and nothing waits in a buffer if the daemon is killed.
//
// Owns: the file descriptor. Thread-compatible.

#include <sys/types.h>

#include <filesystem>
#include <string_view>

#include "common/status.h"
#include "common/unique_fd.h"

namespace nvdra::simmps {

class ControlLog {
 public:
  // Opens (creating it if needed) `path` for appending; lines carry `pid`.
  static common::StatusOr<ControlLog> Open(const std::filesystem::path& path, pid_t pid);

  // Appends one line. A failed write is dropped: losing a log line must not
  // stop the daemon from answering.
  void Write(std::string_view message) const;

 private:
  ControlLog(common::UniqueFd fd, pid_t pid) : fd_(std::move(fd)), pid_(pid) {}

  common::UniqueFd fd_;
  pid_t pid_;
};

}  // namespace nvdra::simmps
