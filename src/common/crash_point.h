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
// Unit tests reach the same points without ending the test process:
// TEST_SetCrashPointHook installs a function that every CrashPoint call runs
// first (it may throw to abandon the operation as a crash would).
//
// Thread-safety: thread-safe; the hook is set before the code under test runs.

#include <string_view>

namespace nvdra::common {

// The exit status of a process ended by a crash point.
inline constexpr int kCrashPointExitCode = 86;

void CrashPoint(std::string_view name);

// Test seam: `hook` runs on every CrashPoint call (nullptr removes it).
using CrashPointHook = void (*)(std::string_view name);
void TEST_SetCrashPointHook(CrashPointHook hook);

}  // namespace nvdra::common
