#pragma once

// The REST client for the Kubernetes API: get, list (paged), create, update,
// delete, patch (JSON, merge, strategic merge), server-side apply, watch,
// subresources, for any group/version/resource, CRDs included.
//
// Defines: ResourceRef (and well-known refs in namespace `resources`),
// ListOptions, GetOptions, WriteOptions, DeleteOptions, PatchType,
// PatchOptions, RestRequest, ClientOptions, Client.
//
// Objects are nlohmann::json, so fields this code does not know survive a
// read-modify-write untouched; typed accessors will be thin views over it.
// Failed calls return ApiResult: a Status per the table in api_error.h plus
// the server's ApiError (reason, details, Retry-After).
//
// Flow control inside every call: a token bucket (config qps/burst) before
// each attempt; HTTP 429 is retried after its Retry-After (any verb: the
// server rejected it before running it), bounded by max_throttle_retries;
// transport errors are retried with jittered backoff when safe: a failed
// connect always, a broken connection only for idempotent requests (GET,
// PUT, DELETE, merge/strategic/apply PATCH, not POST or JSON patch).
//
// Ownership: owns its transport and rate limiter; borrows the clock in
// ClientOptions. WatchStreams it returns may outlive it.
// Thread-safety: thread-safe; share one Client per process and config.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "k8s/api_error.h"
#include "k8s/config.h"
#include "k8s/flow_control.h"
#include "k8s/transport.h"
#include "k8s/watch.h"
#include "k8s/workqueue/backoff.h"
#include "k8s/workqueue/clock.h"

namespace nvdra::k8s {

// A kind of object by its REST coordinates.
struct ResourceRef {
  std::string group;     // "" for the core group
  std::string version;   // "v1"
  std::string resource;  // plural, lower case: "configmaps"
  bool namespaced = true;

  // "/api/v1" or "/apis/<group>/<version>".
  std::string ApiPrefix() const;
  // The path of the collection (`name` empty) or of one object, or of its
  // `subresource`. For a namespaced kind an empty `ns` means all namespaces
  // (lists and watches only); `ns` is ignored for cluster-scoped kinds.
  std::string Path(std::string_view ns, std::string_view name = "", std::string_view subresource = "") const;
  // "configmaps" or "resourceslices.resource.k8s.io", for messages.
  std::string Name() const;
};

namespace resources {
inline const ResourceRef kNamespaces{"", "v1", "namespaces", false};
inline const ResourceRef kNodes{"", "v1", "nodes", false};
inline const ResourceRef kPods{"", "v1", "pods", true};
inline const ResourceRef kConfigMaps{"", "v1", "configmaps", true};
inline const ResourceRef kSecrets{"", "v1", "secrets", true};
inline const ResourceRef kServiceAccounts{"", "v1", "serviceaccounts", true};
inline const ResourceRef kEvents{"events.k8s.io", "v1", "events", true};
inline const ResourceRef kLeases{"coordination.k8s.io", "v1", "leases", true};
inline const ResourceRef kDaemonSets{"apps", "v1", "daemonsets", true};
inline const ResourceRef kDeployments{"apps", "v1", "deployments", true};
inline const ResourceRef kResourceSlices{"resource.k8s.io", "v1", "resourceslices", false};
inline const ResourceRef kResourceClaims{"resource.k8s.io", "v1", "resourceclaims", true};
inline const ResourceRef kResourceClaimTemplates{"resource.k8s.io", "v1", "resourceclaimtemplates", true};
inline const ResourceRef kDeviceClasses{"resource.k8s.io", "v1", "deviceclasses", false};
// The driver's CRDs (resource.nvidia.com/v1beta1).
inline const ResourceRef kComputeDomains{"resource.nvidia.com", "v1beta1", "computedomains", true};
inline const ResourceRef kComputeDomainCliques{"resource.nvidia.com", "v1beta1", "computedomaincliques", true};
inline const ResourceRef kCustomResourceDefinitions{"apiextensions.k8s.io", "v1", "customresourcedefinitions",
                                                    false};
}  // namespace resources

struct GetOptions {
  std::string resource_version;  // "" = the latest (quorum read); "0" = any cached version
};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  std::int64_t limit = 0;       // page size; 0 = no paging
  std::string continue_token;   // from the previous page's metadata.continue
  std::string resource_version;
  std::string resource_version_match;  // "NotOlderThan" or "Exact" (needs resource_version)
  std::optional<int> timeout_seconds;
};

// Create and update.
struct WriteOptions {
  std::string field_manager;
  bool dry_run = false;
  std::string subresource;  // "status", "scale", ...
};

struct DeleteOptions {
  std::optional<std::string> precondition_uid;
  std::optional<std::string> precondition_resource_version;
  std::string propagation_policy;  // "Background", "Foreground", "Orphan"; "" = the kind's default
  std::optional<std::int64_t> grace_period_seconds;
  bool dry_run = false;
};

enum class PatchType {
  kJson,            // RFC 6902, application/json-patch+json
  kMerge,           // RFC 7386, application/merge-patch+json
  kStrategicMerge,  // built-in kinds only, application/strategic-merge-patch+json
  kApply,           // server-side apply, application/apply-patch+yaml (JSON is YAML)
};

struct PatchOptions {
  std::string field_manager;  // required for kApply
  bool force = false;         // kApply: take fields owned by other managers
  std::string subresource;
  bool dry_run = false;
};

// A raw request for Client::Do: anything the typed calls do not cover.
struct RestRequest {
  std::string method = "GET";
  std::string path;  // without the query
  std::vector<std::pair<std::string, std::string>> query;  // encoded by Do
  std::string body;
  std::string content_type;  // for a body
  bool idempotent = true;    // may be replayed after a broken connection
};

