#pragma once

// The events file as lines: a follower of an append-only file, and the
// parser of one line.
//
// Defines: EventLine, ParseEventLine, ParseEventType, LineFollower.
//
// Lines (see events.h for what each kind does):
//   {"uuid": "GPU-...", "type": "xid", "data": 79}
//   {"uuid": "GPU-...", "type": "double_bit_ecc", "gpuInstanceId": 2, "computeInstanceId": 0}
//   {"uuid": "GPU-...", "type": "gpu_lost"}
//   {"uuid": "GPU-...", "type": "gpu_recovered"}
//
// Ownership: LineFollower owns the descriptor of the file version it reads.
// Thread-safety: thread-compatible (each user serialises its calls).

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/unique_fd.h"
#include "nvml/nvml_abi.h"

namespace nvdra::mocknvml {

namespace abi = nvdra::nvml::abi;

// "xid" to nvmlEventTypeXidCriticalError and so on; nullopt if unknown.
std::optional<unsigned long long> ParseEventType(std::string_view name);

struct EventLine {
  enum class Kind {
    kEvent,         // an NVML event of `type`
    kGpuLost,       // the GPU fell off the bus
    kGpuRecovered,  // it is back
  };
  Kind kind = Kind::kEvent;
  std::string uuid;
  unsigned long long type = 0;  // kEvent: the nvmlEventType* bit(s)
  unsigned long long data = 0;
  unsigned gpu_instance_id = 0xFFFFFFFFU;  // NVML's "no instance"
  unsigned compute_instance_id = 0xFFFFFFFFU;
};

// kInvalidArgument, saying why, for a line that is not JSON, lacks "uuid" or
// "type", or names an unknown type.
common::StatusOr<EventLine> ParseEventLine(std::string_view line);

// Reads the complete lines of a file that writers append to, in order, each
// once. The file may not exist yet; when it is replaced (another inode at
// the path) or truncated (shorter than what was read), reading starts again
// at the beginning of what is there now, and Next says so. Reads go in
// chunks of up to 64 KiB into a buffer, so a burst of lines costs a few
// syscalls, not one per line or byte.
class LineFollower {
 public:
  enum class Start {
    kBeginning,  // every line the file holds
    kEnd,        // only lines completed after construction
  };
  LineFollower(std::filesystem::path file, Start start);

  enum class Next {
    kLine,       // `line` holds the next line, without its newline
    kNone,       // no complete line now (an unfinished last line waits)
    kRestarted,  // the file was replaced or truncated: lines start again
  };
  Next NextLine(std::string* line);

  const std::filesystem::path& path() const { return file_; }

 private:
  // Opens or re-opens the file when the path names another inode or it
  // shrank. True when reading starts again at the beginning of a file we
  // had read from before.
  bool FollowPath();
  // Reads one chunk at offset_ into buffer_; true if bytes came. No read
  // when FollowPath saw no more bytes than offset_.
  bool Refill();
  void Reset();

  const std::filesystem::path file_;
  common::UniqueFd fd_;  // the file version being read; empty before it exists
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  off_t offset_ = 0;     // file offset of buffer_'s end
  off_t seen_size_ = 0;  // the file's size at FollowPath's last look
  std::string buffer_;   // bytes read, not yet returned from pos_ on
  std::size_t pos_ = 0;
};

}  // namespace nvdra::mocknvml
