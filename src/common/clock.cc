#include "common/clock.h"

namespace nvdra::common {
namespace {

class SystemClock final : public Clock {
 public:
  std::chrono::system_clock::time_point WallNow() const override { return std::chrono::system_clock::now(); }
  std::chrono::steady_clock::time_point Now() const override { return std::chrono::steady_clock::now(); }
};

}  // namespace

const Clock& RealClock() {
  static const SystemClock clock;
  return clock;
}

}  // namespace nvdra::common
