#include "k8s/transport.h"

#include <curl/curl.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <thread>

#include "common/log.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace nvdra::k8s {
namespace {

using common::Status;
using common::StatusCode;
using common::StatusOr;

struct EasyDeleter {
  void operator()(CURL* e) const { curl_easy_cleanup(e); }
};
struct MultiDeleter {
  void operator()(CURLM* m) const { curl_multi_cleanup(m); }
};
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using EasyPtr = std::unique_ptr<CURL, EasyDeleter>;
using MultiPtr = std::unique_ptr<CURLM, MultiDeleter>;
using SlistPtr = std::unique_ptr<curl_slist, SlistDeleter>;

Status CurlError(CURLcode code, const char* errbuf, const std::string& what) {
  std::string text = what + ": " + (errbuf != nullptr && errbuf[0] != '\0' ? errbuf : curl_easy_strerror(code));
  switch (code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
      return Status(StatusCode::kUnavailable, std::move(text));
    case CURLE_OPERATION_TIMEDOUT:
      return Status(StatusCode::kDeadlineExceeded, std::move(text));
    case CURLE_ABORTED_BY_CALLBACK:
      return Status(StatusCode::kCancelled, std::move(text));
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
      return Status(StatusCode::kFailedPrecondition, std::move(text));
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_HTTP3:
    case CURLE_WRITE_ERROR:
      return Status(StatusCode::kUnknown, std::move(text));
    default:
      return Status(StatusCode::kInternal, std::move(text));
  }
}

bool HeaderIs(std::string_view line, std::string_view name, std::string* value) {
  if (line.size() <= name.size() || line[name.size()] != ':') return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(line[i])) != name[i]) return false;
  }
  std::string_view v = line.substr(name.size() + 1);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
  *value = std::string(v);
  return true;
}

// One request in flight. Shared by the caller (waiting on it) and the curl
// thread (filling it) until both are done with it.
struct Transfer {
  EasyPtr easy;
  SlistPtr headers;
  std::string url;
  std::string body;  // CURLOPT_POSTFIELDS points here
  std::string method;
  bool streaming = false;
  char errbuf[CURL_ERROR_SIZE] = {};

  common::Mutex mutex;  // guards everything below
  std::condition_variable_any cv;
  HttpResponse response GUARDED_BY(mutex);
  std::deque<std::string> chunks GUARDED_BY(mutex);  // streaming body not yet read
  bool head_done GUARDED_BY(mutex) = false;
  bool done GUARDED_BY(mutex) = false;
  Status result GUARDED_BY(mutex);  // the transfer's error once done; OK for a clean end
};

void FillFacts(Transfer& t) REQUIRES(t.mutex) {
  long version = 0;
  curl_easy_getinfo(t.easy.get(), CURLINFO_HTTP_VERSION, &version);
  t.response.http_version = version == CURL_HTTP_VERSION_2_0 ? 2 : version == CURL_HTTP_VERSION_1_1 ? 11 : version;
  curl_easy_getinfo(t.easy.get(), CURLINFO_LOCAL_PORT, &t.response.local_port);
  curl_easy_getinfo(t.easy.get(), CURLINFO_NUM_CONNECTS, &t.response.new_connections);
}

std::size_t OnHeader(char* data, std::size_t size, std::size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::size_t n = size * count;
  std::string_view line(data, n);
  common::MutexLock lock(t->mutex);
  if (line == "\r\n" || line == "\n") {
    long code = 0;
    curl_easy_getinfo(t->easy.get(), CURLINFO_RESPONSE_CODE, &code);
    if (code >= 200) {  // 1xx blocks are followed by the real one
      t->response.status = static_cast<int>(code);
      FillFacts(*t);
      t->head_done = true;
      t->cv.notify_all();
    }
    return n;
  }
  if (line.starts_with("HTTP/")) {  // a new header block: forget an interim one
    t->response.content_type.clear();
    t->response.retry_after.clear();
  }
  HeaderIs(line, "content-type", &t->response.content_type);
  HeaderIs(line, "retry-after", &t->response.retry_after);
  return n;
}

std::size_t OnBody(char* data, std::size_t size, std::size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::size_t n = size * count;
  common::MutexLock lock(t->mutex);
  if (t->streaming) {
    // TODO(issue 4): pause the transfer (CURL_WRITEFUNC_PAUSE) when a slow
    // reader lets this grow; a watch of a busy kind can queue a lot here.
    t->chunks.emplace_back(data, n);
    t->cv.notify_all();
  } else {
    t->response.body.append(data, n);
  }
  return n;
}

