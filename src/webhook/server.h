#pragma once

// WebhookServer: the HTTPS endpoint the API server calls. Serves
//   POST kValidatePath   AdmissionReview in, AdmissionReview out (admission.h)
//   GET  /readyz, /healthz   "ok" (upstream's probes use /readyz)
// with the certificate a ServingCertificate provides, and counts admissions
// in the metrics registry (nvdra_webhook_admission_requests_total by resource
// and result, nvdra_webhook_admission_duration_seconds).
//
// Ownership: owns the listening socket and the serving threads (cpp-httplib);
// borrows the certificate and the registry, which must outlive it.
// Destruction stops accepting, finishes the requests in progress and joins
// the threads (graceful shutdown on SIGTERM).
// Thread-safety: thread-safe (the accessors are immutable after Start).

#include <cstddef>
#include <memory>
#include <string>

#include "common/feature_gates.h"
#include "common/metrics.h"
#include "common/status.h"
#include "webhook/serving_certificate.h"

namespace nvdra::webhook {

// The largest request body read: an AdmissionReview carries the object twice
// (UPDATE), and etcd caps one object at 1.5 MiB. Larger bodies get 413.
inline constexpr std::size_t kMaxBodyBytes = std::size_t{4} << 20;
// Bodies above this are reviewed one at a time (their JSON tree is several
// times their size), so memory stays bounded under many large requests.
inline constexpr std::size_t kLargeBodyBytes = std::size_t{64} << 10;

// How long a connection may leave the server waiting for its next bytes
// (TLS handshake, request line, headers, body). The API server sends a review
// at once; a client this slow is holding a thread.
inline constexpr int kReadTimeoutSeconds = 2;

struct ServerOptions {
  // Address to listen on; empty: every interface (IPv6 and IPv4), as Go's ":port".
  std::string bind_address;
  int port = 443;  // 0: any free port (see WebhookServer::port())
  // Connections served at once. cpp-httplib gives each connection a thread
  // from the TLS handshake on, so an idle or slow connection holds one until
  // kReadTimeout passes: with 4 threads, 100 idle connections kept /readyz
  // and every admission waiting for minutes. Idle threads cost no memory
  // beyond their untouched stacks, and only one large body (kLargeBodyBytes)
  // is read and reviewed at a time.
  int threads = 256;
  // The driver's feature gates: a sharing strategy whose gate is off is
  // denied, as the plugins refuse it at Prepare.
  common::FeatureGates gates = common::FeatureGates::Defaults();
};

class WebhookServer {
 public:
  // Binds and starts serving. kUnavailable when the address cannot be bound
  // (in use, not local); kInternal when the TLS context cannot be created.
  static common::StatusOr<std::unique_ptr<WebhookServer>> Start(const ServerOptions& options,
                                                                ServingCertificate& certificate,
                                                                common::MetricsRegistry& registry);
  ~WebhookServer();
  WebhookServer(const WebhookServer&) = delete;
  WebhookServer& operator=(const WebhookServer&) = delete;

  int port() const;             // the bound port
  std::string address() const;  // "host:port" as bound, for logs

  struct State;

 private:
  explicit WebhookServer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace nvdra::webhook
