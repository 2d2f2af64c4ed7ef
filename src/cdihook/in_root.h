#pragma once

// Path resolution confined to a container's root folder, as the container
// itself will see its files: ".." stops at the root and an absolute symlink
// restarts at the root, so nothing inside the container can point the hook at
// a host file. The walk opens one component at a time with O_NOFOLLOW on
// descriptors, so a symlink swapped in between two steps is still confined.
//
// Defines: OpenRoot, InRootEntry, ResolveParentInRoot, OpenInRoot.
//
// Ownership: results own their descriptors. Thread-safety: thread-safe (no
// shared state; concurrent changes to the tree are the caller's concern).

#include <filesystem>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/unique_fd.h"

namespace nvdra::cdihook {

// Opens `root` (a host path) as a directory. kNotFound, or
// kFailedPrecondition when it is not a directory.
[[nodiscard]] common::StatusOr<common::UniqueFd> OpenRoot(const std::filesystem::path& root);

// The folder holding a path's last component, and that component (not
// followed, so the caller may replace a symlink itself).
struct InRootEntry {
  common::UniqueFd dir;  // O_PATH descriptor of the folder
  std::string name;      // last component: never empty, ".", or ".."
};

// Resolves every component of `path` but the last inside the root
// `root_fd`, following symlinks; an absolute or relative `path` both start at
// the root. With `create_parents`, missing folders are created (mode 0755).
// kInvalidArgument when `path` has no last name (empty, "/", ending in "." or
// ".."), or after 40 symlinks (a loop); kNotFound for a missing folder without
// `create_parents`; kFailedPrecondition when a component is not a folder.
[[nodiscard]] common::StatusOr<InRootEntry> ResolveParentInRoot(int root_fd, std::string_view path,
                                                                bool create_parents);

// Opens `path` inside the root, following every symlink (the last one too),
// with `flags` (O_RDONLY, O_DIRECTORY, ...; O_CLOEXEC is added). The same
// errors as ResolveParentInRoot; "/" opens the root itself.
[[nodiscard]] common::StatusOr<common::UniqueFd> OpenInRoot(int root_fd, std::string_view path,
                                                            int flags);

}  // namespace nvdra::cdihook
