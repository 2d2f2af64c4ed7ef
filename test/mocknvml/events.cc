#include "events.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

namespace nvdra::mocknvml {
namespace {

using json = nlohmann::json;

constexpr unsigned kNoInstance = 0xFFFFFFFFU;
// Nap length when inotify is unavailable (a folder that does not exist yet).
constexpr std::chrono::milliseconds kFallbackNap{10};

}  // namespace

std::optional<unsigned long long> ParseEventType(std::string_view name) {
  if (name == "xid") return abi::nvmlEventTypeXidCriticalError;
  if (name == "single_bit_ecc") return abi::nvmlEventTypeSingleBitEccError;
  if (name == "double_bit_ecc") return abi::nvmlEventTypeDoubleBitEccError;
  if (name == "pstate") return abi::nvmlEventTypePState;
  if (name == "clock") return abi::nvmlEventTypeClock;
  return std::nullopt;
}

EventSet::EventSet(std::filesystem::path events_file) : events_file_(std::move(events_file)) {}

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
  const std::filesystem::path dir = events_file_.parent_path().empty()
                                        ? std::filesystem::path(".")
                                        : events_file_.parent_path();
  if (::inotify_add_watch(fd.get(), dir.c_str(),
                          IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE) < 0) {
    return;
  }
  inotify_ = std::move(fd);
}

void EventSet::DrainWatchLocked() const {
  if (!inotify_) return;
  alignas(inotify_event) char buffer[4096];
  while (::read(inotify_.get(), buffer, sizeof(buffer)) > 0) {
  }
}

bool EventSet::ScanLocked(abi::nvmlEventData_t* out) {
  common::UniqueFd fd(::open(events_file_.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return false;
  if (st.st_size < offset_) offset_ = 0;
  if (st.st_size == offset_) return false;
  std::string text(static_cast<std::size_t>(st.st_size - offset_), '\0');
  const ssize_t n = ::pread(fd.get(), text.data(), text.size(), offset_);
  if (n <= 0) return false;
  text.resize(static_cast<std::size_t>(n));
  std::size_t line_start = 0;
  for (;;) {
    const std::size_t newline = text.find('\n', line_start);
    if (newline == std::string::npos) return false;  // an unfinished line waits
    const std::string line = text.substr(line_start, newline - line_start);
    line_start = newline + 1;
    offset_ += static_cast<off_t>(line.size() + 1);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const json event = json::parse(line);
      const std::string uuid = event.at("uuid").get<std::string>();
      unsigned long long type = 0;
      const json& type_json = event.at("type");
      if (type_json.is_number_unsigned()) {
        type = type_json.get<unsigned long long>();
      } else {
        const auto parsed = ParseEventType(type_json.get<std::string>());
        if (!parsed) throw std::invalid_argument("unknown type " + type_json.dump());
        type = *parsed;
      }
      auto it = registered_.find(uuid);
      if (it == registered_.end() || (it->second.types & type) == 0) continue;
      out->device = it->second.device;
      out->eventType = type;
      out->eventData = event.value("data", 0ULL);
      out->gpuInstanceId = event.value("gpuInstanceId", kNoInstance);
      out->computeInstanceId = event.value("computeInstanceId", kNoInstance);
      return true;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mock NVML: %s: skipping malformed event line %s: %s\n",
                   events_file_.c_str(), line.c_str(), e.what());
    }
  }
}

abi::nvmlReturn_t EventSet::Wait(std::chrono::milliseconds timeout, abi::nvmlEventData_t* out) {
  std::lock_guard lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  EnsureWatchLocked();
  for (;;) {
    // Drain before scanning: a line written after the scan leaves the
    // descriptor readable, so the poll below cannot miss it.
    DrainWatchLocked();
    if (ScanLocked(out)) return abi::NVML_SUCCESS;
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
  }
}

}  // namespace nvdra::mocknvml
