#pragma once

// Configuration of the admission webhook. As upstream, its own flags have no
// environment twins (the common logging and feature-gate flags do).
// Ownership: plain values. Thread-safety: thread-compatible.

#include <string>
#include <string_view>

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

  // kInvalidArgument naming the flag: a missing TLS file, a port outside 1..65535.
  [[nodiscard]] common::Status Validate() const;
};

void AddFlags(CLI::App& app, Config& config);

}  // namespace nvdra::webhook
