#pragma once

// The compute-domain-daemon's two commands around ImexDaemon: `run` (label
// the pod with its clique, join the domain, supervise nvidia-imex; a node
// without a clique ID runs no IMEX and only waits for shutdown) and `check`
// (the pod's probe: nvidia-imex-ctl -q must answer exactly "READY\n", as
// upstream compares it). main() parses the flags and calls one of them.
// `run` serves its metrics (daemon_metrics.h, plus process_*) when
// --http-endpoint is set; `check` never serves.
//
// Ownership: owns what it builds until it returns; borrows `signals`.
// Thread-safety: call once, from main's thread.

#include "common/feature_gates.h"
#include "common/signals.h"
#include "common/status.h"
#include "computedomain/config.h"

namespace nvdra::computedomain {

// Runs until `signals` asks for shutdown (OK) or the daemon fails (its
// status, with what it was doing). Checks config.ValidateForRun first.
[[nodiscard]] common::Status RunDaemonProcess(const DaemonConfig& config, const common::FeatureGates& gates,
                                              common::ShutdownSignals& signals);

// OK when this node's IMEX daemon is ready, or when the node has no clique
// ID (nothing to be ready for, as upstream); kUnavailable with the command's
// exit and output otherwise.
[[nodiscard]] common::Status CheckImexReady(const DaemonConfig& config);

}  // namespace nvdra::computedomain
