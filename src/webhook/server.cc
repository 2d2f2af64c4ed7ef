#include "webhook/server.h"


#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <utility>

#include <fmt/format.h>
#include <httplib.h>

#include "common/http_serving.h"
#include "common/log.h"
#include "webhook/admission.h"

namespace nvdra::webhook {

using common::StatusOr;

struct WebhookServer::State {
  State(ServingCertificate& certificate, common::MetricsRegistry& registry, common::FeatureGates gates_in)
      : gates(std::move(gates_in)),
        server([&certificate](SSL_CTX& ctx) {
          certificate.Attach(ctx);
          return true;
        }),
        requests(registry.AddCounter("nvdra_webhook_admission_requests_total",
                                     "Admission requests answered, by resource and result (allowed, denied, "
                                     "bad_object: the object could not be read, bad_request: not an "
                                     "AdmissionReview).",
                                     {"resource", "result"})),
        duration(registry.AddHistogram("nvdra_webhook_admission_duration_seconds",
                                       "Time to review one admission request, in seconds.", {},
                                       common::ExponentialBuckets(0.0001, 4, 8))
                     .WithLabels({})) {}

  const common::FeatureGates gates;
  // One large body reviewed at a time: its JSON tree is several times its
  // size, and the bodies already held by the other workers are bounded.
  std::mutex large_review;
  httplib::SSLServer server;
  common::CounterFamily requests;
  common::Histogram duration;
  std::unique_ptr<common::HttpServing> serving;  // last: stops serving before the rest goes
};

WebhookServer::WebhookServer(std::unique_ptr<State> state) : state_(std::move(state)) {}

StatusOr<std::unique_ptr<WebhookServer>> WebhookServer::Start(const ServerOptions& options,
                                                              ServingCertificate& certificate,
                                                              common::MetricsRegistry& registry) {
  auto state = std::make_unique<State>(certificate, registry, options.gates);
  if (!state->server.is_valid()) return common::InternalError("cannot create the TLS context (OpenSSL)");
  State* raw = state.get();
  httplib::Server& server = state->server;
  // An AdmissionReview carries the object twice on UPDATE; etcd caps one
  // object at 1.5 MiB. Anything larger is refused with 413 before it is read.
  server.set_payload_max_length(kMaxBodyBytes);
  // httplib's workers wait out an idle keep-alive connection before they
  // notice stop(), so this bounds how long shutdown waits after the last
  // request (Go's Shutdown closes idle connections at once). The API server
  // reconnects when it needs to; a handshake costs about a millisecond.
  server.set_keep_alive_timeout(1);
  server.set_read_timeout(kReadTimeoutSeconds, 0);
  // httplib writes headers and body in separate sends; without NODELAY,
  // Nagle and the peer's delayed ACK add ~40 ms to every answer.
  server.set_tcp_nodelay(true);
  server.Post(std::string(kValidatePath), [raw](const httplib::Request& request, httplib::Response& response,
                                                 const httplib::ContentReader& content) {
    // The body is read here, not by httplib before the handler: a large one
    // (or one of unknown length) waits for the large-review lock first, so
    // the many threads hold at most one large body and its tree at a time.
    const std::string length_header = request.get_header_value("Content-Length");
    const std::size_t length = length_header.empty() ? kMaxBodyBytes : std::strtoull(length_header.c_str(), nullptr, 10);
    std::unique_lock<std::mutex> large;
    if (length > kLargeBodyBytes) large = std::unique_lock(raw->large_review);
    std::string body;
    body.reserve(std::min(length, kMaxBodyBytes));
    if (!content([&body](const char* data, std::size_t size) {
          body.append(data, size);
          return true;
        })) {
      // httplib set 413 for a body over kMaxBodyBytes; otherwise the client
      // stopped sending.
      if (response.status < 400) response.status = 400;
      return;
    }
    const auto started = std::chrono::steady_clock::now();
    AdmissionReply reply = ReviewAdmission(request.get_header_value("Content-Type"), body, raw->gates);
    body = std::string();
    if (large.owns_lock()) {
      // The tree's many small blocks came from the heap: give the pages
      // back now rather than keep the peak for the life of the process.
      malloc_trim(0);
      large.unlock();
    }
    raw->duration.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
    raw->requests.WithLabels({reply.resource, std::string(AdmissionOutcomeName(reply.outcome))}).Inc();
    switch (reply.outcome) {
      case AdmissionOutcome::kAllowed:
        LOG_INFO(4, "admitted", {{"resource", reply.resource}});
        break;
      case AdmissionOutcome::kDenied:
        LOG_INFO(2, "denied", {{"resource", reply.resource}, {"reason", reply.message}});
        break;
      case AdmissionOutcome::kBadObject:
      case AdmissionOutcome::kBadRequest:
        LOG_WARNING("bad admission request", {{"status", reply.http_status}, {"reason", reply.message}});
        break;
    }
    response.status = reply.http_status;
    response.set_content(std::move(reply.body), reply.content_type);
  });
  const auto ok = [](const httplib::Request&, httplib::Response& response) {
    response.set_content("ok", "text/plain; charset=utf-8");
  };
  server.Get("/readyz", ok);
  server.Get("/healthz", ok);

  ASSIGN_OR_RETURN(state->serving,
                   common::HttpServing::Start(server, options.bind_address, options.port,
                                              static_cast<std::size_t>(options.threads),
                                              fmt::format("--port {} (address \"{}\")", options.port,
                                                          options.bind_address)));
  return std::unique_ptr<WebhookServer>(new WebhookServer(std::move(state)));
}

WebhookServer::~WebhookServer() = default;

int WebhookServer::port() const { return state_->serving->port(); }

std::string WebhookServer::address() const { return state_->serving->address(); }

}  // namespace nvdra::webhook
