#include "k8s/micro_time.h"

#include <cstdio>

namespace nvdra::k8s {

WallClock SystemWallClock() {
  return [] { return std::chrono::system_clock::now(); };
}

std::string FormatMicroTime(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  // floor, not duration_cast: times before 1970 must not round toward zero.
  const auto days = floor<std::chrono::days>(t);
  const year_month_day ymd{days};
  const long long micros = floor<microseconds>(t - days).count();
  const long long secs_of_day = micros / 1'000'000;
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%04d-%02u-%02uT%02lld:%02lld:%02lld.%06lldZ", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()), secs_of_day / 3600,
                (secs_of_day / 60) % 60, secs_of_day % 60, micros % 1'000'000);
  return buf;
}

}  // namespace nvdra::k8s
