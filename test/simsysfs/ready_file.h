#pragma once

// simsysfs's ready file: <driver root>/mock-nvml/simsysfs.ready. simsysfs
// writes it (by rename, so it never reads half written) once every inotify
// watch is in place, holding its pid and a newline, and removes it when it
// stops on SIGTERM/SIGINT. A starter removes a stale one, starts simsysfs and
// awaits the file with AwaitReady (or its own inotify watch on mock-nvml/).
//
// Stateless functions. Thread-safe.

#include <sys/types.h>

#include <chrono>
#include <filesystem>

#include "common/status.h"

namespace nvdra::simsysfs {

std::filesystem::path ReadyFile(const std::filesystem::path& driver_root);

// Writes "<pid>\n" to the ready file through a temporary file and a rename.
common::Status WriteReadyFile(const std::filesystem::path& driver_root, pid_t pid);
// Removes the ready file if it names `pid` (not another instance's).
void RemoveReadyFile(const std::filesystem::path& driver_root, pid_t pid);

// Waits, on an inotify watch of mock-nvml/, until the ready file names
// `pid`. kAborted when `pidfd` (-1: none) turns readable first, i.e. the
// process ended; kDeadlineExceeded after `timeout`; kNotFound when
// mock-nvml/ is missing.
common::Status AwaitReady(const std::filesystem::path& driver_root, pid_t pid, int pidfd,
                          std::chrono::milliseconds timeout);

}  // namespace nvdra::simsysfs
