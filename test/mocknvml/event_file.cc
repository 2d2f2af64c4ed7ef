#include "event_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include <nlohmann/json.hpp>

namespace nvdra::mocknvml {
namespace {

using json = nlohmann::json;

constexpr std::size_t kChunk = 64 * 1024;
// Read bytes already returned are dropped from the buffer's front once
// there are this many, so that a long run of lines does not grow it.
constexpr std::size_t kCompactAt = 64 * 1024;

// The offset just past the last newline of `fd` (size `size`): where lines
// completed from now on begin. An unfinished last line is left to come.
off_t EndOfLastLine(int fd, off_t size) {
  char chunk[4096];
  off_t end = size;
  while (end > 0) {
    const off_t start = std::max<off_t>(0, end - static_cast<off_t>(sizeof(chunk)));
    const ssize_t n = ::pread(fd, chunk, static_cast<std::size_t>(end - start), start);
    if (n <= 0) return 0;
    for (ssize_t i = n; i > 0; --i) {
      if (chunk[i - 1] == '\n') return start + i;
    }
    end = start;
  }
  return 0;
}

}  // namespace

std::optional<unsigned long long> ParseEventType(std::string_view name) {
  if (name == "xid") return abi::nvmlEventTypeXidCriticalError;
  if (name == "single_bit_ecc") return abi::nvmlEventTypeSingleBitEccError;
  if (name == "double_bit_ecc") return abi::nvmlEventTypeDoubleBitEccError;
  if (name == "pstate") return abi::nvmlEventTypePState;
  if (name == "clock") return abi::nvmlEventTypeClock;
  return std::nullopt;
}

common::StatusOr<EventLine> ParseEventLine(std::string_view line) {
  try {
    const json event = json::parse(line);
    EventLine out;
    out.uuid = event.at("uuid").get<std::string>();
    const json& type = event.at("type");
    if (type.is_number_unsigned()) {
      out.type = type.get<unsigned long long>();
    } else {
      const std::string name = type.get<std::string>();
      if (name == "gpu_lost") {
        out.kind = EventLine::Kind::kGpuLost;
      } else if (name == "gpu_recovered") {
        out.kind = EventLine::Kind::kGpuRecovered;
      } else if (const auto parsed = ParseEventType(name)) {
        out.type = *parsed;
      } else {
        return common::InvalidArgumentError("unknown type " + type.dump());
      }
    }
    out.data = event.value("data", 0ULL);
    out.gpu_instance_id = event.value("gpuInstanceId", out.gpu_instance_id);
    out.compute_instance_id = event.value("computeInstanceId", out.compute_instance_id);
    return out;
  } catch (const std::exception& e) {
    return common::InvalidArgumentError(e.what());
  }
}

LineFollower::LineFollower(std::filesystem::path file, Start start) : file_(std::move(file)) {
  if (start == Start::kBeginning) return;
  common::UniqueFd fd(::open(file_.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0) return;  // absent: all it will hold is new
  offset_ = EndOfLastLine(fd.get(), st.st_size);
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  fd_ = std::move(fd);
}

void LineFollower::Reset() {
  fd_ = common::UniqueFd();
  offset_ = 0;
  buffer_.clear();
  pos_ = 0;
}

bool LineFollower::FollowPath() {
  struct stat st {};
  if (::stat(file_.c_str(), &st) != 0) {
    // Removed: what comes at the path next is a new file, from its start.
    const bool had = static_cast<bool>(fd_);
    Reset();
    return had;
  }
  seen_size_ = st.st_size;
  if (fd_ && st.st_dev == dev_ && st.st_ino == ino_) {
    if (st.st_size >= offset_) return false;
    // Truncated: the same inode is read again from 0. (Truncated and then
    // refilled past offset_ between two looks is not seen; writers that
    // start over should replace the file instead.)
    offset_ = 0;
    buffer_.clear();
    pos_ = 0;
    return true;
  }
  const bool had = static_cast<bool>(fd_);
  Reset();
  // The held descriptor pins the old inode, so its number cannot come back
  // for another file while we compare against it.
  common::UniqueFd fd(::open(file_.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat opened {};
  if (!fd || ::fstat(fd.get(), &opened) != 0) return had;
  dev_ = opened.st_dev;
  ino_ = opened.st_ino;
  fd_ = std::move(fd);
  return had;
}

bool LineFollower::Refill() {
  // Callers look often (every NVML call asks whether its GPU is lost): when
  // the file did not grow, the stat was the only syscall.
  if (!fd_ || seen_size_ <= offset_) return false;
  const std::size_t old_size = buffer_.size();
  buffer_.resize(old_size + kChunk);
  ssize_t n;
  do {
    n = ::pread(fd_.get(), buffer_.data() + old_size, kChunk, offset_);
  } while (n < 0 && errno == EINTR);
  buffer_.resize(old_size + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
  if (n <= 0) return false;
  offset_ += n;
  return true;
}

LineFollower::Next LineFollower::NextLine(std::string* line) {
  for (;;) {
    const std::size_t newline = buffer_.find('\n', pos_);
    if (newline != std::string::npos) {
      line->assign(buffer_, pos_, newline - pos_);
      pos_ = newline + 1;
      if (pos_ == buffer_.size()) {
        buffer_.clear();
        pos_ = 0;
      } else if (pos_ >= kCompactAt) {
        buffer_.erase(0, pos_);
        pos_ = 0;
      }
      return Next::kLine;
    }
    if (FollowPath()) return Next::kRestarted;
    if (!Refill()) return Next::kNone;
  }
}

}  // namespace nvdra::mocknvml
