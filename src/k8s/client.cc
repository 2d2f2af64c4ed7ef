#include "k8s/client.h"

#include <algorithm>
#include <cstdio>

#include "common/json_fields.h"
#include "common/log.h"

namespace nvdra::k8s {

using common::Status;
using common::StatusCode;
using common::StatusOr;
using nlohmann::json;

namespace {

using Query = std::vector<std::pair<std::string, std::string>>;

void AddIf(Query& q, const char* key, const std::string& value) {
  if (!value.empty()) q.emplace_back(key, value);
}

std::string BuildPath(const RestRequest& r) {
  std::string path = r.path;
  char sep = '?';
  for (const auto& [k, v] : r.query) {
    path += sep;
    path += UrlEncode(k) + "=" + UrlEncode(v);
    sep = '&';
  }
  return path;
}

std::string_view ContentType(PatchType type) {
  switch (type) {
    case PatchType::kJson: return "application/json-patch+json";
    case PatchType::kMerge: return "application/merge-patch+json";
    case PatchType::kStrategicMerge: return "application/strategic-merge-patch+json";
    case PatchType::kApply: return "application/apply-patch+yaml";
  }
  return "application/json";
}

std::string NameOf(const json& object) { return common::JsonString(object, {"metadata", "name"}); }

void AddWriteQuery(Query& q, const WriteOptions& o) {
  AddIf(q, "fieldManager", o.field_manager);
  if (o.dry_run) q.emplace_back("dryRun", "All");
}

}  // namespace

std::string UrlEncode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char raw : text) {
    const auto c = static_cast<unsigned char>(raw);
    if (std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

std::string ResourceRef::ApiPrefix() const {
  return group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
}

std::string ResourceRef::Path(std::string_view ns, std::string_view name, std::string_view subresource) const {
  std::string path = ApiPrefix();
  if (namespaced && !ns.empty()) path += "/namespaces/" + UrlEncode(ns);
  path += "/" + resource;
  if (!name.empty()) path += "/" + UrlEncode(name);
  if (!name.empty() && !subresource.empty()) path += "/" + std::string(subresource);
  return path;
}

std::string ResourceRef::Name() const { return group.empty() ? resource : resource + "." + group; }

StatusOr<std::unique_ptr<Client>> Client::New(const RestConfig& config, ClientOptions options) {
  ASSIGN_OR_RETURN(auto transport, NewCurlTransport(config, options.transport));
  return std::make_unique<Client>(config, std::move(transport), options);
}

Client::Client(RestConfig config, std::unique_ptr<HttpTransport> transport, ClientOptions options)
    : config_(std::move(config)), options_(options), transport_(std::move(transport)),
      limiter_(config_.qps, config_.burst, *options_.clock) {}

Client::~Client() = default;

ClientStats Client::stats() const {
  return {attempts_.load(std::memory_order_relaxed), throttle_retries_.load(std::memory_order_relaxed),
          transport_retries_.load(std::memory_order_relaxed)};
}

struct Client::Attempts {
  explicit Attempts(std::string what) : context(std::move(what)) {}
  std::string context;
  int transport_failures = 0;
  int throttled = 0;
  std::optional<workqueue::Backoff> backoff;  // made on the first failure: it seeds an RNG
};

Status Client::RetryAfterTransportError(Attempts& a, const Status& error, bool safe, std::stop_token stop) {
  if (!safe || a.transport_failures >= options_.max_transport_retries) return error;
  ++a.transport_failures;
  transport_retries_.fetch_add(1, std::memory_order_relaxed);
  if (!a.backoff) a.backoff.emplace(options_.retry_backoff);
  workqueue::Clock& clock = *options_.clock;
  if (!workqueue::SleepUntil(clock, clock.Now() + a.backoff->Next(), stop)) {
    return common::CancelledError(a.context + ": cancelled during retry backoff");
  }
  return common::OkStatus();
}

Status Client::RetryAfterThrottle(Attempts& a, const ApiError& error, bool idempotent, std::stop_token stop) {
  // 429: API Priority and Fairness rejected the request before running it,
  // so any verb may be sent again. A 5xx with Retry-After (a server starting
  // or shedding load) may have run part-way: idempotent requests only.
  const bool throttle =
      error.http_code == 429 || (error.http_code >= 500 && error.retry_after.has_value() && idempotent);
  if (!throttle || a.throttled >= options_.max_throttle_retries) return error.ToStatus(a.context);
  ++a.throttled;
  throttle_retries_.fetch_add(1, std::memory_order_relaxed);
  const auto delay = std::min<workqueue::Duration>(error.retry_after.value_or(std::chrono::seconds(1)),
                                                   options_.max_retry_after);
  LOG_INFO(4, "throttled, retrying",
           {{"request", a.context}, {"status", error.http_code},
            {"retry_after_ms", std::chrono::duration_cast<std::chrono::milliseconds>(delay).count()},
            {"attempt", a.throttled}});
  workqueue::Clock& clock = *options_.clock;
  if (!workqueue::SleepUntil(clock, clock.Now() + delay, stop)) {
    return common::CancelledError(a.context + ": cancelled during Retry-After wait");
  }
  return common::OkStatus();
}

ApiResult<HttpResponse> Client::Do(const RestRequest& request, std::stop_token stop) {
  HttpRequest http;
  http.method = request.method;
  http.path = BuildPath(request);
  http.body = request.body;
  http.timeout = options_.request_timeout;
  if (!request.content_type.empty()) http.headers.emplace_back("Content-Type", request.content_type);
  Attempts attempts{request.method + " " + request.path};
  while (true) {
    RETURN_IF_ERROR(limiter_.Acquire(stop).WithContext(attempts.context));
    const auto started = std::chrono::steady_clock::now();
    attempts_.fetch_add(1, std::memory_order_relaxed);
    StatusOr<HttpResponse> response = transport_->RoundTrip(http, stop);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
    if (!response.ok()) {
      const Status& s = response.status();
      LOG_INFO(6, "request failed", {{"verb", request.method}, {"path", http.path}, {"ms", ms.count()}, {"err", s}});
      // kUnavailable: the connection was never made, so nothing ran on the
      // server. kUnknown/kDeadlineExceeded: it may have run.
      const bool safe = s.code() == StatusCode::kUnavailable ||
                        (request.idempotent && (s.code() == StatusCode::kUnknown ||
                                                s.code() == StatusCode::kDeadlineExceeded));
      RETURN_IF_ERROR(RetryAfterTransportError(attempts, s, safe, stop));
      continue;
    }
    LOG_INFO(6, "request", {{"verb", request.method}, {"path", http.path}, {"status", response->status},
                            {"ms", ms.count()}, {"http", response->http_version}});
    if (common::VerbosityEnabled(8)) {
      LOG_INFO(8, "request body", {{"body", request.body}});
      LOG_INFO(8, "response body", {{"body", response->body}});
    }
    if (response->status >= 200 && response->status < 300) return *std::move(response);

    ApiError error = ApiErrorFromResponse(response->status, response->body, response->retry_after);
    Status retry = RetryAfterThrottle(attempts, error, request.idempotent, stop);
    if (retry.ok()) continue;
    if (retry.code() == StatusCode::kCancelled) return retry;
    return ApiResult<HttpResponse>(std::move(error), attempts.context);
  }
}

ApiResult<json> Client::DoJson(const RestRequest& request, std::stop_token stop) {
  ApiResult<HttpResponse> response = Do(request, stop);
  if (!response.ok()) {
    if (response.api_error()) return ApiResult<json>(*response.api_error(), request.method + " " + request.path);
    return response.status();
  }
  if (response->body.empty()) return json::object();
  json parsed = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return common::DataLossError(request.method + " " + request.path + ": response is not JSON (" +
                                 response->content_type + ")");
  }
  return parsed;
}

ApiResult<json> Client::Get(const ResourceRef& ref, std::string_view ns, std::string_view name,
                            const GetOptions& options, std::stop_token stop) {
  RestRequest r;
  r.path = ref.Path(ns, name);
  AddIf(r.query, "resourceVersion", options.resource_version);
  return DoJson(r, stop);
}

ApiResult<json> Client::List(const ResourceRef& ref, std::string_view ns, const ListOptions& options,
                             std::stop_token stop) {
  RestRequest r;
  r.path = ref.Path(ns);
  AddIf(r.query, "labelSelector", options.label_selector);
  AddIf(r.query, "fieldSelector", options.field_selector);
  if (options.limit > 0) r.query.emplace_back("limit", std::to_string(options.limit));
  AddIf(r.query, "continue", options.continue_token);
  AddIf(r.query, "resourceVersion", options.resource_version);
  AddIf(r.query, "resourceVersionMatch", options.resource_version_match);
  if (options.timeout_seconds) r.query.emplace_back("timeoutSeconds", std::to_string(*options.timeout_seconds));
  return DoJson(r, stop);
}

ApiResult<json> Client::ListAll(const ResourceRef& ref, std::string_view ns, ListOptions options,
                                std::stop_token stop) {
  if (options.limit <= 0) options.limit = 500;
  json all;
  while (true) {
    ApiResult<json> page = List(ref, ns, options, stop);
    if (!page.ok()) return page;
    std::string next;
    if (auto meta = page->find("metadata"); meta != page->end() && meta->is_object()) {
      next = meta->value("continue", std::string());
    }
    if (all.is_null()) {
      all = *std::move(page);
      if (!all.contains("items") || !all["items"].is_array()) all["items"] = json::array();
    } else if (auto items = page->find("items"); items != page->end() && items->is_array()) {
      auto& into = all["items"];
      for (auto& item : *items) into.push_back(std::move(item));
    }
    if (next.empty()) break;
    // Later pages come from the first page's snapshot; RV options must not
    // be repeated with a continue token.
    options.continue_token = next;
    options.resource_version.clear();
    options.resource_version_match.clear();
  }
  if (all.contains("metadata") && all["metadata"].is_object()) all["metadata"].erase("continue");
  return all;
}

ApiResult<json> Client::Create(const ResourceRef& ref, std::string_view ns, const json& object,
                               const WriteOptions& options, std::stop_token stop) {
  RestRequest r;
  r.method = "POST";
  r.path = options.subresource.empty() ? ref.Path(ns) : ref.Path(ns, NameOf(object), options.subresource);
  AddWriteQuery(r.query, options);
  r.body = object.dump();
  r.content_type = "application/json";
  r.idempotent = false;  // a replay could create twice (generateName) or answer AlreadyExists
  return DoJson(r, stop);
}

ApiResult<json> Client::Update(const ResourceRef& ref, std::string_view ns, const json& object,
                               const WriteOptions& options, std::stop_token stop) {
  const std::string name = NameOf(object);
  if (name.empty()) return common::InvalidArgumentError("update " + ref.Name() + ": metadata.name is empty");
  RestRequest r;
  r.method = "PUT";
  r.path = ref.Path(ns, name, options.subresource);
  AddWriteQuery(r.query, options);
  r.body = object.dump();
  r.content_type = "application/json";
  return DoJson(r, stop);
}

ApiResult<json> Client::Delete(const ResourceRef& ref, std::string_view ns, std::string_view name,
                               const DeleteOptions& options, std::stop_token stop) {
  RestRequest r;
  r.method = "DELETE";
  r.path = ref.Path(ns, name);
  json body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
  if (options.precondition_uid) body["preconditions"]["uid"] = *options.precondition_uid;
  if (options.precondition_resource_version) {
    body["preconditions"]["resourceVersion"] = *options.precondition_resource_version;
  }
  if (!options.propagation_policy.empty()) body["propagationPolicy"] = options.propagation_policy;
  if (options.grace_period_seconds) body["gracePeriodSeconds"] = *options.grace_period_seconds;
  if (options.dry_run) body["dryRun"] = json::array({"All"});
  r.body = body.dump();
  r.content_type = "application/json";
  return DoJson(r, stop);
}

ApiResult<json> Client::Patch(const ResourceRef& ref, std::string_view ns, std::string_view name, PatchType type,
                              const json& patch, const PatchOptions& options, std::stop_token stop) {
  if (type == PatchType::kApply && options.field_manager.empty()) {
    return common::InvalidArgumentError("apply " + ref.Name() + " " + std::string(name) +
                                        ": field_manager is required");
  }
  RestRequest r;
  r.method = "PATCH";
  r.path = ref.Path(ns, name, options.subresource);
  AddIf(r.query, "fieldManager", options.field_manager);
  if (options.force) r.query.emplace_back("force", "true");
  if (options.dry_run) r.query.emplace_back("dryRun", "All");
  r.body = patch.dump();
  r.content_type = std::string(ContentType(type));
  // A JSON patch may append to a list: applying it twice differs from once.
  r.idempotent = type != PatchType::kJson;
  return DoJson(r, stop);
}

ApiResult<json> Client::Apply(const ResourceRef& ref, std::string_view ns, const json& intent,
                              const PatchOptions& options, std::stop_token stop) {
  const std::string name = NameOf(intent);
  if (name.empty()) return common::InvalidArgumentError("apply " + ref.Name() + ": metadata.name is empty");
  return Patch(ref, ns, name, PatchType::kApply, intent, options, stop);
}

ApiResult<std::unique_ptr<WatchStream>> Client::Watch(const ResourceRef& ref, std::string_view ns,
                                                      const WatchOptions& options, std::stop_token stop) {
  RestRequest r;
  r.path = ref.Path(ns);
  r.query.emplace_back("watch", "1");
  AddIf(r.query, "resourceVersion", options.resource_version);
  AddIf(r.query, "labelSelector", options.label_selector);
  AddIf(r.query, "fieldSelector", options.field_selector);
  if (options.allow_bookmarks) r.query.emplace_back("allowWatchBookmarks", "true");
  if (options.timeout_seconds) r.query.emplace_back("timeoutSeconds", std::to_string(*options.timeout_seconds));
  if (options.send_initial_events) {
    r.query.emplace_back("sendInitialEvents", "true");
    r.query.emplace_back("resourceVersionMatch", "NotOlderThan");
  }
  Attempts attempts{"watch " + r.path};
  HttpRequest http;
  http.path = BuildPath(r);
  while (true) {
    RETURN_IF_ERROR(limiter_.Acquire(stop).WithContext(attempts.context));
    attempts_.fetch_add(1, std::memory_order_relaxed);
    StatusOr<std::unique_ptr<HttpStream>> stream = transport_->OpenStream(http, stop);
    if (!stream.ok()) {
      // Opening a watch changes nothing on the server: always safe to retry.
      const StatusCode code = stream.status().code();
      const bool safe = code == StatusCode::kUnavailable || code == StatusCode::kUnknown;
      RETURN_IF_ERROR(RetryAfterTransportError(attempts, stream.status(), safe, stop));
      continue;
    }
    const HttpResponse& head = (*stream)->head();
    LOG_INFO(6, "watch", {{"path", http.path}, {"status", head.status}, {"http", head.http_version}});
    if (head.status == 200) return std::make_unique<WatchStream>(*std::move(stream), attempts.context);
    // An error answer: read its (short) body for the Status.
    std::string body;
    while (true) {
      auto chunk = (*stream)->Read(stop);
      if (!chunk.ok() || !chunk->has_value()) break;
      body += **chunk;
    }
    ApiError error = ApiErrorFromResponse(head.status, body, head.retry_after);
    Status retry = RetryAfterThrottle(attempts, error, /*idempotent=*/true, stop);
    if (retry.ok()) continue;
    if (retry.code() == StatusCode::kCancelled) return retry;
    return ApiResult<std::unique_ptr<WatchStream>>(std::move(error), attempts.context);
  }
}

}  // namespace nvdra::k8s
