#pragma once

// The client side of the simulated nvidia-cuda-mps-control (run without -d or
// -f): reads commands from an input stream, one per line (blank lines
// skipped), sends each to the daemon of the pipe folder and prints each reply
// line. Test infrastructure, not product.
//
// Exit status, as the real tool: 0 when every command was answered, including
// error answers (the daemon's words are the output); 1 with "Cannot find MPS
// control daemon process" on stderr when no daemon listens; 1 when the daemon
// goes away mid-session. After `quit` the client stops reading.
//
// Thread-safety: thread-compatible; blocks on the daemon.

#include <istream>
#include <ostream>

#include "mps_paths.h"

namespace nvdra::simmps {

int RunControlClient(const MpsPaths& paths, std::istream& in, std::ostream& out,
                     std::ostream& err);

}  // namespace nvdra::simmps
