#include "common/crash_point.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace nvdra::common {

namespace {
std::atomic<CrashPointHook> test_hook{nullptr};
}  // namespace

void TEST_SetCrashPointHook(CrashPointHook hook) { test_hook.store(hook); }

void CrashPoint(std::string_view name) {
  if (CrashPointHook hook = test_hook.load(std::memory_order_relaxed); hook != nullptr) hook(name);
  static const std::string armed = [] {
    const char* value = std::getenv("NVDRA_TEST_CRASH_AT");
    return std::string(value != nullptr ? value : "");
  }();
  if (armed.empty() || armed != name) return;
  // NVDRA_TEST_CRASH_ONCE_FILE: crash only while this file is absent, and
  // create it first, so a restarted process with the same environment (a
  // container restarted by the kubelet) goes past the point.
  if (const char* once = std::getenv("NVDRA_TEST_CRASH_ONCE_FILE"); once != nullptr && *once != '\0') {
    const int fd = ::open(once, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return;  // crashed here before (or cannot record it: do not crash forever)
    ::fsync(fd);
    ::close(fd);
  }
  std::fprintf(stderr, "crash point %s reached: exiting with %d (NVDRA_TEST_CRASH_AT)\n", armed.c_str(),
               kCrashPointExitCode);
  std::fflush(stderr);
  _exit(kCrashPointExitCode);
}

}  // namespace nvdra::common
