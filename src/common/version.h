#pragma once

// Build identity: the project version, the git commit and the build date,
// fixed at configure time by CMake.
// Ownership: static strings. Thread-safety: immutable.

#include <string>
#include <string_view>

namespace nvdra::common {

// "0.1.0": the project version from the top-level CMakeLists.txt.
std::string_view Version();
// Abbreviated commit hash of the source tree, or "unknown" outside git.
std::string_view GitCommit();
// UTC configure time, "2026-01-02T15:04:05Z" (honours SOURCE_DATE_EPOCH).
std::string_view BuildDate();

// What `<binary> --version` prints, e.g.
//   gpu-kubelet-plugin version 0.1.0
//   commit: 0123456789ab
//   build date: 2026-01-02T15:04:05Z
std::string VersionText(std::string_view binary_name);

}  // namespace nvdra::common
