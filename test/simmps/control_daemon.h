#pragma once

// The simulated MPS control daemon (`nvidia-cuda-mps-control -d` / `-f`).
// Test infrastructure, not product.
//
// What it does, and where that follows the real daemon:
//   - Creates the pipe and log folders if missing. Refuses to start, with
//     "An instance of this daemon is already running" on stderr and exit 1,
//     when another daemon serves the same pipe folder (its lock is held, or
//     something answers on its socket). A socket file nobody listens on is a
//     leftover and is replaced.
//   - Listens on <pipe>/control, writes <pipe>/nvidia-cuda-mps-control.pid,
//     appends to <log>/control.log as the real daemon does (control_log.h):
//       Starting control daemon using socket <pipe>/control
//       To connect CUDA applications to this daemon, set env CUDA_MPS_PIPE_DIRECTORY=<pipe>
//     and per client: "Accepting connection...", "NEW UI", then per command
//     "Cmd:<command>" and each reply line, and "UI closed" when it leaves.
//   - Runs the commands of mps_settings.h; after each change rewrites the
//     simulation-only <pipe>/simulated-mps-state.json (temp file + rename).
//   - `quit`, SIGTERM or SIGINT: removes the socket and the pid file, logs
//     "Shutting down control daemon", exits 0. On `quit` the removal happens
//     before the client gets its answer, so when `echo quit |
//     nvidia-cuda-mps-control` returns the socket is gone. The lock file and
//     the state file stay.
//   - Background (-d): forks; the child closes every inherited descriptor,
//     and only after the socket listens moves stdin,
//     stdout and stderr to /dev/null (a pipe of its own under a chroot that
//     has none) and tells the parent, which then exits 0.
//     So `nvidia-cuda-mps-control -d` returns once commands are accepted, and
//     a caller reading its output sees end-of-file then. Start-up errors
//     reach the caller's stderr and become the parent's exit status.
//   - Process group: the background daemon stays in its caller's process
//     group instead of starting a session of its own (setsid) as a real
//     daemon does. A real container's daemon dies with the container's PID
//     namespace; simulated containers (test/simnode) have none and are
//     stopped by signalling their process group, so a new session would
//     outlive its pod. Staying in the group gives the real lifecycle: pod
//     deletion sends SIGTERM, and the daemon exits cleanly. SIGHUP is ignored.
//
// Ownership: the daemon process owns every file above while it runs. It is
// single-threaded (one poll loop); SIGTERM and SIGINT are read from a signalfd.

#include "mps_paths.h"

namespace nvdra::simmps {

struct DaemonOptions {
  MpsPaths paths;
  bool multi_user = false;  // -M: recorded in the state file
  bool background = true;   // -d; false is -f
};

// Runs the daemon and returns the exit status for main to return. With
// `background`, both processes return here: the caller with 0 once the daemon
// accepts commands (or the daemon's start-up failure status), the daemon when
// it stops.
int RunControlDaemon(const DaemonOptions& options);

}  // namespace nvdra::simmps
