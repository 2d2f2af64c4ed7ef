#pragma once

// Time sources for engines that decide by the time (deadlines, ages), so a
// unit test can hand them a clock it moves itself.
//
// Defines: Clock, RealClock.
//
// Ownership: RealClock() lives for the whole process. Thread-safety:
// implementations must be thread-safe; RealClock's is.

#include <chrono>

namespace nvdra::common {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall time: what is written into files and compared with their times.
  virtual std::chrono::system_clock::time_point WallNow() const = 0;
  // Monotonic time: deadlines and durations.
  virtual std::chrono::steady_clock::time_point Now() const = 0;
};

// The system's clocks.
const Clock& RealClock();

}  // namespace nvdra::common
