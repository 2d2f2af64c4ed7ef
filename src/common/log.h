#pragma once

// Structured logging: a short constant message plus key-value pairs, written
// through spdlog as klog-like text or as JSON (one object per line).
//
//   LOG_INFO(2, "claim prepared", {{"claim", claim}, {"node", node}});
//   LOG_WARNING("checkpoint upgraded", {{"from", 1}, {"to", 2}});
//   LOG_ERROR("prepare failed", {{"claim", claim}, {"err", status}});
//
// Verbosity follows Kubernetes' -v (default 2). What each level is for:
//   0  always: start-up, shutdown, errors and warnings
//   1  configuration (flags, feature gates, the effective settings)
//   2  steady-state changes (the default): a claim prepared, a slice published
//   3  more about changes: the steps inside one change
//   4  debug
//   5  (unused; reserved between debug and API tracing)
//   6  each API request
//   7  request and response headers
//   8  request and response bodies
// Errors and warnings are always logged. An error is logged once, where it is
// handled, not at every layer it passes through.
//
// The LOG_* macros test the verbosity first, so a disabled line costs one
// relaxed atomic load and evaluates none of its arguments.
//
// Ownership: the process-wide logger, replaced by InitLogging. Strings passed in
// fields are only borrowed for the duration of the call.
// Thread-safety: thread-safe (logging, SetVerbosity and InitLogging may race;
// a line is never torn).

#include <concepts>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <iosfwd>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <source_location>
#include <variant>

#include "common/status.h"

namespace nvdra::common {

enum class LogFormat { kText, kJson };
enum class LogSeverity { kInfo, kWarning, kError };

// "text" or "json". kInvalidArgument otherwise, naming the accepted values.
StatusOr<LogFormat> ParseLogFormat(std::string_view text);

// -v takes any level from kMinVerbosity up, as klog; kMaxVerbosity is the
// highest level this driver logs at (a higher -v logs the same).
inline constexpr int kMinVerbosity = 0;
inline constexpr int kMaxVerbosity = 8;
inline constexpr int kDefaultVerbosity = 2;

struct LogOptions {
  int verbosity = kDefaultVerbosity;
  LogFormat format = LogFormat::kText;
};

// Replaces the process logger. Lines go to stderr, or to `out` when given
// (tests); `out` must outlive every later log call or the next InitLogging.
// A verbosity below kMinVerbosity counts as kMinVerbosity. Before any call,
// logging is text at the default verbosity on stderr.
void InitLogging(const LogOptions& options, std::ostream* out = nullptr);

// Current verbosity, and whether a line at `verbosity` would be written from
// the caller's file (the process level, or that file's --vmodule level).
int Verbosity();
void SetVerbosity(int verbosity);
bool VerbosityEnabled(int verbosity, std::source_location where = std::source_location::current());

// klog's --vmodule: "pattern=N,..." where a pattern is a glob over a source
// file's name without its extension ("claim_preparer=6", "cd_*=4"), or over
// its path when the pattern holds a '/'. The first pattern that matches
// sets that file's level instead of -v. Empty clears it. kInvalidArgument
// names the malformed entry. Call before starting threads.
Status SetVmodule(std::string_view spec);

// One value of a key-value pair. Strings are borrowed, not copied: build
// fields inside the log call (the LOG_* macros do), never store them.
class LogValue {
 public:
  LogValue(std::string_view value) : value_(value) {}  // NOLINT: implicit by design
  LogValue(const char* value) : value_(std::string_view(value != nullptr ? value : "")) {}  // NOLINT
  LogValue(const std::string& value) : value_(std::string_view(value)) {}  // NOLINT
  LogValue(bool value) : value_(value) {}  // NOLINT
  template <std::integral I>
    requires(!std::same_as<I, bool>)
  LogValue(I value) {  // NOLINT
    if constexpr (std::is_signed_v<I>) {
      value_ = static_cast<std::int64_t>(value);
    } else {
      value_ = static_cast<std::uint64_t>(value);
    }
  }
  template <std::floating_point F>
  LogValue(F value) : value_(static_cast<double>(value)) {}  // NOLINT
  // Errors and paths are rendered to text at construction.
  LogValue(const Status& status) : value_(status.ToString()) {}  // NOLINT
  LogValue(const std::filesystem::path& path) : value_(path.string()) {}  // NOLINT

  using Variant =
      std::variant<std::string_view, std::string, bool, std::int64_t, std::uint64_t, double>;
  const Variant& get() const { return value_; }

 private:
  Variant value_;
};

struct LogField {
  std::string_view key;
  LogValue value;
};

// Writes one line. Prefer the LOG_* macros, which skip disabled lines cheaply.
// `verbosity` matters only for kInfo; warnings and errors are always written.
void LogLine(LogSeverity severity, int verbosity, std::string_view message,
             std::span<const LogField> fields,
             std::source_location location = std::source_location::current());
inline void LogLine(LogSeverity severity, int verbosity, std::string_view message,
                    std::initializer_list<LogField> fields = {},
                    std::source_location location = std::source_location::current()) {
  LogLine(severity, verbosity, message, std::span<const LogField>(fields.begin(), fields.size()),
          location);
}

// Flushes buffered lines (the stderr sink writes through; this is for exits).
void FlushLogs();

}  // namespace nvdra::common

// LOG_INFO(verbosity, "message", {{"key", value}, ...}); fields are optional.
#define LOG_INFO(verbosity, message, ...)                                              \
  do {                                                                                  \
    if (::nvdra::common::VerbosityEnabled(verbosity)) {                                 \
      ::nvdra::common::LogLine(::nvdra::common::LogSeverity::kInfo, (verbosity), (message) \
                                   __VA_OPT__(, ) __VA_ARGS__);                          \
    }                                                                                   \
  } while (false)
#define LOG_WARNING(message, ...)                                                      \
  ::nvdra::common::LogLine(::nvdra::common::LogSeverity::kWarning, 0, (message)          \
                               __VA_OPT__(, ) __VA_ARGS__)
#define LOG_ERROR(message, ...)                                                        \
  ::nvdra::common::LogLine(::nvdra::common::LogSeverity::kError, 0, (message)            \
                               __VA_OPT__(, ) __VA_ARGS__)
