#pragma once

// Helpers for simsysfs's tests: a mock driver root in a temp folder laid out
// by make-driver-root, file helpers, and Await (an inotify wait for a
// condition on the tree, with a deadline; Watch keeps one watch for many).
//
// Ownership: TestRoot owns its folder, Watch its inotify descriptor.
// Thread-compatible.

#include <poll.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/unique_fd.h"

namespace nvdra::simsysfs::testing {

namespace fs = std::filesystem;

inline std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// As a program writes a sysfs file: open with O_TRUNC, write, close.
inline void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

inline std::string LinkName(const fs::path& link) {
  std::error_code ec;
  return fs::read_symlink(link, ec).filename().string();
}

enum class Layout {
  kDriverRoot,  // make-driver-root: the whole mock driver root (about 2 s)
  kSysfsOnly,   // make-sysfs.py alone: sys/ and dev/{vfio,iommu} (a tenth of that)
};

// A mock driver root of `profile` (a file in the shipped profiles folder, or
// a path); `vfio_bound` is NVDRA_MOCK_VFIO_BOUND.
class TestRoot {
 public:
  explicit TestRoot(const std::string& profile = "h100-sxm.json", const std::string& vfio_bound = "",
                    Layout layout = Layout::kDriverRoot) {
    std::string pattern = (fs::temp_directory_path() / "simsysfs-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    dir_ = pattern;
    root_ = dir_ / "root";
    const fs::path profile_path =
        profile.find('/') == std::string::npos ? fs::path(NVDRA_MOCKNVML_PROFILES_DIR) / profile : fs::path(profile);
    const fs::path make_sysfs = fs::path(NVDRA_MOCKNVML_MAKE_DRIVER_ROOT).parent_path() / "make-sysfs.py";
    const std::string command =
        "NVDRA_MOCK_VFIO_BOUND='" + vfio_bound + "' " +
        (layout == Layout::kDriverRoot
             ? std::string(NVDRA_MOCKNVML_MAKE_DRIVER_ROOT " '") + root_.string() + "' '" + profile_path.string() +
                   "' '" NVDRA_MOCKNVML_PATH "'"
             : "python3 '" + make_sysfs.string() + "' '" + root_.string() + "' '" + profile_path.string() + "'");
    ok_ = std::system(command.c_str()) == 0;
    if (!ok_) ADD_FAILURE() << "failed: " << command;
  }
  ~TestRoot() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  TestRoot(const TestRoot&) = delete;
  TestRoot& operator=(const TestRoot&) = delete;

  bool ok() const { return ok_; }
  const fs::path& dir() const { return dir_; }  // holds root/ and room for more
  const fs::path& root() const { return root_; }
  fs::path Device(const std::string& bus_id) const { return root_ / "sys/bus/pci/devices" / bus_id; }
  fs::path Driver(const std::string& driver) const { return root_ / "sys/bus/pci/drivers" / driver; }
  fs::path Vfio() const { return root_ / "dev/vfio"; }

 private:
  fs::path dir_;
  fs::path root_;
  bool ok_ = false;
};

// An inotify watch on `dirs` (creations, removals, renames, closes after
// writing) for Await to wait on. One kept across many waits saves the few
// milliseconds the kernel takes to close an inotify descriptor, which add up
// in a loop.
class Watch {
 public:
  explicit Watch(const std::vector<fs::path>& dirs) : inotify_(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK)) {
    if (!inotify_) return;
    for (const fs::path& dir : dirs) {
      ::inotify_add_watch(inotify_.get(), dir.c_str(),
                          IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_CLOSE_WRITE | IN_DELETE_SELF);
    }
  }

  // Waits until `done()` holds, re-checking on every event of the watch
  // (and, when `fd` >= 0, whenever `fd` turns readable, after
  // `on_readable` ran), up to `timeout`. Returns done().
  bool Await(const std::function<bool()>& done, std::chrono::milliseconds timeout = std::chrono::seconds(10),
             int fd = -1, const std::function<void()>& on_readable = {}) {
    if (!inotify_) return done();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      std::array<pollfd, 2> fds{{{inotify_.get(), POLLIN, 0}, {fd, POLLIN, 0}}};
      if (::poll(fds.data(), fd >= 0 ? 2 : 1, static_cast<int>(left.count())) < 0 && errno != EINTR) return done();
      std::array<char, 4096> drain{};
      while (::read(inotify_.get(), drain.data(), drain.size()) > 0) {
      }
      if (fd >= 0 && (fds[1].revents & (POLLIN | POLLHUP)) != 0) {
        if (on_readable) on_readable();
        if ((fds[1].revents & POLLIN) == 0) fd = -1;  // hung up: nothing more will come
      }
    }
    return true;
  }

 private:
  common::UniqueFd inotify_;
};

// Watch(dirs).Await(...), for a single wait.
inline bool Await(const std::vector<fs::path>& dirs, const std::function<bool()>& done,
                  std::chrono::milliseconds timeout = std::chrono::seconds(10), int fd = -1,
                  const std::function<void()>& on_readable = {}) {
  return Watch(dirs).Await(done, timeout, fd, on_readable);
}

}  // namespace nvdra::simsysfs::testing