struct ClientOptions {
  TransportOptions transport;
  // Total limit of one non-watch request; a large list can take a while.
  std::chrono::milliseconds request_timeout = std::chrono::seconds(60);
  // Backoff between retries after transport errors, and how many.
  workqueue::BackoffOptions retry_backoff{std::chrono::milliseconds(200), std::chrono::seconds(5), 2.0, 0.5};
  int max_transport_retries = 4;
  int max_throttle_retries = 10;  // 429 (and 5xx with Retry-After on idempotent requests)
  std::chrono::seconds max_retry_after = std::chrono::seconds(30);  // longer asks are capped
  workqueue::Clock* clock = &workqueue::RealClock();  // rate limiter and retry waits
};

// Counters since the client was made, for metrics and tests.
struct ClientStats {
  std::uint64_t attempts = 0;           // requests sent, retries included
  std::uint64_t throttle_retries = 0;   // waits for Retry-After (429, 5xx)
  std::uint64_t transport_retries = 0;  // waits after a transport error
};

class Client {
 public:
  // A client with a curl transport for `config`. Errors from NewCurlTransport.
  static common::StatusOr<std::unique_ptr<Client>> New(const RestConfig& config, ClientOptions options = {});
  // A client over any transport (tests use a fake).
  Client(RestConfig config, std::unique_ptr<HttpTransport> transport, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const RestConfig& config() const { return config_; }
  ClientStats stats() const;

  // Every call below: `stop` cancels it (kCancelled), including waits for the
  // rate limiter and retries; errors per api_error.h.

  // The object, kNotFound when absent.
  ApiResult<nlohmann::json> Get(const ResourceRef& ref, std::string_view ns, std::string_view name,
                                const GetOptions& options = {}, std::stop_token stop = {});
  // One page: the List object (items, metadata.continue, metadata.resourceVersion).
  // Items of built-in kinds carry no apiVersion/kind. kOutOfRange (IsGone)
  // when a continue token expired: list again from the start.
  ApiResult<nlohmann::json> List(const ResourceRef& ref, std::string_view ns, const ListOptions& options = {},
                                 std::stop_token stop = {});
  // Every page (options.limit per page, 500 when 0) merged into one List
  // whose metadata.resourceVersion is the snapshot's, to watch from.
  ApiResult<nlohmann::json> ListAll(const ResourceRef& ref, std::string_view ns, ListOptions options = {},
                                    std::stop_token stop = {});
  // The created object. kAlreadyExists when the name is taken.
  ApiResult<nlohmann::json> Create(const ResourceRef& ref, std::string_view ns, const nlohmann::json& object,
                                   const WriteOptions& options = {}, std::stop_token stop = {});
  // PUT of `object` (named by its metadata.name). With metadata.resourceVersion
  // set, a stale version is kAborted (IsConflict): re-read and retry, see
  // RetryOnConflict.
  ApiResult<nlohmann::json> Update(const ResourceRef& ref, std::string_view ns, const nlohmann::json& object,
                                   const WriteOptions& options = {}, std::stop_token stop = {});
  // The server's answer: the object while finalizers or grace keep it, else a
  // Status. kNotFound when absent; kAborted when a precondition fails.
  ApiResult<nlohmann::json> Delete(const ResourceRef& ref, std::string_view ns, std::string_view name,
                                   const DeleteOptions& options = {}, std::stop_token stop = {});
  // The patched object. `patch` is the body, already in `type`'s format.
  ApiResult<nlohmann::json> Patch(const ResourceRef& ref, std::string_view ns, std::string_view name,
                                  PatchType type, const nlohmann::json& patch, const PatchOptions& options = {},
                                  std::stop_token stop = {});
  // Server-side apply of `intent` (apiVersion, kind, metadata.name, the fields
  // this manager owns). Without force, a field owned by another manager is
  // kAborted (IsConflict) listing the managers. kInvalidArgument when
  // field_manager is empty.
  ApiResult<nlohmann::json> Apply(const ResourceRef& ref, std::string_view ns, const nlohmann::json& intent,
                                  const PatchOptions& options, std::stop_token stop = {});
  // Opens a watch; returns once the server accepted it (an HTTP error, a 410
  // for instance, comes back here as a Status). The stream has no deadline:
  // end it with WatchStream::Stop or options.timeout_seconds.
  ApiResult<std::unique_ptr<WatchStream>> Watch(const ResourceRef& ref, std::string_view ns,
                                                const WatchOptions& options = {}, std::stop_token stop = {});

  // Any request, with the flow control above; a non-2xx answer is an error
  // with its ApiError. The 2xx response is returned whole.
  ApiResult<HttpResponse> Do(const RestRequest& request, std::stop_token stop = {});

 private:
  ApiResult<nlohmann::json> DoJson(const RestRequest& request, std::stop_token stop);
  // Retry bookkeeping shared by Do and Watch: each returns OK after waiting
  // when the caller should try again, else the status to give up with.
  struct Attempts;
  common::Status RetryAfterTransportError(Attempts& attempts, const common::Status& error, bool safe,
                                          std::stop_token stop);
  common::Status RetryAfterThrottle(Attempts& attempts, const ApiError& error, bool idempotent,
                                    std::stop_token stop);

  const RestConfig config_;
  const ClientOptions options_;
  const std::unique_ptr<HttpTransport> transport_;
  RequestRateLimiter limiter_;
  std::atomic<std::uint64_t> attempts_{0};
  std::atomic<std::uint64_t> throttle_retries_{0};
  std::atomic<std::uint64_t> transport_retries_{0};
};

// Percent-encodes everything but RFC 3986 unreserved characters.
std::string UrlEncode(std::string_view text);

}  // namespace nvdra::k8s
