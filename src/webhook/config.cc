#include "webhook/config.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace nvdra::webhook {

common::Status Config::Validate() const {
  if (tls_cert_file.empty()) return common::InvalidArgumentError("--tls-cert-file is required");
  if (tls_private_key_file.empty()) {
    return common::InvalidArgumentError("--tls-private-key-file is required");
  }
  if (port < 1 || port > 65535) {
    return common::InvalidArgumentError(
        fmt::format("--port: {} is not a port (1..65535)", port));
  }
  return common::OkStatus();
}

void AddFlags(CLI::App& app, Config& config) {
  app.add_option("--tls-cert-file", config.tls_cert_file,
                 "PEM certificate (chain) the webhook serves");
  app.add_option("--tls-private-key-file", config.tls_private_key_file,
                 "PEM private key of --tls-cert-file");
  app.add_option("--port", config.port, "HTTPS port")->capture_default_str();
}

}  // namespace nvdra::webhook
