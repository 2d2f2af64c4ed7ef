#pragma once

// Named crash points for crash-safety tests: CrashPoint("x") ends the process
// at once (_exit, no destructors, no flushing of anything but the log line),
// as a SIGKILL or power loss would, when the environment variable
// NVDRA_TEST_CRASH_AT equals "x". Without the variable it costs one
// comparison against a string read once at first use.
//
// Thread-safety: thread-safe.

#include <string_view>

namespace nvdra::common {

// The exit status of a process ended by a crash point.
inline constexpr int kCrashPointExitCode = 86;

void CrashPoint(std::string_view name);

}  // namespace nvdra::common