// The curl multi handle and the thread that drives it. Shared by the
// transport and its streams, so either may go first.
class Core {
 public:
  explicit Core(MultiPtr multi) : multi_(std::move(multi)) {
    thread_ = std::jthread([this](std::stop_token stop) { Run(stop); });
  }
  ~Core() {
    thread_.request_stop();
    curl_multi_wakeup(multi_.get());
    thread_.join();  // before the handles below go
  }
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;

  // Hands `t` to the curl thread. False when the core is shutting down.
  bool Submit(std::shared_ptr<Transfer> t) {
    {
      common::MutexLock lock(mutex_);
      if (stopping_) return false;
      adds_.push_back(std::move(t));
    }
    curl_multi_wakeup(multi_.get());
    return true;
  }

  void Cancel(const std::shared_ptr<Transfer>& t) {
    {
      common::MutexLock lock(mutex_);
      cancels_.push_back(t);
    }
    curl_multi_wakeup(multi_.get());
  }

 private:
  static void Complete(Transfer& t, Status result) EXCLUDES(t.mutex) {
    common::MutexLock lock(t.mutex);
    if (t.done) return;
    if (!t.head_done) FillFacts(t);
    t.result = std::move(result);
    t.done = true;
    t.cv.notify_all();
  }

  void Run(std::stop_token stop) {
    std::vector<std::shared_ptr<Transfer>> adds, cancels;
    while (true) {
      bool stopping = false;
      {
        common::MutexLock lock(mutex_);
        if (stop.stop_requested()) stopping_ = true;
        stopping = stopping_;
        adds.swap(adds_);
        cancels.swap(cancels_);
      }
      if (stopping) break;
      for (auto& t : adds) {
        CURLMcode rc = curl_multi_add_handle(multi_.get(), t->easy.get());
        if (rc != CURLM_OK) {
          Complete(*t, common::InternalError(std::string("curl_multi_add_handle: ") + curl_multi_strerror(rc)));
          continue;
        }
        active_.emplace(t->easy.get(), t);
      }
      adds.clear();
      for (auto& t : cancels) {
        auto it = active_.find(t->easy.get());
        if (it == active_.end()) continue;  // already finished
        curl_multi_remove_handle(multi_.get(), t->easy.get());
        active_.erase(it);
        Complete(*t, common::CancelledError(t->method + " " + t->url + ": cancelled"));
      }
      cancels.clear();
      int running = 0;
      curl_multi_perform(multi_.get(), &running);
      int queued = 0;
      while (CURLMsg* msg = curl_multi_info_read(multi_.get(), &queued)) {
        if (msg->msg != CURLMSG_DONE) continue;
        auto it = active_.find(msg->easy_handle);
        if (it == active_.end()) continue;
        std::shared_ptr<Transfer> t = std::move(it->second);
        active_.erase(it);
        const CURLcode code = msg->data.result;  // msg is invalid after remove
        curl_multi_remove_handle(multi_.get(), t->easy.get());
        Complete(*t, code == CURLE_OK ? common::OkStatus() : CurlError(code, t->errbuf, t->method + " " + t->url));
      }
      // Sleeps until socket activity, a curl timer, or a wakeup (submit,
      // cancel, stop); the 1 s cap only bounds the cost of a missed wakeup.
      curl_multi_poll(multi_.get(), nullptr, 0, 1000, nullptr);
    }
    for (auto& [easy, t] : active_) {
      curl_multi_remove_handle(multi_.get(), easy);
      Complete(*t, common::CancelledError(t->method + " " + t->url + ": transport shut down"));
    }
    active_.clear();
    common::MutexLock lock(mutex_);
    for (auto& t : adds_) Complete(*t, common::CancelledError(t->method + " " + t->url + ": transport shut down"));
    adds_.clear();
  }

  MultiPtr multi_;
  common::Mutex mutex_;  // guards adds_, cancels_, stopping_
  std::vector<std::shared_ptr<Transfer>> adds_ GUARDED_BY(mutex_);
  std::vector<std::shared_ptr<Transfer>> cancels_ GUARDED_BY(mutex_);
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::map<CURL*, std::shared_ptr<Transfer>> active_;  // curl thread only
  std::jthread thread_;  // last: stops before the state above goes
};

class CurlStream final : public HttpStream {
 public:
  CurlStream(std::shared_ptr<Core> core, std::shared_ptr<Transfer> t, HttpResponse head)
      : core_(std::move(core)), t_(std::move(t)), head_(std::move(head)) {}
  ~CurlStream() override { Cancel(); }

  const HttpResponse& head() const override { return head_; }

