#include "common/metrics_server.h"


#include <utility>

#include <fmt/format.h>
#include <httplib.h>

#include "common/http_serving.h"
#include "common/log.h"
#include "common/process_metrics.h"

namespace nvdra::common {

namespace {

struct HostPort {
  std::string host;  // without brackets; empty: every interface
  int port = 0;
};

// Go's net.SplitHostPort rules, with a numeric port ("" counts as 0, as in
// net.Listen).
StatusOr<HostPort> SplitEndpoint(std::string_view endpoint) {
  const auto bad = [&](std::string_view why) {
    return InvalidArgumentError(fmt::format("metrics endpoint \"{}\": {}", endpoint, why));
  };
  const std::size_t colon = endpoint.rfind(':');
  if (colon == std::string_view::npos) return bad("missing port (want host:port, e.g. \":8080\")");
  std::string_view host = endpoint.substr(0, colon);
  const std::string_view port_text = endpoint.substr(colon + 1);
  if (host.starts_with('[')) {
    if (!host.ends_with(']')) return bad("unbalanced '['");
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return bad("too many colons (write an IPv6 address in brackets)");
  }
  HostPort out;
  out.host = std::string(host);
  if (port_text.size() > 5) return bad("port out of range");
  for (char c : port_text) {
    if (c < '0' || c > '9') return bad("port is not a number");
    out.port = out.port * 10 + (c - '0');
  }
  if (out.port > 65535) return bad("port out of range");
  return out;
}

}  // namespace

struct MetricsServer::State {
  State(const MetricsRegistry& r, std::string p, std::function<void()> before)
      : registry(r), path(std::move(p)), before_scrape(std::move(before)) {}
  const MetricsRegistry& registry;
  const std::string path;
  const std::function<void()> before_scrape;
  httplib::Server server;
  std::unique_ptr<HttpServing> serving;  // after the server: stops serving before it goes
};

MetricsServer::MetricsServer(std::unique_ptr<State> state) : state_(std::move(state)) {}

StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const MetricsRegistry& registry,
                                                              std::string_view endpoint, std::string_view path,
                                                              std::function<void()> before_scrape) {
  ASSIGN_OR_RETURN(HostPort where, SplitEndpoint(endpoint));
  if (!path.starts_with('/')) {
    return InvalidArgumentError(fmt::format("metrics path \"{}\" must start with '/'", path));
  }
  auto state = std::make_unique<State>(registry, std::string(path), std::move(before_scrape));
  httplib::Server& server = state->server;
  State* raw = state.get();
  // Every path is routed here (httplib patterns are regular expressions,
  // and the metrics path must match literally).
  server.Get(".*", [raw](const httplib::Request& request, httplib::Response& response) {
    if (request.path != raw->path) {
      response.status = 404;
      response.set_content("404 page not found\n", "text/plain; charset=utf-8");
      return;
    }
    if (raw->before_scrape) raw->before_scrape();
    response.set_content(raw->registry.Render(), std::string(kMetricsContentType));
  });

  // A scrape every few seconds needs no more than two workers (httplib's
  // default is one per core).
  ASSIGN_OR_RETURN(state->serving, HttpServing::Start(server, where.host, where.port, 2,
                                                      fmt::format("metrics endpoint \"{}\"", endpoint)));
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(state)));
}

MetricsServer::~MetricsServer() = default;

int MetricsServer::port() const { return state_->serving->port(); }

std::string MetricsServer::address() const { return state_->serving->address(); }

const std::string& MetricsServer::path() const { return state_->path; }

StatusOr<int> MetricsEndpointPort(std::string_view endpoint) {
  ASSIGN_OR_RETURN(HostPort where, SplitEndpoint(endpoint));
  return where.port;
}

StatusOr<std::unique_ptr<MetricsServer>> StartMetricsServerFromFlags(MetricsRegistry& registry,
                                                                     const MetricsFlags& flags) {
  if (flags.http_endpoint.empty()) return std::unique_ptr<MetricsServer>();
  auto process = std::make_shared<ProcessMetrics>(registry);
  ASSIGN_OR_RETURN(std::unique_ptr<MetricsServer> server,
                   MetricsServer::Start(registry, flags.http_endpoint, flags.metrics_path,
                                        [process] { process->Update(); }));
  LOG_INFO(0, "serving metrics", {{"address", server->address()}, {"path", server->path()}});
  return server;
}

}  // namespace nvdra::common
