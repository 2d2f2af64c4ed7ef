#pragma once

// MetricsServer: serves a MetricsRegistry over HTTP for Prometheus, the
// --http-endpoint / --metrics-path endpoint of both kubelet plugins and the
// controller (upstream's RunPrometheusMetricsServer).
//
// GET (and HEAD) of exactly the metrics path answers 200 with the registry in
// text format 0.0.4; every other path answers 404.
//
// Ownership: owns the listening socket and the serving threads (cpp-httplib);
// borrows the registry, which must outlive the server. Destruction stops
// accepting, finishes requests in progress and joins the threads.
// Thread-safety: thread-safe (the accessors are immutable after Start).

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/flags.h"
#include "common/metrics.h"
#include "common/status.h"

namespace nvdra::common {

class MetricsServer {
 public:
  // Binds `endpoint` and starts serving `registry` on `path`.
  // endpoint is Go's "host:port": ":8080" (every interface: IPv6 and IPv4
  // where the node has IPv6, otherwise IPv4), "127.0.0.1:0" (port 0: any free
  // port, see port()), "[::1]:9090", "localhost:8080". path must start with
  // '/' (MetricsFlags::Validate checks the flag); it is matched exactly.
  // kInvalidArgument: a malformed endpoint or path; kUnavailable: the
  // address cannot be bound (in use, not local).
  // `before_scrape`, when set, runs before each rendering (to refresh
  // values read on demand, such as the process_* series).
  static StatusOr<std::unique_ptr<MetricsServer>> Start(const MetricsRegistry& registry, std::string_view endpoint,
                                                        std::string_view path,
                                                        std::function<void()> before_scrape = {});

  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The port bound (the one chosen when the endpoint said 0).
  int port() const;
  // Where it listens, "host:port" with the bound port ("[::]:8080",
  // "127.0.0.1:41235"), and the path served: for logs.
  std::string address() const;
  const std::string& path() const;

 private:
  struct State;
  explicit MetricsServer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// The port of a metrics endpoint in Start's syntax (":8080" -> 8080, ""
// port -> 0), parsed as Start parses it: for callers that hand an endpoint
// to another process and must name its port (the compute-domain controller's
// daemon pods). kInvalidArgument as Start for a malformed endpoint.
StatusOr<int> MetricsEndpointPort(std::string_view endpoint);

// The server the --http-endpoint and --metrics-path flags ask for, logged
// once listening, with the process_* series (process_metrics.h) added to
// `registry` and refreshed per scrape; null when --http-endpoint is empty
// (metrics off).
StatusOr<std::unique_ptr<MetricsServer>> StartMetricsServerFromFlags(MetricsRegistry& registry,
                                                                     const MetricsFlags& flags);

}  // namespace nvdra::common
