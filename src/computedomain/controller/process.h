#pragma once

// The compute-domain-controller process around the Controller: the API
// client, the metrics server every replica serves, the templates, and, with
// leader election, the Lease that decides which replica reconciles (losing
// it ends the process, so the pod restarts and stands by again).
// main() parses and validates the flags and calls RunControllerProcess.
//
// Ownership: owns everything it builds until it returns; borrows `signals`.
// Thread-safety: call once, from main's thread.

#include "common/feature_gates.h"
#include "common/signals.h"
#include "common/status.h"
#include "computedomain/config.h"

namespace nvdra::computedomain::controller {

// Runs until `signals` asks for shutdown (OK) or the controller or the
// election fails (its status; the caller exits non-zero). `config` has
// passed Validate. With host-managed IMEX, ComputeDomainCliques and
// IMEXDaemonsWithDNSNames are forced off, as upstream (no per-domain
// daemons, no cliques, no DNS names).
[[nodiscard]] common::Status RunControllerProcess(const ControllerConfig& config, common::FeatureGates gates,
                                                  common::ShutdownSignals& signals);

}  // namespace nvdra::computedomain::controller
