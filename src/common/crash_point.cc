#include "common/crash_point.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace nvdra::common {

void CrashPoint(std::string_view name) {
  static const std::string armed = [] {
    const char* value = std::getenv("NVDRA_TEST_CRASH_AT");
    return std::string(value != nullptr ? value : "");
  }();
  if (armed.empty() || armed != name) return;
  std::fprintf(stderr, "crash point %s reached: exiting with %d (NVDRA_TEST_CRASH_AT)\n", armed.c_str(),
               kCrashPointExitCode);
  std::fflush(stderr);
  _exit(kCrashPointExitCode);
}

}  // namespace nvdra::common
