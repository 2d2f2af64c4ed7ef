#pragma once

// The create-symlinks hook: symlinks created inside a container's root, each
// given as "<target>::<link>" (nvidia-container-toolkit's --link syntax). The
// link's folders are resolved inside the root (in_root.h), so a link path
// through "..", or through a symlink the image ships, never lands on the host.
//
// Defines: SymlinkSpec, ParseSymlinkSpec, LinkOutcome, CreateSymlinkInRoot,
// CreateSymlinks.
//
// Ownership: values; the root descriptor is borrowed. Thread-safety:
// thread-safe (no shared state).

#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace nvdra::cdihook {

struct SymlinkSpec {
  std::string target;  // written into the link as is (may be relative)
  std::string link;    // path of the link, in the container

  friend bool operator==(const SymlinkSpec&, const SymlinkSpec&) = default;
};

// Splits "<target>::<link>". kInvalidArgument unless there is exactly one
// "::" with a non-empty side on each.
[[nodiscard]] common::StatusOr<SymlinkSpec> ParseSymlinkSpec(std::string_view spec);

enum class LinkOutcome {
  kCreated,         // nothing was at the link path
  kAlreadyPresent,  // a symlink to the same target was there: left alone
  kReplaced,        // another file, empty folder or symlink was removed first
};

// Makes `spec.link` (inside the root `root_fd`) a symlink to `spec.target`,
// creating missing parent folders. A symlink at the link path itself is
// replaced, never followed. kInvalidArgument for a link path naming no file;
// kFailedPrecondition when a non-empty folder is in the way or a parent is a
// file; errno mappings otherwise.
[[nodiscard]] common::StatusOr<LinkOutcome> CreateSymlinkInRoot(int root_fd,
                                                                const SymlinkSpec& spec);

// Parses every spec first (a bad one changes nothing), then creates the
// links in order inside `root`, skipping repeated specs. Logs each link made
// at verbosity 2 and each left alone at 4. Stops at the first error, whose
// message names the spec.
[[nodiscard]] common::Status CreateSymlinks(const std::filesystem::path& root,
                                            std::span<const std::string> specs);

}  // namespace nvdra::cdihook
