// simsysfs <driver root>: plays the Linux kernel's PCI driver core for the
// mock sysfs of a mock driver root (test/mocknvml/make-sysfs.py), so that a
// program writing bind, unbind and driver_override files sees what a real
// kernel does (driver_core.h). See README.md.
//
// Event-driven: one inotify instance with IN_CLOSE_WRITE watches on every
// sys/bus/pci/drivers/*/{bind,unbind} and every device's driver_override,
// and a signalfd for SIGTERM/SIGINT (exit 0). Nothing already in the files
// at start is acted on. Once every watch is in place it writes
// mock-nvml/simsysfs.ready (ready_file.h). One line on stderr per action and
// per refusal. An flock on mock-nvml/simsysfs.lock keeps a second instance
// off the same root (it exits 1): two would each apply every write.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/unique_fd.h"
#include "driver_core.h"
#include "ready_file.h"

namespace {

namespace fs = std::filesystem;
using nvdra::common::UniqueFd;
using nvdra::simsysfs::DriverCore;

enum class FileKind { kBind, kUnbind, kOverride };

struct Watched {
  FileKind kind;
  std::string name;  // the driver (bind, unbind) or the bus id (driver_override)
  fs::path path;
};

template <typename... Args>
void Log(fmt::format_string<Args...> format, Args&&... args) {
  fmt::print(stderr, "simsysfs: {}\n", fmt::format(format, std::forward<Args>(args)...));
  std::fflush(stderr);
}

std::string ReadTrimmed(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return nvdra::simsysfs::Trim(text.str());
}

class Simulator {
 public:
  Simulator(fs::path root, UniqueFd inotify) : root_(std::move(root)), core_(root_), inotify_(std::move(inotify)) {}

  // Adds every watch; false (after saying why) when the tree lacks drivers.
  bool Watch() {
    const std::vector<std::string> drivers = core_.Drivers();
    if (drivers.empty()) {
      Log("no drivers in {}/sys/bus/pci/drivers: lay the root out with make-driver-root", root_.string());
      return false;
    }
    for (const std::string& driver : drivers) {
      if (!Add(FileKind::kBind, driver, core_.BindFile(driver)) ||
          !Add(FileKind::kUnbind, driver, core_.UnbindFile(driver))) {
        return false;
      }
    }
    for (const std::string& device : core_.Devices()) {
      if (!Add(FileKind::kOverride, device, core_.OverrideFile(device), IN_CLOSE_WRITE | IN_CLOSE_NOWRITE)) {
        return false;
      }
      overrides_[device] = core_.Override(device);
    }
    Log("serving {}: {} devices, drivers {}", root_.string(), overrides_.size(), fmt::join(drivers, ", "));
    return true;
  }

