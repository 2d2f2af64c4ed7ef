#include "webhook/process.h"

#include <memory>

#include "common/log.h"
#include "common/metrics.h"
#include "common/metrics_server.h"
#include "webhook/admission.h"
#include "webhook/server.h"
#include "webhook/serving_certificate.h"

namespace nvdra::webhook {

common::Status RunWebhookProcess(const Config& config, const common::FeatureGates& gates,
                                 common::ShutdownSignals& signals) {
  common::MetricsRegistry registry;
  ASSIGN_OR_RETURN(std::unique_ptr<ServingCertificate> certificate,
                   ServingCertificate::Start(config.tls_cert_file, config.tls_private_key_file, registry)
                       .WithContext("load the serving certificate"));
  ASSIGN_OR_RETURN(std::unique_ptr<common::MetricsServer> metrics_server,
                   common::StartMetricsServerFromFlags(registry, config.metrics)
                       .WithContext("start the metrics server"));
  ServerOptions options;
  options.bind_address = config.bind_address;
  options.port = config.port;
  options.gates = gates;
  ASSIGN_OR_RETURN(std::unique_ptr<WebhookServer> server, WebhookServer::Start(options, *certificate, registry)
                                                                .WithContext("start the webhook server"));
  LOG_INFO(0, "starting webhook server",
           {{"address", server->address()}, {"path", kValidatePath}, {"certificate", certificate->Describe()}});

  const int signal_number = signals.WaitForShutdown();
  LOG_INFO(0, "shutting down", {{"signal", signal_number}});
  server.reset();  // stops accepting, finishes requests in progress
  metrics_server.reset();
  certificate.reset();
  return common::OkStatus();
}

}  // namespace nvdra::webhook
