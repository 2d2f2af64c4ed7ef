#include "events.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

namespace nvdra::mocknvml {
namespace {

// Nap length when inotify is unavailable (a folder that does not exist yet).
constexpr std::chrono::milliseconds kFallbackNap{10};

std::filesystem::path FolderOf(const std::filesystem::path& file) {
  return file.parent_path().empty() ? std::filesystem::path(".") : file.parent_path();
}

}  // namespace

EventSet::EventSet(std::filesystem::path events_file)
    : events_(std::move(events_file), LineFollower::Start::kEnd) {}

void EventSet::Register(abi::nvmlDevice_t device, const std::string& uuid,
                        unsigned long long types) {
  std::lock_guard lock(mu_);
  Registration& r = registered_[uuid];
  r.device = device;
  r.types |= types;
}

void EventSet::EnsureWatchLocked() {
  if (watch_tried_) return;
  watch_tried_ = true;
  common::UniqueFd fd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!fd) return;
  // The folder, not the file: the file may not exist yet or be replaced.
  if (::inotify_add_watch(fd.get(), FolderOf(events_.path()).c_str(),
                          IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DELETE) < 0) {
    return;
  }
  inotify_ = std::move(fd);
}

bool EventSet::DrainWatchLocked() const {
  if (!inotify_) return true;
  const std::string name = events_.path().filename().string();
  bool ours = false;
  alignas(inotify_event) char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(inotify_.get(), buffer, sizeof(buffer));
    if (n <= 0) return ours;
    // The folder also holds the state file and the registrations: changes
    // to those need no look at the events file.
    for (ssize_t at = 0; at < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buffer + at);
      if ((e->mask & IN_Q_OVERFLOW) != 0 || (e->len > 0 && name == e->name)) ours = true;
      at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
    }
  }
}

abi::nvmlReturn_t EventSet::ScanLocked(abi::nvmlEventData_t* out) {
  std::string line;
  for (;;) {
    const LineFollower::Next next = events_.NextLine(&line);
    if (next == LineFollower::Next::kNone) return abi::NVML_ERROR_TIMEOUT;
    if (next == LineFollower::Next::kRestarted) continue;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    common::StatusOr<EventLine> event = ParseEventLine(line);
    if (!event.ok()) {
      std::fprintf(stderr, "mock NVML: %s: skipping malformed event line %s: %s\n",
                   events_.path().c_str(), line.c_str(), event.status().message().c_str());
      continue;
    }
    auto it = registered_.find(event->uuid);
    if (it == registered_.end()) continue;
    switch (event->kind) {
      case EventLine::Kind::kGpuLost:
        return abi::NVML_ERROR_GPU_IS_LOST;
      case EventLine::Kind::kGpuRecovered:
        continue;
      case EventLine::Kind::kEvent:
        break;
    }
    if ((it->second.types & event->type) == 0) continue;
    out->device = it->second.device;
    out->eventType = event->type;
    out->eventData = event->data;
    out->gpuInstanceId = event->gpu_instance_id;
    out->computeInstanceId = event->compute_instance_id;
    return abi::NVML_SUCCESS;
  }
}

abi::nvmlReturn_t EventSet::Wait(std::chrono::milliseconds timeout, abi::nvmlEventData_t* out) {
  std::lock_guard lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  EnsureWatchLocked();
  // Lines already buffered or written before this call are read first, with
  // no look at the inotify queue: in a burst, an event costs no syscall until
  // the buffer runs dry. Notifications queued for what was read meanwhile
  // only wake the poll once for nothing; none can be lost, as the queue is
  // drained only right before the file is read again.
  bool look = true;
  for (;;) {
    if (look) {
      if (const abi::nvmlReturn_t rc = ScanLocked(out); rc != abi::NVML_ERROR_TIMEOUT) return rc;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return abi::NVML_ERROR_TIMEOUT;
    // Round up so that we never return TIMEOUT before the deadline.
    auto remaining = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
    if (inotify_) {
      pollfd pfd{inotify_.get(), POLLIN, 0};
      const int rc = ::poll(&pfd, 1, static_cast<int>(remaining.count()));
      if (rc < 0 && errno != EINTR) return abi::NVML_ERROR_UNKNOWN;
    } else {
      std::this_thread::sleep_for(std::min(remaining, kFallbackNap));
    }
    look = DrainWatchLocked();
  }
}

LostGpus::LostGpus(std::filesystem::path events_file)
    : events_(std::move(events_file), LineFollower::Start::kBeginning) {}

bool LostGpus::IsLost(std::string_view uuid) {
  std::string line;
  for (;;) {
    const LineFollower::Next next = events_.NextLine(&line);
    if (next == LineFollower::Next::kNone) break;
    if (next == LineFollower::Next::kRestarted) {
      lost_.clear();
      continue;
    }
    // Most lines are events: parse only the lines that can change the set.
    // Malformed lines are the event sets' to report.
    if (line.find("gpu_lost") == std::string::npos &&
        line.find("gpu_recovered") == std::string::npos) {
      continue;
    }
    common::StatusOr<EventLine> event = ParseEventLine(line);
    if (!event.ok()) continue;
    if (event->kind == EventLine::Kind::kGpuLost) lost_.insert(event->uuid);
    if (event->kind == EventLine::Kind::kGpuRecovered) lost_.erase(event->uuid);
  }
  return lost_.contains(uuid);
}

std::filesystem::path RegistrationsFile(const std::filesystem::path& events_file) {
  return FolderOf(events_file) / "event-registrations.jsonl";
}

common::Status AppendRegistration(const std::filesystem::path& file, long pid,
                                  std::string_view uuid, unsigned long long types) {
  const std::string line =
      nlohmann::ordered_json{{"pid", pid}, {"uuid", uuid}, {"types", types}}.dump() + "\n";
  common::UniqueFd fd(::open(file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666));
  if (!fd) return common::ErrnoToStatus(errno, "open " + file.string());
  // One write: O_APPEND makes it land whole at the end, whoever else appends.
  ssize_t n;
  do {
    n = ::write(fd.get(), line.data(), line.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return common::ErrnoToStatus(errno, "write " + file.string());
  if (static_cast<std::size_t>(n) != line.size()) {
    return common::UnknownError("short write to " + file.string());
  }
  return common::OkStatus();
}

}  // namespace nvdra::mocknvml