  // Handles what one read() of the inotify descriptor gives. False when
  // simsysfs must stop: a watched file went away (the tree was laid out
  // again under it) or events were lost.
  bool HandleEvents() {
    alignas(inotify_event) std::array<char, 16384> buffer{};
    const ssize_t n = ::read(inotify_.get(), buffer.data(), buffer.size());
    if (n <= 0) return n < 0 && (errno == EAGAIN || errno == EINTR);
    std::vector<inotify_event> events;
    for (ssize_t at = 0; at < n;) {
      const auto* event = reinterpret_cast<const inotify_event*>(buffer.data() + at);
      events.push_back(*event);
      at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
    }
    // A file holds only its last write, so the closes of one file in a
    // batch count once, acted on where the last one stands (keeping the
    // order between files: override, unbind, bind). Closes of our own
    // rewrites are not acted on (see self_closes_). A driver_override
    // closed before a bind or unbind of the batch but acted on after it
    // (closed again later, often by our own rewrite) is settled by that
    // bind or unbind first (see unsure_).
    std::map<int, std::size_t> last;
    std::map<int, int> closes;
    std::set<int> retry;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const inotify_event& event = events[i];
      if ((event.mask & IN_Q_OVERFLOW) != 0) {
        Log("inotify queue overflowed: writes were lost, stopping");
        return false;
      }
      auto it = watched_.find(event.wd);
      if (it == watched_.end()) continue;
      if ((event.mask & IN_IGNORED) != 0) {
        Log("{} went away (was the root laid out again?): stopping", it->second.path.string());
        return false;
      }
      if ((event.mask & IN_CLOSE_WRITE) != 0) {
        last[event.wd] = i;
        ++closes[event.wd];
      } else if ((event.mask & IN_CLOSE_NOWRITE) != 0 && deferred_.contains(event.wd)) {
        last[event.wd] = i;  // a reader let go: the deferred rewrite may go ahead
        retry.insert(event.wd);
      }
    }
    // Which files have a close that is not ours, counted against our
    // closes as they stood when the batch was read: a settle while handling
    // it adds one whose close comes in a later batch.
    std::set<int> act;
    for (const auto& [wd, count] : closes) {
      int& own = self_closes_[wd];
      const int skipped = std::min(own, count);
      own -= skipped;
      if (count > skipped) act.insert(wd);
    }
    for (std::size_t i = 0; i < events.size(); ++i) {
      const int wd = events[i].wd;
      auto it = last.find(wd);
      if (it == last.end()) continue;
      const Watched& file = watched_.at(wd);
      if (it->second != i) {
        if (file.kind == FileKind::kOverride && (events[i].mask & IN_CLOSE_WRITE) != 0) unsure_.insert(wd);
        continue;
      }
      if (act.contains(wd) || retry.contains(wd)) {
        Handle(wd, file);
      } else {
        unsure_.insert(wd);
      }
    }
    return true;
  }

  int fd() const { return inotify_.get(); }

 private:
  bool Add(FileKind kind, const std::string& name, const fs::path& path, std::uint32_t mask = IN_CLOSE_WRITE) {
    const int wd = ::inotify_add_watch(inotify_.get(), path.c_str(), mask);
    if (wd < 0) {
      Log("cannot watch {}: {}", path.string(), std::strerror(errno));
      return false;
    }
    watched_[wd] = Watched{kind, name, path};
    return true;
  }

  void Handle(int wd, const Watched& file) {
    switch (file.kind) {
      case FileKind::kBind:
      case FileKind::kUnbind: {
        // In the kernel every driver_override write made before this one is
        // in effect; here one whose close was taken for our own, or that is
        // acted on later in the batch, may still be unshown (unsure_).
        // Settle those first, so that a writer awaiting this one's `driver`
        // link reads its override as the kernel shows it.
        std::set<int> unsure;
        unsure.swap(unsure_);
        for (const int override_wd : unsure) Handle(override_wd, watched_.at(override_wd));
        const bool bind = file.kind == FileKind::kBind;
        const std::string bus_id = ReadTrimmed(file.path);
        const nvdra::common::Status status = bind ? core_.Bind(file.name, bus_id) : core_.Unbind(file.name, bus_id);
        const std::string what = fmt::format("{} {} {} {}", bind ? "bind" : "unbind",
                                             bus_id.empty() ? "\"\"" : bus_id, bind ? "to" : "from", file.name);
        if (status.ok()) {
          Log("{}", what);
        } else {
          Log("{} refused: {}", what, status.message());
        }
        return;
      }
      case FileKind::kOverride: {
        unsure_.erase(wd);  // settled from what the file holds now
        auto settled = core_.SettleOverride(file.name);
        if (!settled.ok()) {
          Log("driver_override of {}: {}", file.name, settled.status().message());
          return;
        }
        if (settled->opened_for_write) ++self_closes_[wd];
        if (settled->deferred) {
          deferred_.insert(wd);
        } else {
          deferred_.erase(wd);
        }
        std::string& known = overrides_[file.name];
        if (settled->value != known) {
          Log("driver_override of {}: {} -> {}", file.name, known.empty() ? "(null)" : known,
              settled->value.empty() ? "(null)" : settled->value);
          known = settled->value;
        }
        return;
      }
    }
  }

