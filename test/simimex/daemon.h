#pragma once

// The simulated nvidia-imex daemon: joins the IMEX domain described by its
// nodes file over TCP and answers nvidia-imex-ctl. Test infrastructure, not
// product.
//
// What it does, and where that follows the real daemon:
//   - Its own entry: BIND_INTERFACE_IP if set; else, as the IMEX guide says, the
//     nodes-file entry that is one of this host's interface addresses. Because
//     simulated nodes share one network namespace (every 127.x.y.z is local to
//     everyone), the entry equal to IMEX_CMD_BIND_INTERFACE_IP (the pod IP in the
//     driver's template) is tried before the interface list. No own entry is a
//     start-up error.
//   - Listens for peers on <own address>:SERVER_PORT, keeps one outgoing
//     connection to every other entry (names re-resolved on every attempt, as
//     upstream's DNS-names mode relies on), reconnecting with backoff 50 ms ..
//     1 s, and at once when that peer connects to us. Each connection starts
//     with a Hello; different nodes files (!M!) or versions (!V!) are refused.
//   - A lost connection is R (Recovering) until IMEX_NODE_DISCONNECTED_GRACE_TIME
//     passes (-1: forever), then D; a peer that shut down cleanly (SIGTERM) says
//     goodbye first and is D at once (IMEX guide, "Signal handling": a stopping
//     daemon notifies the other nodes).
//   - State: INITIALIZING until the fault hook's ready delay passes, then
//     READY; with the simulator-only quorum FULL, WAITING_FOR_PEERS while any
//     resolvable peer is not C. RECOVERY behaves as NONE: nothing is ever
//     imported in the simulation, so there is nothing to recover.
//   - SIGUSR1 (IMEX guide: reload credentials and "restart all outgoing client
//     connections"; at most once per 5 s, later ones ignored): re-reads the
//     nodes file and reconnects every peer that is not connected or whose
//     address changed. Re-reading the nodes file is the simulator's addition
//     (the guide says the config is read at start); with an unchanged file it
//     is the documented behaviour.
//   - SIGTERM/SIGINT/SIGQUIT: SHUTTING_DOWN, goodbye to peers, exit 0.
//     SIGHUP is logged and otherwise ignored.
//
// Ownership: owns every socket and the signalfd. Confined to the thread that
// calls Run(); the caller must have blocked SIGTERM, SIGINT, SIGQUIT, SIGUSR1
// and SIGHUP in every thread before Start (they are read from a signalfd).

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "common/status.h"
#include "imex_config.h"

namespace nvdra::simimex {

struct DaemonOptions {
  ImexConfig config;
  std::filesystem::path hosts_file = "/etc/hosts";
  bool use_system_resolver = false;
  // Fault hook: stay INITIALIZING this long after start.
  std::chrono::milliseconds ready_delay{0};
  // The documented 5 s window in which a repeated SIGUSR1 is ignored.
  std::chrono::milliseconds sigusr1_min_interval{5000};
  std::string version;
};

class Daemon {
 public:
  // Reads the nodes file, finds its own entry and binds the peer and command
  // listeners. kNotFound: no nodes file; kFailedPrecondition: no own entry;
  // errno-mapped codes when a listener cannot bind (kAlreadyExists is not used:
  // EADDRINUSE maps to kUnavailable).
  static common::StatusOr<std::unique_ptr<Daemon>> Start(DaemonOptions options);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Runs until a stop signal; returns the process exit code (0 on a clean stop).
  int Run();

 private:
  struct Impl;
  explicit Daemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvdra::simimex
