#pragma once

// Named crash points for crash-safety tests: CrashPoint("x") ends the process
// at once (_exit, no destructors, no flushing of anything but the log line),
// as a SIGKILL or power loss would, when the environment variable
// NVDRA_TEST_CRASH_AT equals "x". Without the variable it costs one
// comparison against a string read once at first use. With
// NVDRA_TEST_CRASH_ONCE_FILE set as well, the point crashes only while that
// file does not exist and creates it before exiting (a container the kubelet
// restarts with the same environment then gets past the point).
//
// Thread-safety: thread-safe.

#include <string_view>

namespace nvdra::common {

// The exit status of a process ended by a crash point.
inline constexpr int kCrashPointExitCode = 86;

void CrashPoint(std::string_view name);

}  // namespace nvdra::common