  fs::path root_;
  DriverCore core_;
  UniqueFd inotify_;
  std::map<int, Watched> watched_;
  std::map<std::string, std::string> overrides_;  // bus id -> override last seen ("" none)
  // Per watch, closes of our own descriptors (a driver_override rewrite)
  // still to come back as IN_CLOSE_WRITE. Each such event is skipped once:
  // acting on it would open the file again and, while a writer holds it
  // open (the lease refused), spin. inotify does not say who closed, so
  // when a writer's close comes before one of ours, the writer's is the one
  // skipped and ours is acted on when it comes: the write is shown late. A
  // writer blocked on our lease closes after us (SettleOverride); one that
  // had the file open when we tried the lease (deferred) may close first.
  std::map<int, int> self_closes_;
  // driver_override watches with a close read but not acted on since they
  // were last settled: their last close in a batch was skipped (taken for
  // our own, it may have been a writer's), or an earlier one waits for the
  // last. The value may not be shown yet; a bind or unbind settles them
  // first.
  std::set<int> unsure_;
  // driver_override watches whose rewrite waits for another opener to close
  // the file (its lease was refused): their IN_CLOSE_NOWRITE retries it.
  // Our own retries open the file for writing only, so they cannot wake
  // themselves.
  std::set<int> deferred_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::string_view(argv[1]) == "-h" || std::string_view(argv[1]) == "--help") {
    fmt::print(stderr,
               "usage: simsysfs <driver root>\n"
               "Plays the kernel's PCI driver core (bind, unbind, driver_override) for the\n"
               "mock sysfs of a driver root laid out by test/mocknvml/make-driver-root.\n"
               "Writes <driver root>/mock-nvml/simsysfs.ready (its pid) once watching;\n"
               "SIGTERM or SIGINT stops it (exit 0).\n");
    return 2;
  }
  const fs::path root = argv[1];
  const pid_t pid = ::getpid();

  // Blocked before anything else, so that a signal sent as soon as the
  // process exists is read from the signalfd, not fatal.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  if (::sigprocmask(SIG_BLOCK, &stop_signals, nullptr) != 0) {
    Log("sigprocmask: {}", std::strerror(errno));
    return 1;
  }
  // A writer opening a driver_override while we rewrite it under a lease
  // sends us SIGIO (the lease break); its default action would kill us.
  ::signal(SIGIO, SIG_IGN);
  UniqueFd signals(::signalfd(-1, &stop_signals, SFD_CLOEXEC));
  if (!signals) {
    Log("signalfd: {}", std::strerror(errno));
    return 1;
  }

  const fs::path lock_path = root / "mock-nvml" / "simsysfs.lock";
  UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock) {
    Log("open {}: {}", lock_path.string(), std::strerror(errno));
    return 1;
  }
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    Log("another simsysfs serves {} ({} is locked)", root.string(), lock_path.string());
    return 1;
  }

  UniqueFd inotify(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!inotify) {
    Log("inotify_init1: {}", std::strerror(errno));
    return 1;
  }
  Simulator simulator(root, std::move(inotify));
  if (!simulator.Watch()) return 1;
  if (nvdra::common::Status status = nvdra::simsysfs::WriteReadyFile(root, pid); !status.ok()) {
    Log("{}", status.message());
    return 1;
  }

  int exit_code = 0;
  for (bool running = true; running;) {
    std::array<pollfd, 2> fds{{{simulator.fd(), POLLIN, 0}, {signals.get(), POLLIN, 0}}};
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      Log("poll: {}", std::strerror(errno));
      exit_code = 1;
      break;
    }
    if ((fds[1].revents & POLLIN) != 0) {
      signalfd_siginfo info{};
      if (::read(signals.get(), &info, sizeof(info)) == sizeof(info)) {
        Log("{}: stopping", ::strsignal(static_cast<int>(info.ssi_signo)));
      }
      break;
    }
    if ((fds[0].revents & POLLIN) != 0 && !simulator.HandleEvents()) {
      exit_code = 1;
      running = false;
    }
  }
  nvdra::simsysfs::RemoveReadyFile(root, pid);
  return exit_code;
}
