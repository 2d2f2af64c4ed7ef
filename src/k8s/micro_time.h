#pragma once

// Kubernetes MicroTime: the wire form of metav1.MicroTime (Lease acquireTime
// and renewTime, Event eventTime and series.lastObservedTime), RFC 3339 in
// UTC with exactly six fractional digits: "2026-01-02T03:04:05.123456Z".
//
// Defines: WallClock, SystemWallClock, FormatMicroTime.
//
// Why a separate wall clock: these fields are read by people and other
// controllers, so they carry real UTC time, while timeouts are measured on a
// monotonic workqueue::Clock. Tests inject both.
//
// Ownership: values. Thread-safety: the functions are re-entrant.

#include <chrono>
#include <functional>
#include <string>

namespace nvdra::k8s {

using WallClock = std::function<std::chrono::system_clock::time_point()>;

// std::chrono::system_clock::now.
WallClock SystemWallClock();

// `t` truncated to microseconds, as "YYYY-MM-DDTHH:MM:SS.ffffffZ".
std::string FormatMicroTime(std::chrono::system_clock::time_point t);

}  // namespace nvdra::k8s
