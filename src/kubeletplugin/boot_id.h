#pragma once

// The kernel's boot ID, which changes on every boot: a checkpoint that
// recorded another one describes devices prepared before a reboot.
// Defines: kBootIdPath, ReadBootId. Thread-safety: thread-safe.

#include <filesystem>
#include <string>

#include "common/status.h"

namespace nvdra::kubeletplugin {

inline constexpr const char* kBootIdPath = "/proc/sys/kernel/random/boot_id";

// The contents of `path` (a test seam; normally kBootIdPath) with surrounding
// whitespace trimmed. Errors: the errno mapping of reading the file (kNotFound
// when it is missing); kFailedPrecondition when it holds only whitespace.
common::StatusOr<std::string> ReadBootId(const std::filesystem::path& path = kBootIdPath);

}  // namespace nvdra::kubeletplugin
