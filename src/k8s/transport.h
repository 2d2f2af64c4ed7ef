#pragma once

// HTTP transport to one API server: HttpTransport (an interface, so the
// client can be tested with a fake) and its libcurl implementation.
//
// Defines: HttpRequest, HttpResponse, HttpStream, HttpTransport,
// TransportOptions, NewCurlTransport.
//
// The curl transport drives every transfer from one owned thread through a
// curl multi handle with HTTP/2 multiplexing (CURLPIPE_MULTIPLEX and
// PIPEWAIT): concurrent requests and long-lived watches share one TLS
// connection while the server's stream limit allows, and the connection is
// reused between requests. Callers block on their own transfer only; a
// transfer is cancelled from any thread through its stop_token or
// HttpStream::Cancel, which wakes the curl thread (curl_multi_wakeup), so a
// watch waiting for data ends at once.
//
// Errors of a transfer that got no HTTP answer:
//   kUnavailable        the connection could not be made: nothing was sent,
//                       any request may be retried
//   kUnknown            the connection broke after the request may have been
//                       sent: only idempotent requests may be retried
//   kDeadlineExceeded   the request's timeout passed (outcome unknown)
//   kCancelled          cancelled by the caller or by transport shutdown
//   kFailedPrecondition TLS set-up or verification failed (configuration)
// An HTTP answer of any status is a response, not an error, at this layer.
//
// Ownership: the transport owns the curl multi handle, the connections and
// the thread; streams and in-flight calls share its core, so a stream may
// outlive the transport object. Thread-safety: HttpTransport is thread-safe;
// an HttpStream is thread-compatible except Cancel(), callable from any
// thread.

#include <chrono>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "k8s/config.h"

namespace nvdra::k8s {

struct HttpRequest {
  std::string method = "GET";
  std::string path;  // "/api/v1/namespaces/x/pods?limit=5", appended to the server URL
  std::vector<std::pair<std::string, std::string>> headers;  // besides Accept/Authorization/User-Agent
  std::string body;
  // Whole-request limit; zero means none (watches end by cancel or timeoutSeconds).
  std::chrono::milliseconds timeout{0};
};

struct HttpResponse {
  int status = 0;
  std::string body;  // empty for a stream's head
  std::string content_type;
  std::string retry_after;  // raw Retry-After header, "" when absent
  // Connection facts, for tests and diagnostics.
  long http_version = 0;     // 2 for HTTP/2, 11 for HTTP/1.1 (CURL_HTTP_VERSION_* numbering mapped)
  long local_port = 0;       // identifies the connection the transfer used
  long new_connections = 0;  // connections this transfer had to open (0: reused or multiplexed)
};

// A response body delivered as it arrives (a watch).
class HttpStream {
 public:
  virtual ~HttpStream() = default;  // cancels the transfer if still running
  // Status line and headers; body is empty.
  virtual const HttpResponse& head() const = 0;
  // The next piece of the body, in order; nullopt at its clean end. An error
  // (see the table above) when the transfer failed or was cancelled;
  // kCancelled when `stop` fires while waiting (the transfer is cancelled too).
  virtual common::StatusOr<std::optional<std::string>> Read(std::stop_token stop) = 0;
  // Ends the transfer; a blocked Read returns kCancelled promptly. Any thread.
  virtual void Cancel() = 0;
};

class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  // Sends `request` and returns the whole answer. `stop` cancels it (kCancelled).
  virtual common::StatusOr<HttpResponse> RoundTrip(const HttpRequest& request, std::stop_token stop) = 0;
  // Sends `request` and returns once the status and headers have arrived.
  virtual common::StatusOr<std::unique_ptr<HttpStream>> OpenStream(const HttpRequest& request,
                                                                   std::stop_token stop) = 0;
};

struct TransportOptions {
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(10);
  // Off only for tests that compare with HTTP/1.1.
  bool http2 = true;
};

// A curl transport for `config` (server, TLS material, token). The token
// source is consulted on every request, so rotation needs nothing more.
// kInvalidArgument when the server URL is not http(s)://host[:port];
// kInternal when curl cannot be initialised.
common::StatusOr<std::unique_ptr<HttpTransport>> NewCurlTransport(const RestConfig& config,
                                                                  const TransportOptions& options = {});

}  // namespace nvdra::k8s
