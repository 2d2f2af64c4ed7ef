#pragma once

// Every API write compute-domain-controller makes goes through here: under
// its field manager, counted (ControllerStats.writes and
// nvdra_compute_domain_controller_api_writes_total), plus the Events it
// emits on a ComputeDomain. Defines: ApiWriter.
//
// Ownership: borrows the Client and the metrics registry (both must outlive
// it); owns the event recorder. Thread-safety: thread-safe.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/metrics.h"
#include "common/status.h"
#include "computedomain/controller/controller_options.h"
#include "k8s/api_error.h"
#include "k8s/client.h"
#include "k8s/event_recorder.h"
#include "k8s/objects/compute_domain.h"

namespace nvdra::computedomain::controller {

class ApiWriter {
 public:
  // Errors of EventRecorder::New.
  static common::StatusOr<std::unique_ptr<ApiWriter>> New(k8s::Client& client, const ControllerOptions& options);
  ApiWriter(const ApiWriter&) = delete;
  ApiWriter& operator=(const ApiWriter&) = delete;

  // Reads (not counted), for the few places that must see past the caches.
  k8s::ApiResult<nlohmann::json> Get(const k8s::ResourceRef& ref, std::string_view ns, std::string_view name,
                                     std::stop_token stop);
  k8s::ApiResult<nlohmann::json> ListAll(const k8s::ResourceRef& ref, const k8s::ListOptions& options,
                                         std::stop_token stop);

  // The client's writes, counted. `subresource` "" is the object itself.
  k8s::ApiResult<nlohmann::json> Create(const k8s::ResourceRef& ref, std::string_view ns, const nlohmann::json& body,
                                        std::stop_token stop);
  k8s::ApiResult<nlohmann::json> Update(const k8s::ResourceRef& ref, std::string_view ns, const nlohmann::json& body,
                                        std::stop_token stop);
  k8s::ApiResult<nlohmann::json> Patch(const k8s::ResourceRef& ref, std::string_view ns, std::string_view name,
                                       k8s::PatchType type, const nlohmann::json& patch, std::string subresource,
                                       std::stop_token stop);
  // Server-side apply of fields only this controller writes (indexes);
  // forced, so what an older writer left behind is adopted, not a conflict.
  k8s::ApiResult<nlohmann::json> ApplyForced(const k8s::ResourceRef& ref, std::string_view ns,
                                             const nlohmann::json& intent, std::string subresource,
                                             std::stop_token stop);

  // Deletes (propagation Background); an absent object is OK.
  common::Status DeleteOwned(const k8s::ResourceRef& ref, const std::string& ns, const std::string& name,
                             std::stop_token stop);
  // Removes our finalizer from the object, then checks it is gone: OK when
  // absent; kUnavailable while it is still being deleted (other finalizers,
  // e.g. the garbage collector's, may hold it a little longer);
  // kFailedPrecondition when it exists and is not being deleted.
  common::Status ReleaseOwned(const k8s::ResourceRef& ref, const std::string& ns, const std::string& name,
                              std::stop_token stop);
  // Removes our finalizer from the domain (resourceVersion as precondition).
  // An absent domain is OK.
  common::Status ReleaseDomain(const k8s::ComputeDomain& cd, std::stop_token stop);

  // An Event regarding `cd` (action "Reconcile"); sent in the background.
  void Emit(const k8s::ComputeDomain& cd, k8s::EventType type, std::string_view reason, std::string_view note);
  // Waits up to `timeout` for the Events emitted so far to be sent.
  void WaitEventsSent(std::chrono::milliseconds timeout);

  std::uint64_t writes() const { return writes_.load(); }

 private:
  ApiWriter(k8s::Client& client, common::MetricsRegistry* metrics);
  void CountWrite();
  k8s::PatchOptions PatchOptions(std::string subresource) const;
  k8s::WriteOptions WriteOptions() const;

  k8s::Client& client_;
  common::MetricsRegistry* const metrics_;  // may be null
  std::unique_ptr<k8s::EventRecorder> recorder_;
  std::atomic<std::uint64_t> writes_{0};
};

}  // namespace nvdra::computedomain::controller
