#pragma once

// The control socket and what travels on it between the simulated
// nvidia-cuda-mps-control client and daemon. Test infrastructure, not product;
// the real tool's wire format is NVIDIA's own and not reproduced.
//
// Defines: ConnectControlSocket, ListenControlSocket, EncodeReply, SendAll,
// LineReader, kMaxLineBytes.
//
// Protocol (ours): a unix stream socket. The client sends one command per
// line ("<command>\n"); for each, the daemon answers the number of reply
// lines, then those lines ("2\nfirst\nsecond\n"; "0\n" for none). After
// `quit` the daemon answers and closes.
//
// Thread-safety: free functions are thread-safe; a LineReader is
// thread-compatible and does not own its descriptor.

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace nvdra::simmps {

// Longest command or reply line accepted, newline excluded.
inline constexpr std::size_t kMaxLineBytes = 4096;

// A blocking, connected socket. kUnavailable when nothing listens there
// (no file, a stale socket file, or not a socket).
common::StatusOr<common::UniqueFd> ConnectControlSocket(const std::filesystem::path& path);

// A non-blocking, listening socket bound at `path`, which must not exist.
common::StatusOr<common::UniqueFd> ListenControlSocket(const std::filesystem::path& path);

// The daemon's answer to one command, framed as above.
std::string EncodeReply(const std::vector<std::string>& lines);

// Writes all of `data` to a socket (MSG_NOSIGNAL: a gone peer is an error,
// not SIGPIPE).
common::Status SendAll(int fd, std::string_view data);

// Reads newline-terminated lines from a blocking descriptor.
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  // The next line without its newline; kUnavailable at end of stream.
  common::StatusOr<std::string> ReadLine();

 private:
  int fd_;
  std::string buffer_;
};

}  // namespace nvdra::simmps