  StatusOr<std::optional<std::string>> Read(std::stop_token stop) override {
    common::MutexLock lock(t_->mutex);
    t_->cv.wait(lock.native(), stop, [&]() REQUIRES(t_->mutex) { return !t_->chunks.empty() || t_->done; });
    if (!t_->chunks.empty()) {
      std::string chunk = std::move(t_->chunks.front());
      t_->chunks.pop_front();
      return std::optional<std::string>(std::move(chunk));
    }
    if (t_->done) {
      if (!t_->result.ok()) return t_->result;
      return std::optional<std::string>();
    }
    lock.Unlock();
    Cancel();
    return common::CancelledError(t_->method + " " + t_->url + ": read cancelled");
  }

  void Cancel() override {
    {
      common::MutexLock lock(t_->mutex);
      if (t_->done) return;
    }
    core_->Cancel(t_);
  }

 private:
  std::shared_ptr<Core> core_;
  std::shared_ptr<Transfer> t_;
  HttpResponse head_;
};

class CurlTransport final : public HttpTransport {
 public:
  CurlTransport(RestConfig config, TransportOptions options, std::string url_prefix, std::string connect_to,
                std::shared_ptr<Core> core)
      : config_(std::move(config)), options_(options), url_prefix_(std::move(url_prefix)),
        connect_to_(std::move(connect_to)), core_(std::move(core)) {
    if (!connect_to_.empty()) connect_to_list_.reset(curl_slist_append(nullptr, connect_to_.c_str()));
  }

  StatusOr<HttpResponse> RoundTrip(const HttpRequest& request, std::stop_token stop) override {
    ASSIGN_OR_RETURN(auto t, Start(request, /*streaming=*/false));
    common::MutexLock lock(t->mutex);
    if (!t->cv.wait(lock.native(), stop, [&]() REQUIRES(t->mutex) { return t->done; })) {
      lock.Unlock();
      core_->Cancel(t);
      lock.Lock();
      t->cv.wait(lock.native(), [&]() REQUIRES(t->mutex) { return t->done; });
    }
    if (!t->result.ok()) return t->result;
    return std::move(t->response);
  }

  StatusOr<std::unique_ptr<HttpStream>> OpenStream(const HttpRequest& request, std::stop_token stop) override {
    ASSIGN_OR_RETURN(auto t, Start(request, /*streaming=*/true));
    common::MutexLock lock(t->mutex);
    if (!t->cv.wait(lock.native(), stop, [&]() REQUIRES(t->mutex) { return t->head_done || t->done; })) {
      lock.Unlock();
      core_->Cancel(t);
      return common::CancelledError(request.method + " " + request.path + ": cancelled");
    }
    if (!t->head_done) return t->result.ok() ? common::UnknownError("stream ended without headers") : t->result;
    HttpResponse head = t->response;
    lock.Unlock();
    return std::unique_ptr<HttpStream>(std::make_unique<CurlStream>(core_, std::move(t), std::move(head)));
  }

