#pragma once

// Whole-file reads and complete writes over POSIX descriptors, with errors as
// errno-mapped statuses that name what was being read or written.
//
// Defines: ReadWholeFile, WriteAll, ReplaceFile.
//
// Ownership: values; descriptors are borrowed. Thread-safety: thread-safe.

#include <filesystem>
#include <string>
#include <string_view>

#include "common/status.h"

namespace nvdra::common {

// The whole file, read to its end (so procfs files, which report size 0,
// work too). kNotFound when absent; other errors errno-mapped, naming `path`.
[[nodiscard]] StatusOr<std::string> ReadWholeFile(const std::filesystem::path& path);

// Writes all of `data` to `fd`, retrying short writes and EINTR. Errors are
// errno-mapped as "write <what>".
[[nodiscard]] Status WriteAll(int fd, std::string_view data, std::string_view what);

// Replaces `path` with `data` atomically: a temporary file beside it (created
// with `mode`), written, fsynced when `durable`, renamed over it; readers see
// the old file or the new one, never a mix. The folder is created when
// missing. On error the temporary file is removed and `path` is untouched.
[[nodiscard]] Status ReplaceFile(const std::filesystem::path& path, std::string_view data, unsigned mode,
                                 bool durable);

}  // namespace nvdra::common
