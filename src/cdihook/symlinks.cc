#include "cdihook/symlinks.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "cdihook/in_root.h"
#include "common/log.h"
#include "common/unique_fd.h"

namespace nvdra::cdihook {

using common::Status;
using common::StatusOr;

namespace {

// The target of the symlink `name` in `dir`; nullopt when `name` is absent
// or not a symlink.
StatusOr<std::optional<std::string>> ReadLinkAt(int dir, const std::string& name) {
  std::string target(256, '\0');
  for (;;) {
    const ssize_t n = ::readlinkat(dir, name.c_str(), target.data(), target.size());
    if (n < 0) {
      if (errno == ENOENT || errno == EINVAL) return std::optional<std::string>();
      return common::ErrnoToStatus(errno, fmt::format("readlink {}", name));
    }
    if (static_cast<std::size_t>(n) < target.size()) {
      target.resize(static_cast<std::size_t>(n));
      return std::optional<std::string>(std::move(target));
    }
    target.resize(target.size() * 2);
  }
}

}  // namespace

StatusOr<SymlinkSpec> ParseSymlinkSpec(std::string_view spec) {
  const auto sep = spec.find("::");
  if (sep == std::string_view::npos || spec.find("::", sep + 2) != std::string_view::npos) {
    return common::InvalidArgumentError(
        fmt::format("invalid symlink specification \"{}\": want <target>::<link>", spec));
  }
  SymlinkSpec parsed{std::string(spec.substr(0, sep)), std::string(spec.substr(sep + 2))};
  if (parsed.target.empty() || parsed.link.empty()) {
    return common::InvalidArgumentError(
        fmt::format("invalid symlink specification \"{}\": empty target or link", spec));
  }
  return parsed;
}

StatusOr<LinkOutcome> CreateSymlinkInRoot(int root_fd, const SymlinkSpec& spec) {
  ASSIGN_OR_RETURN(InRootEntry entry, ResolveParentInRoot(root_fd, spec.link, /*create_parents=*/true));
  const int dir = entry.dir.get();
  ASSIGN_OR_RETURN(const std::optional<std::string> existing, ReadLinkAt(dir, entry.name));
  if (existing && *existing == spec.target) return LinkOutcome::kAlreadyPresent;

  LinkOutcome outcome = LinkOutcome::kCreated;
  if (::unlinkat(dir, entry.name.c_str(), 0) == 0) {
    outcome = LinkOutcome::kReplaced;
  } else if (errno == EISDIR) {
    // Only an empty folder goes (the toolkit's os.Remove does the same); a
    // folder with content in the way is the image's problem to fix.
    if (::unlinkat(dir, entry.name.c_str(), AT_REMOVEDIR) != 0) {
      return common::ErrnoToStatus(errno, fmt::format("remove folder {}", spec.link));
    }
    outcome = LinkOutcome::kReplaced;
  } else if (errno != ENOENT) {
    return common::ErrnoToStatus(errno, fmt::format("remove {}", spec.link));
  }
  if (::symlinkat(spec.target.c_str(), dir, entry.name.c_str()) != 0) {
    return common::ErrnoToStatus(errno, fmt::format("symlink {} -> {}", spec.link, spec.target));
  }
  return outcome;
}

Status CreateSymlinks(const std::filesystem::path& root, std::span<const std::string> specs) {
  std::vector<SymlinkSpec> parsed;
  std::set<std::string> seen;
  for (const std::string& spec : specs) {
    if (!seen.insert(spec).second) continue;
    ASSIGN_OR_RETURN(SymlinkSpec one, ParseSymlinkSpec(spec));
    parsed.push_back(std::move(one));
  }
  ASSIGN_OR_RETURN(const common::UniqueFd root_fd, OpenRoot(root));
  for (const SymlinkSpec& spec : parsed) {
    StatusOr<LinkOutcome> outcome = CreateSymlinkInRoot(root_fd.get(), spec);
    if (!outcome.ok()) {
      return outcome.status().WithContext(fmt::format("link {}::{}", spec.target, spec.link));
    }
    if (*outcome == LinkOutcome::kAlreadyPresent) {
      LOG_INFO(4, "symlink already present", {{"link", spec.link}, {"target", spec.target}});
    } else {
      LOG_INFO(2, "symlink created", {{"link", spec.link}, {"target", spec.target},
                                      {"replaced", *outcome == LinkOutcome::kReplaced}});
    }
  }
  return common::OkStatus();
}

}  // namespace nvdra::cdihook
