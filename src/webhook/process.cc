#include "webhook/process.h"

#include <malloc.h>

#include <memory>

#include "common/log.h"
#include "common/metrics.h"
#include "common/metrics_server.h"
#include "webhook/admission.h"
#include "webhook/server.h"
#include "webhook/serving_certificate.h"

namespace nvdra::webhook {

namespace {

// A request body of up to kMaxBodyBytes and its JSON tree are the only large
// allocations the webhook makes. With glibc's defaults, memory freed after
// such a request stays in the thread's arena (RSS grew to 269 MB under
// repeated 7.5 MB bodies and stayed there). Large blocks from mmap go back to
// the kernel when freed; two arenas and a low trim threshold return the rest.
void ReturnLargeFreesToTheKernel() {
  constexpr int kLargeBlock = 128 * 1024;
  mallopt(M_ARENA_MAX, 2);
  mallopt(M_MMAP_THRESHOLD, kLargeBlock);  // also turns off glibc's growing threshold
  mallopt(M_TRIM_THRESHOLD, kLargeBlock);
}

}  // namespace

common::Status RunWebhookProcess(const Config& config, const common::FeatureGates& gates,
                                 common::ShutdownSignals& signals) {
  ReturnLargeFreesToTheKernel();
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