 private:
  StatusOr<std::shared_ptr<Transfer>> Start(const HttpRequest& request, bool streaming) {
    auto t = std::make_shared<Transfer>();
    t->easy.reset(curl_easy_init());
    if (!t->easy) return common::InternalError("curl_easy_init failed");
    t->url = url_prefix_ + request.path;
    t->method = request.method;
    t->body = request.body;
    t->streaming = streaming;

    std::vector<std::string> lines = {"Accept: application/json", "User-Agent: " + config_.user_agent,
                                      "Expect:"};  // no 100-continue round trip on HTTP/1.1
    std::string token = config_.bearer_token;
    if (config_.token_source) {
      ASSIGN_OR_RETURN(token, config_.token_source->Token());
    }
    if (!token.empty()) lines.push_back("Authorization: Bearer " + token);
    for (const auto& [name, value] : request.headers) lines.push_back(name + ": " + value);
    for (const auto& line : lines) {
      curl_slist* next = curl_slist_append(t->headers.get(), line.c_str());
      if (next == nullptr) return common::InternalError("curl_slist_append failed");
      (void)t->headers.release();
      t->headers.reset(next);
    }
    if (common::VerbosityEnabled(7)) {
      for (const auto& [name, value] : request.headers) LOG_INFO(7, "request header", {{"name", name}, {"value", value}});
    }

    CURL* e = t->easy.get();
    curl_easy_setopt(e, CURLOPT_URL, t->url.c_str());
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers.get());
    curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &OnHeader);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &OnBody);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
    // Large lists come gzip-compressed when we offer it (APIResponseCompression).
    // Not for streams: the API server gzips watches too, flushing after each
    // event, and curl 7.88's decoder fails such a stream with CURLE_WRITE_ERROR
    // at its first event (seen against kube-apiserver 1.37).
    if (!streaming) curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, "");
    if (request.method == "GET") {
      curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else {
      curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, t->method.c_str());
      if (!t->body.empty() || request.method != "DELETE") {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, t->body.data());
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(t->body.size()));
      }
    }
    if (options_.http2) {
      curl_easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_2TLS));
      // Wait for the connection being set up to say whether it multiplexes
      // rather than opening a second one: this is what puts concurrent
      // watches on one connection.
      curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
    } else {
      curl_easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
    }
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout.count()));
    if (request.timeout.count() > 0) curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout.count()));
    // A silent peer on an idle watch is noticed by TCP keepalive (the server
    // also ends each watch after timeoutSeconds).
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 30L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 10L);

    if (connect_to_list_) curl_easy_setopt(e, CURLOPT_CONNECT_TO, connect_to_list_.get());
    if (config_.insecure_skip_tls_verify) {
      curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
      curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    } else if (!config_.ca_pem.empty()) {
      // CURL_BLOB_COPY: curl copies the bytes, so the const_casts never lead to a write.
      curl_blob ca{const_cast<char*>(config_.ca_pem.data()), config_.ca_pem.size(), CURL_BLOB_COPY};
      curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &ca);
    }
    if (!config_.client_cert_pem.empty()) {
      curl_blob cert{const_cast<char*>(config_.client_cert_pem.data()), config_.client_cert_pem.size(), CURL_BLOB_COPY};
      curl_blob key{const_cast<char*>(config_.client_key_pem.data()), config_.client_key_pem.size(), CURL_BLOB_COPY};
      curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
      curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &cert);
      curl_easy_setopt(e, CURLOPT_SSLKEYTYPE, "PEM");
      curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &key);
    }
    if (!core_->Submit(t)) return common::CancelledError("transport shut down");
    return t;
  }

  const RestConfig config_;
  const TransportOptions options_;
  const std::string url_prefix_;
  const std::string connect_to_;
  // CURLOPT_CONNECT_TO is not copied by curl; one list, built once, serves
  // every handle.
  SlistPtr connect_to_list_;
  std::shared_ptr<Core> core_;
};

}  // namespace

StatusOr<std::unique_ptr<HttpTransport>> NewCurlTransport(const RestConfig& config, const TransportOptions& options) {
  static std::once_flag init;
  std::call_once(init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });

  // server = scheme://host[:port][/prefix]
  const std::string& server = config.server;
  const auto scheme_end = server.find("://");
  if (scheme_end == std::string::npos || (server.substr(0, scheme_end) != "https" && server.substr(0, scheme_end) != "http")) {
    return common::InvalidArgumentError(config.origin + ": server \"" + server + "\": not an http(s) URL");
  }
  const std::string scheme = server.substr(0, scheme_end);
  const auto host_start = scheme_end + 3;
  const auto path_start = server.find('/', host_start);
  const std::string authority = server.substr(host_start, path_start == std::string::npos ? std::string::npos : path_start - host_start);
  const std::string prefix_path = path_start == std::string::npos ? "" : server.substr(path_start);
  std::string host = authority, port = scheme == "https" ? "443" : "80";
  const auto colon = authority.rfind(':');
  if (colon != std::string::npos && authority.find(']', colon) == std::string::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty()) return common::InvalidArgumentError(config.origin + ": server \"" + server + "\": no host");

  std::string url_prefix = server;
  std::string connect_to;
  if (!config.tls_server_name.empty()) {
    // curl verifies (and sends SNI for) the URL's host name, so the URL names
    // tls-server-name and CONNECT_TO sends the connection to the real host.
    url_prefix = scheme + "://" + config.tls_server_name + ":" + port + prefix_path;
    std::string connect_host = host;
    if (connect_host.size() > 1 && connect_host.front() == '[') connect_host = connect_host.substr(1, connect_host.size() - 2);
    connect_to = config.tls_server_name + ":" + port + ":" + connect_host + ":" + port;
  }

  MultiPtr multi(curl_multi_init());
  if (!multi) return common::InternalError("curl_multi_init failed");
  curl_multi_setopt(multi.get(), CURLMOPT_PIPELINING, static_cast<long>(CURLPIPE_MULTIPLEX));
  auto core = std::make_shared<Core>(std::move(multi));
  return std::unique_ptr<HttpTransport>(
      std::make_unique<CurlTransport>(config, options, std::move(url_prefix), std::move(connect_to), std::move(core)));
}

}  // namespace nvdra::k8s
