// webhook: validating admission of the driver's opaque device configs in
// ResourceClaims and ResourceClaimTemplates (src/webhook). Serves HTTPS until
// SIGTERM or SIGINT, then stops accepting and finishes requests in progress.

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "common/feature_gates.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/metrics_server.h"
#include "common/signals.h"
#include "webhook/admission.h"
#include "webhook/config.h"
#include "webhook/server.h"
#include "webhook/serving_certificate.h"

int main(int argc, char** argv) {
  using namespace nvdra;
  CLI::App app("webhook implements a validating admission webhook complementing a DRA driver plugin: it checks "
               "the resource.nvidia.com opaque configs of ResourceClaims and ResourceClaimTemplates",
               std::string(webhook::kBinaryName));
  common::CommonFlags common_flags;
  webhook::Config config;
  common::AddCommonFlags(app, common_flags, webhook::kBinaryName);
  webhook::AddFlags(app, config);
  if (auto exit_code = common::ParseFlags(app, argc, argv)) return *exit_code;

  common::StatusOr<common::FeatureGates> gates = common::ApplyCommonFlags(common_flags);
  if (!gates.ok()) return common::ExitForBadFlags(app, gates.status());
  if (common::Status status = config.Validate(); !status.ok()) {
    return common::ExitForBadFlags(app, status);
  }

  // Before any thread starts, so every thread inherits the blocked signals.
  auto signals = common::ShutdownSignals::Install();
  if (!signals.ok()) {
    LOG_ERROR("cannot watch shutdown signals", {{"err", signals.status()}});
    return 1;
  }
  common::LogStartup(webhook::kBinaryName, app, *gates);

  common::MetricsRegistry registry;
  auto certificate = webhook::ServingCertificate::Start(config.tls_cert_file, config.tls_private_key_file, registry);
  if (!certificate.ok()) {
    LOG_ERROR("cannot load the serving certificate", {{"err", certificate.status()}});
    return 1;
  }
  std::unique_ptr<common::MetricsServer> metrics_server;
  if (!config.metrics.http_endpoint.empty()) {
    auto started = common::MetricsServer::Start(registry, config.metrics.http_endpoint, config.metrics.metrics_path);
    if (!started.ok()) {
      LOG_ERROR("cannot start the metrics server", {{"err", started.status()}});
      return 1;
    }
    metrics_server = *std::move(started);
    LOG_INFO(0, "serving metrics", {{"address", metrics_server->address()}, {"path", metrics_server->path()}});
  }
  webhook::ServerOptions options;
  options.bind_address = config.bind_address;
  options.port = config.port;
  auto server = webhook::WebhookServer::Start(options, **certificate, registry);
  if (!server.ok()) {
    LOG_ERROR("cannot start the webhook server", {{"err", server.status()}});
    return 1;
  }
  LOG_INFO(0, "starting webhook server",
           {{"address", (*server)->address()}, {"path", webhook::kValidatePath},
            {"certificate", (*certificate)->Describe()}});

  const int signal_number = (*signals)->WaitForShutdown();
  LOG_INFO(0, "shutting down", {{"signal", signal_number}});
  server->reset();  // stops accepting, finishes requests in progress
  metrics_server.reset();
  certificate->reset();
  LOG_INFO(0, "shutdown complete");
  common::FlushLogs();
  return 0;
}
