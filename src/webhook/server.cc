#include "webhook/server.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>

#include "common/log.h"
#include "webhook/admission.h"

namespace nvdra::webhook {

using common::StatusOr;

namespace {

// As Go's listener: SO_REUSEADDR (a restart while old connections linger in
// TIME_WAIT) but not httplib's default SO_REUSEPORT, which would let a second
// webhook bind the same port silently; IPv6 sockets take IPv4 too.
void SetListenSocketOptions(socket_t sock) {
  int yes = 1;
  setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  int domain = 0;
  socklen_t length = sizeof(domain);
  if (getsockopt(sock, SOL_SOCKET, SO_DOMAIN, &domain, &length) == 0 && domain == AF_INET6) {
    int no = 0;
    setsockopt(sock, IPPROTO_IPV6, IPV6_V6ONLY, &no, sizeof(no));
  }
}

std::string JoinHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

}  // namespace

struct WebhookServer::State {
  State(ServingCertificate& certificate, common::MetricsRegistry& registry)
      : server([&certificate](SSL_CTX& ctx) {
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

  httplib::SSLServer server;
  common::CounterFamily requests;
  common::Histogram duration;
  std::string host;
  int port = 0;

  std::mutex mu;  // guards serving and listen_returned
  std::condition_variable cv;
  bool serving = false;
  bool listen_returned = false;
  int threads = 4;

  std::jthread thread;  // last: joined before the rest is destroyed
};

WebhookServer::WebhookServer(std::unique_ptr<State> state) : state_(std::move(state)) {}

StatusOr<std::unique_ptr<WebhookServer>> WebhookServer::Start(const ServerOptions& options,
                                                              ServingCertificate& certificate,
                                                              common::MetricsRegistry& registry) {
  auto state = std::make_unique<State>(certificate, registry);
  if (!state->server.is_valid()) return common::InternalError("cannot create the TLS context (OpenSSL)");
  State* raw = state.get();
  raw->threads = options.threads;
  httplib::Server& server = state->server;
  server.set_socket_options(SetListenSocketOptions);
  // An AdmissionReview carries the object twice on UPDATE; etcd caps one
  // object at 1.5 MiB.
  server.set_payload_max_length(std::size_t{8} << 20);
  // httplib's workers wait out an idle keep-alive connection before they
  // notice stop(), so this bounds how long shutdown waits after the last
  // request (Go's Shutdown closes idle connections at once). The API server
  // reconnects when it needs to; a handshake costs about a millisecond.
  server.set_keep_alive_timeout(1);
  // httplib writes headers and body in separate sends; without NODELAY,
  // Nagle and the peer's delayed ACK add ~40 ms to every answer.
  server.set_tcp_nodelay(true);
  // httplib asks for the task queue once it counts as running (stop() works
  // from then on): that is the "serving" event Start waits for.
  server.new_task_queue = [raw] {
    {
      std::lock_guard<std::mutex> lock(raw->mu);
      raw->serving = true;
    }
    raw->cv.notify_all();
    return new httplib::ThreadPool(static_cast<std::size_t>(raw->threads));
  };
  server.Post(std::string(kValidatePath), [raw](const httplib::Request& request, httplib::Response& response) {
    const auto started = std::chrono::steady_clock::now();
    AdmissionReply reply = ReviewAdmission(request.get_header_value("Content-Type"), request.body);
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

  std::vector<std::string> hosts;
  if (options.bind_address.empty()) {
    hosts = {"::", "0.0.0.0"};
  } else {
    hosts = {options.bind_address};
  }
  for (const std::string& host : hosts) {
    if (options.port == 0) {
      const int port = server.bind_to_any_port(host);
      if (port > 0) state->port = port;
    } else if (server.bind_to_port(host, options.port)) {
      state->port = options.port;
    }
    if (state->port > 0) {
      state->host = host;
      break;
    }
  }
  if (state->port <= 0) {
    return common::UnavailableError(fmt::format("--port {} (address \"{}\"): cannot listen (in use or not local)",
                                                options.port, options.bind_address));
  }
  state->thread = std::jthread([raw] {
    if (!raw->server.listen_after_bind()) {
      LOG_ERROR("webhook server stopped serving", {{"address", JoinHostPort(raw->host, raw->port)}});
    }
    {
      std::lock_guard<std::mutex> lock(raw->mu);
      raw->listen_returned = true;
    }
    raw->cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(raw->mu);
    raw->cv.wait(lock, [raw] { return raw->serving || raw->listen_returned; });
  }
  return std::unique_ptr<WebhookServer>(new WebhookServer(std::move(state)));
}

WebhookServer::~WebhookServer() {
  if (!state_) return;
  // As MetricsServer: httplib's stop() acts only once the server counts as
  // running; repeat it should the first one come too early.
  std::unique_lock<std::mutex> lock(state_->mu);
  while (!state_->listen_returned) {
    lock.unlock();
    state_->server.stop();
    lock.lock();
    state_->cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return state_->listen_returned; });
  }
  lock.unlock();
  state_->thread.join();
}

int WebhookServer::port() const { return state_->port; }

std::string WebhookServer::address() const { return JoinHostPort(state_->host, state_->port); }

}  // namespace nvdra::webhook
