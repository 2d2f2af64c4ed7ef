#pragma once

// Configuration of the admission webhook. Upstream's own flags
// (--tls-cert-file, --tls-private-key-file, --port) have no environment
// twins, as upstream; the common logging and feature-gate flags and our
// additions (--bind-address, the metrics endpoint) do.
// Ownership: plain values. Thread-safety: thread-compatible.

#include <string>
#include <string_view>

#include "common/flags.h"
#include "common/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace nvdra::webhook {

inline constexpr std::string_view kBinaryName = "webhook";

struct Config {
  std::string tls_cert_file;  // --tls-cert-file, required
  std::string tls_private_key_file;  // --tls-private-key-file, required
  int port = 443;  // --port
  std::string bind_address;  // --bind-address (BIND_ADDRESS); empty: every interface
  common::MetricsFlags metrics;  // --http-endpoint, --metrics-path: plain-HTTP Prometheus endpoint, off by default

  // kInvalidArgument naming the flag: a missing TLS file, a port outside
  // 1..65535, a metrics path not starting with '/'.
  [[nodiscard]] common::Status Validate() const;
};

void AddFlags(CLI::App& app, Config& config);

}  // namespace nvdra::webhook
