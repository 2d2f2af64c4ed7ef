#include "cdihook/ldcache.h"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <memory>
#include <random>

#include <fmt/format.h>

#include "cdihook/in_root.h"
#include "common/file_io.h"
#include "common/log.h"
#include "common/unique_fd.h"

namespace nvdra::cdihook {
namespace fs = std::filesystem;
using common::Status;
using common::StatusOr;
using common::UniqueFd;

namespace {

constexpr std::string_view kLdSoConf = "/etc/ld.so.conf";
constexpr std::string_view kLdSoCache = "/etc/ld.so.cache";
constexpr std::string_view kLdSoConfD = "/etc/ld.so.conf.d";
// Ubuntu's /sbin/ldconfig is a shell wrapper that may defer the update to a
// dpkg trigger; the binary beside it does the work (the toolkit does the same).
constexpr std::string_view kDefaultLdconfig = "/sbin/ldconfig";
constexpr std::string_view kRealLdconfig = "/sbin/ldconfig.real";

std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::vector<std::string> SystemFolders(bool debian_like) {
  if (!debian_like) return {"/lib64", "/usr/lib64"};
#if defined(__x86_64__)
  constexpr std::string_view kTriplet = "x86_64-linux-gnu";
#elif defined(__aarch64__)
  constexpr std::string_view kTriplet = "aarch64-linux-gnu";
#else
  constexpr std::string_view kTriplet = "";
#endif
  std::vector<std::string> folders;
  if (!kTriplet.empty()) {
    folders.push_back(fmt::format("/lib/{}", kTriplet));
    folders.push_back(fmt::format("/usr/lib/{}", kTriplet));
  }
  folders.emplace_back("/lib");
  folders.emplace_back("/usr/lib");
  return folders;
}

// The whole file at `path` inside the root; nullopt when it does not exist.
StatusOr<std::optional<std::string>> ReadFileInRoot(int root_fd, const std::string& path) {
  StatusOr<UniqueFd> fd = OpenInRoot(root_fd, path, O_RDONLY);
  if (!fd.ok()) {
    if (fd.status().code() == common::StatusCode::kNotFound) return std::optional<std::string>();
    return fd.status();
  }
  std::string content;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd->get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return common::ErrnoToStatus(errno, fmt::format("read {}", path));
    if (n == 0) break;
    content.append(buffer, static_cast<std::size_t>(n));
  }
  return std::optional<std::string>(std::move(content));
}

bool HasGlobChars(std::string_view text) {
  return text.find_first_of("*?[") != std::string_view::npos;
}

// The files an "include" pattern names, sorted as glob(3) sorts them. Only
// the last component may hold wildcards; other patterns match nothing
// (logged), which at worst lists a folder twice.
StatusOr<std::vector<std::string>> ExpandInclude(int root_fd, const std::string& pattern) {
  const fs::path p(pattern);
  const std::string dir = p.parent_path().string();
  const std::string base = p.filename().string();
  if (!HasGlobChars(base) && !HasGlobChars(dir)) return std::vector<std::string>{pattern};
  if (HasGlobChars(dir)) {
    LOG_INFO(4, "ld.so.conf include pattern not followed", {{"pattern", pattern}});
    return std::vector<std::string>{};
  }
  StatusOr<UniqueFd> dir_fd = OpenInRoot(root_fd, dir, O_RDONLY | O_DIRECTORY);
  if (!dir_fd.ok()) {
    if (dir_fd.status().code() == common::StatusCode::kNotFound) return std::vector<std::string>{};
    return dir_fd.status();
  }
  // fdopendir owns the descriptor from here on; closedir closes it.
  std::unique_ptr<DIR, int (*)(DIR*)> listing(::fdopendir(dir_fd->Release()), &::closedir);
  if (!listing) return common::ErrnoToStatus(errno, fmt::format("list {}", dir));
  std::vector<std::string> matches;
  while (const dirent* entry = ::readdir(listing.get())) {
    if (::fnmatch(base.c_str(), entry->d_name, FNM_PERIOD) == 0) {
      matches.push_back((fs::path(dir) / entry->d_name).string());
    }
  }
  std::sort(matches.begin(), matches.end());
  return matches;
}

std::string NewConfName(std::string_view prefix) {
  static thread_local std::mt19937 engine{std::random_device{}()};
  return fmt::format("{}{}.conf", prefix, engine());
}

// Runs `argv` (argv[0] is the program path) with an empty environment and
// waits for it. No deadline: ldconfig is short, and the runtime enforces the
// hook's own timeout by killing us.
Status Run(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  char* env[] = {nullptr};
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, argv.front().c_str(), nullptr, nullptr, args.data(), env);
  if (rc != 0) return common::ErrnoToStatus(rc, fmt::format("run {}", argv.front()));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return common::ErrnoToStatus(errno, fmt::format("wait {}", argv.front()));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return common::OkStatus();
  if (WIFEXITED(status)) {
    return common::InternalError(
        fmt::format("{} exited with status {}", argv.front(), WEXITSTATUS(status)));
  }
  return common::InternalError(
      fmt::format("{} killed by signal {}", argv.front(), WIFSIGNALED(status) ? WTERMSIG(status) : 0));
}

}  // namespace

bool IsDebianLike(const fs::path& root) {
  StatusOr<UniqueFd> root_fd = OpenRoot(root);
  if (!root_fd.ok()) return false;
  StatusOr<UniqueFd> fd = OpenInRoot(root_fd->get(), "/etc/debian_version", O_RDONLY);
  if (!fd.ok()) return false;
  struct stat st {};
  return ::fstat(fd->get(), &st) == 0 && S_ISREG(st.st_mode);
}

