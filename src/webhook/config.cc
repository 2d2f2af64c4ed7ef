#include "webhook/config.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace nvdra::webhook {

common::Status Config::Validate() const {
  if (tls_cert_file.empty()) {
    return common::InvalidArgumentError(
        "--tls-cert-file is required (PEM serving certificate, e.g. tls.crt of the webhook's Secret)");
  }
  if (tls_private_key_file.empty()) {
    return common::InvalidArgumentError("--tls-private-key-file is required (PEM key of --tls-cert-file)");
  }
  if (port < 1 || port > 65535) {
    return common::InvalidArgumentError(
        fmt::format("--port: {} is not a port (1..65535)", port));
  }
  return metrics.Validate();
}

void AddFlags(CLI::App& app, Config& config) {
  app.add_option("--tls-cert-file", config.tls_cert_file,
                 "File containing the x509 certificate for HTTPS (CA certificate, if any, concatenated after "
                 "the server certificate); reloaded when it changes");
  app.add_option("--tls-private-key-file", config.tls_private_key_file,
                 "File containing the x509 private key matching --tls-cert-file; reloaded when it changes");
  app.add_option("--port", config.port, "Secure port that the webhook listens on")->capture_default_str();
  common::WithEnv(app.add_option("--bind-address", config.bind_address,
                                 "IP address to listen on; empty: every interface"),
                  {"BIND_ADDRESS"});
  common::AddMetricsFlags(app, config.metrics);
}

}  // namespace nvdra::webhook
