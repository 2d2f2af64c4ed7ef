#include "cdihook/in_root.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace nvdra::cdihook {
namespace {

using common::StatusOr;
using common::UniqueFd;

// Linux's own limit on symlinks followed in one lookup (MAXSYMLINKS).
constexpr int kMaxSymlinks = 40;

std::deque<std::string> SplitPath(std::string_view path) {
  std::deque<std::string> parts;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (end > start) parts.emplace_back(path.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

StatusOr<UniqueFd> Dup(int fd) {
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return common::ErrnoToStatus(errno, "dup");
  return UniqueFd(copy);
}

StatusOr<std::string> ReadLinkFd(int fd, std::string_view what) {
  std::string target(256, '\0');
  for (;;) {
    // An empty path reads the link the O_PATH descriptor itself refers to.
    const ssize_t n = ::readlinkat(fd, "", target.data(), target.size());
    if (n < 0) return common::ErrnoToStatus(errno, fmt::format("readlink {}", what));
    if (static_cast<std::size_t>(n) < target.size()) {
      target.resize(static_cast<std::size_t>(n));
      return target;
    }
    target.resize(target.size() * 2);
  }
}

// Walks `todo` from the root, following symlinks. Every component must be a
// folder, except that the last may be another kind of file when
// `allow_file_last`. Returns the descriptor of what the walk ended on
// (O_PATH).
StatusOr<UniqueFd> Walk(int root_fd, std::deque<std::string> todo, bool create,
                        bool allow_file_last, std::string_view path) {
  // Folders below the root, innermost last; ".." pops one.
  std::vector<UniqueFd> stack;
  const auto current = [&] { return stack.empty() ? root_fd : stack.back().get(); };
  int symlinks = 0;
  while (!todo.empty()) {
    std::string name = std::move(todo.front());
    todo.pop_front();
    if (name == ".") continue;
    if (name == "..") {
      if (!stack.empty()) stack.pop_back();
      continue;
    }
    int fd = ::openat(current(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create) {
      if (::mkdirat(current(), name.c_str(), 0755) != 0 && errno != EEXIST) {
        return common::ErrnoToStatus(errno, fmt::format("{}: mkdir {}", path, name));
      }
      fd = ::openat(current(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) return common::ErrnoToStatus(errno, fmt::format("{}: open {}", path, name));
    UniqueFd entry(fd);
    struct stat st {};
    if (::fstat(entry.get(), &st) != 0) {
      return common::ErrnoToStatus(errno, fmt::format("{}: stat {}", path, name));
    }
    if (S_ISLNK(st.st_mode)) {
      if (++symlinks > kMaxSymlinks) {
        return common::InvalidArgumentError(
            fmt::format("{}: too many levels of symbolic links", path));
      }
      ASSIGN_OR_RETURN(std::string target, ReadLinkFd(entry.get(), name));
      // An absolute target is absolute in the container: start again at its root.
      if (!target.empty() && target.front() == '/') stack.clear();
      std::deque<std::string> parts = SplitPath(target);
      todo.insert(todo.begin(), parts.begin(), parts.end());
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      stack.push_back(std::move(entry));
      continue;
    }
    if (todo.empty() && allow_file_last) return entry;
    return common::FailedPreconditionError(fmt::format("{}: {} is not a directory", path, name));
  }
  if (stack.empty()) return Dup(root_fd);
  return std::move(stack.back());
}

}  // namespace

StatusOr<UniqueFd> OpenRoot(const std::filesystem::path& root) {
  const int fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return common::ErrnoToStatus(errno, fmt::format("open container root {}", root.string()));
  return UniqueFd(fd);
}

StatusOr<InRootEntry> ResolveParentInRoot(int root_fd, std::string_view path, bool create_parents) {
  std::deque<std::string> parts = SplitPath(path);
  if (parts.empty() || parts.back() == "." || parts.back() == "..") {
    return common::InvalidArgumentError(fmt::format("path \"{}\" names no file", path));
  }
  InRootEntry result;
  result.name = std::move(parts.back());
  parts.pop_back();
  ASSIGN_OR_RETURN(result.dir, Walk(root_fd, std::move(parts), create_parents,
                                    /*allow_file_last=*/false, path));
  return result;
}

StatusOr<UniqueFd> OpenInRoot(int root_fd, std::string_view path, int flags) {
  ASSIGN_OR_RETURN(UniqueFd located,
                   Walk(root_fd, SplitPath(path), /*create=*/false, /*allow_file_last=*/true, path));
  // Reopen the O_PATH descriptor for real I/O. Through /proc/self/fd the
  // kernel reopens the very inode the walk found; no name is looked up again.
  const std::string proc = fmt::format("/proc/self/fd/{}", located.get());
  const int fd = ::open(proc.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return common::ErrnoToStatus(errno, fmt::format("open {}", path));
  return UniqueFd(fd);
}

}  // namespace nvdra::cdihook