StatusOr<std::set<std::string>> ConfiguredLibraryFolders(int root_fd, bool debian_like) {
  std::set<std::string> folders;
  for (std::string& f : SystemFolders(debian_like)) folders.insert(std::move(f));

  std::set<std::string> visited;
  std::deque<std::string> files{std::string(kLdSoConf)};
  while (!files.empty()) {
    const std::string file = std::move(files.front());
    files.pop_front();
    if (!visited.insert(file).second) continue;
    ASSIGN_OR_RETURN(const std::optional<std::string> content, ReadFileInRoot(root_fd, file));
    if (!content) continue;
    std::size_t start = 0;
    while (start < content->size()) {
      std::size_t end = content->find('\n', start);
      if (end == std::string::npos) end = content->size();
      std::string line = content->substr(start, end - start);
      start = end + 1;
      if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
      const auto first = line.find_first_not_of(" \t\r");
      if (first == std::string::npos) continue;
      line = line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
      if (line.starts_with("include") && line.size() > 7 && (line[7] == ' ' || line[7] == '\t')) {
        std::string rest = line.substr(8);
        // Several patterns may follow one "include"; relative ones are
        // relative to the including file's folder (glibc's parse_conf_include).
        std::size_t pos = 0;
        while (pos < rest.size()) {
          const auto b = rest.find_first_not_of(" \t", pos);
          if (b == std::string::npos) break;
          auto e = rest.find_first_of(" \t", b);
          if (e == std::string::npos) e = rest.size();
          std::string pattern = rest.substr(b, e - b);
          pos = e;
          if (pattern.front() != '/') {
            pattern = (fs::path(file).parent_path() / pattern).string();
          }
          ASSIGN_OR_RETURN(std::vector<std::string> included, ExpandInclude(root_fd, pattern));
          files.insert(files.end(), included.begin(), included.end());
        }
        continue;
      }
      if (line.starts_with("hwcap ")) continue;  // obsolete; names no folder
      folders.insert(StripTrailingSlashes(std::move(line)));
    }
  }
  return folders;
}

StatusOr<std::optional<std::string>> WriteLdSoConfFile(int root_fd, std::span<const std::string> folders,
                                                      std::string_view prefix) {
  std::vector<std::string> unique;
  for (const std::string& f : folders) {
    if (std::find(unique.begin(), unique.end(), f) == unique.end()) unique.push_back(f);
  }
  if (unique.empty()) return std::optional<std::string>();
  std::string content;
  for (const std::string& f : unique) content.append(f).push_back('\n');

  // The entry named "x" is a stand-in: this resolves (and creates) the folder.
  ASSIGN_OR_RETURN(const InRootEntry dir,
                   ResolveParentInRoot(root_fd, fmt::format("{}/x", kLdSoConfD), true));
  constexpr int kAttempts = 100;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const std::string name = NewConfName(prefix);
    const int raw = ::openat(dir.dir.get(), name.c_str(),
                             O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (raw < 0 && errno == EEXIST) continue;
    const std::string container_path = fmt::format("{}/{}", kLdSoConfD, name);
    if (raw < 0) return common::ErrnoToStatus(errno, fmt::format("create {}", container_path));
    UniqueFd fd(raw);
    RETURN_IF_ERROR(common::WriteAll(fd.get(), content, container_path));
    // Not left to the umask: containers running as another user must read it.
    if (::fchmod(fd.get(), 0644) != 0) {
      return common::ErrnoToStatus(errno, fmt::format("chmod {}", container_path));
    }
    return std::optional<std::string>(container_path);
  }
  return common::AlreadyExistsError(
      fmt::format("{}: no free {}*.conf name after {} attempts", kLdSoConfD, prefix, kAttempts));
}

Status UpdateLdcache(const LdcacheOptions& options) {
  if (options.ldconfig_path.empty()) {
    return common::FailedPreconditionError("ldconfig path is empty (set --ldconfig-path)");
  }
  fs::path ldconfig = options.ldconfig_path;
  if (ldconfig == kDefaultLdconfig && ::access(std::string(kRealLdconfig).c_str(), X_OK) == 0) {
    ldconfig = kRealLdconfig;
  }
  struct stat st {};
  if (::stat(ldconfig.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      ::access(ldconfig.c_str(), X_OK) != 0) {
    return common::NotFoundError(fmt::format(
        "ldconfig {} not found or not executable (set --ldconfig-path)", ldconfig.string()));
  }

  ASSIGN_OR_RETURN(const UniqueFd root_fd, OpenRoot(options.container_root));
  const bool container_debian = IsDebianLike(options.container_root);
  ASSIGN_OR_RETURN(const std::set<std::string> configured,
                   ConfiguredLibraryFolders(root_fd.get(), container_debian));
  std::vector<std::string> missing;
  for (const std::string& folder : options.folders) {
    if (!configured.contains(StripTrailingSlashes(folder))) missing.push_back(folder);
  }
  ASSIGN_OR_RETURN(const std::optional<std::string> written,
                   WriteLdSoConfFile(root_fd.get(), missing));
  if (written) LOG_INFO(2, "ld.so.conf.d file written", {{"file", *written}});

  std::vector<std::string> argv = {ldconfig.string(), "-r", options.container_root.string(),
                                   "-f", std::string(kLdSoConf), "-C", std::string(kLdSoCache)};
  if (options.host_is_debian_like && !container_debian) {
    for (const std::string& f : SystemFolders(false)) {
      if (!configured.contains(f)) argv.push_back(f);
    }
  }
  RETURN_IF_ERROR(Run(argv));
  LOG_INFO(2, "ldcache updated", {{"root", options.container_root}});
  return common::OkStatus();
}

}  // namespace nvdra::cdihook
