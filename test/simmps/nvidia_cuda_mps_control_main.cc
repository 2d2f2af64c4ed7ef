// nvidia-cuda-mps-control (simulated): `-d` / `-f` [-M] start the control
// daemon (control_daemon.h); without them it is a client reading commands
// from stdin (control_client.h). See README.md.

#include <fcntl.h>

#include <cerrno>
#include <cstdio>
#include <iostream>
#include <string_view>

#include <fmt/format.h>

#include "control_client.h"
#include "control_daemon.h"
#include "mps_paths.h"

namespace {

void Usage(std::FILE* out) {
  fmt::print(out,
             "Usage: nvidia-cuda-mps-control [-d | -f] [-M]\n"
             "  -d          start the MPS control daemon in the background\n"
             "  -f          run the MPS control daemon in the foreground\n"
             "  -M          multi-user mode (with -d or -f)\n"
             "  -h, --help  this text\n"
             "Without -d or -f, reads commands from stdin, one per line, and prints\n"
             "the daemon's replies. Folders: CUDA_MPS_PIPE_DIRECTORY (default\n"
             "/tmp/nvidia-mps), CUDA_MPS_LOG_DIRECTORY (default /var/log/nvidia-mps).\n"
             "Simulated MPS control for tests (nvdra test/simmps).\n");
}

// Opens whatever of descriptors 0-2 the caller left closed, so that no socket
// or file opened later takes one of those numbers: the client would print its
// replies into the daemon's socket, and the daemon, detaching its stdio,
// would close its own lock.
void OccupyClosedStdio() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    // open() and pipe() take the lowest free numbers: `fd` first.
    if (::open("/dev/null", O_RDWR) >= 0) continue;
    int filler[2];
    if (::pipe(filler) < 0) return;
    if (filler[1] > 2) ::close(filler[1]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace nvdra::simmps;
  OccupyClosedStdio();
  bool background = false;
  bool foreground = false;
  bool multi_user = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      Usage(stdout);
      return 0;
    }
    if (arg == "-d") {
      background = true;
    } else if (arg == "-f") {
      foreground = true;
    } else if (arg == "-M") {
      multi_user = true;
    } else if (arg == "-S" || arg == "--static-partitioning" || arg == "-v") {
      fmt::print(stderr, "nvidia-cuda-mps-control: {} is not simulated\n", arg);
      return 1;
    } else {
      fmt::print(stderr, "nvidia-cuda-mps-control: unknown argument {:?}\n", arg);
      Usage(stderr);
      return 1;
    }
  }
  if (background && foreground) {
    fmt::print(stderr, "nvidia-cuda-mps-control: -d and -f exclude each other\n");
    Usage(stderr);
    return 1;
  }
  const MpsPaths paths = MpsPaths::FromEnvironment();
  if (background || foreground) {
    return RunControlDaemon({.paths = paths, .multi_user = multi_user, .background = background});
  }
  if (multi_user) {
    fmt::print(stderr, "nvidia-cuda-mps-control: -M needs -d or -f\n");
    Usage(stderr);
    return 1;
  }
  return RunControlClient(paths, std::cin, std::cout, std::cerr);
}
