#pragma once

// RunWebhookProcess: the webhook binary after its flags are parsed: the
// reloading serving certificate, the metrics server (--http-endpoint), the
// HTTPS admission server, and on SIGTERM/SIGINT an orderly stop (stop
// accepting, finish the requests in progress).
//
// Ownership: owns everything it builds until it returns; borrows `signals`.
// Thread-safety: call once, from main's thread.

#include "common/feature_gates.h"
#include "common/signals.h"
#include "common/status.h"
#include "webhook/config.h"

namespace nvdra::webhook {

// Serves until `signals` requests the stop; an error when the certificate,
// the metrics server or the HTTPS server cannot start. `config` passed
// Validate.
// `gates` decide which sharing strategies are admitted (the plugins' gates).
[[nodiscard]] common::Status RunWebhookProcess(const Config& config, const common::FeatureGates& gates,
                                               common::ShutdownSignals& signals);

}  // namespace nvdra::webhook
