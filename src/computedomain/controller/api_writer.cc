#include "computedomain/controller/api_writer.h"

#include <optional>
#include <utility>

#include <fmt/format.h>

#include "k8s/flow_control.h"

namespace nvdra::computedomain::controller {

using common::OkStatus;
using common::Status;
using nlohmann::json;

common::StatusOr<std::unique_ptr<ApiWriter>> ApiWriter::New(k8s::Client& client, const ControllerOptions& options) {
  std::unique_ptr<ApiWriter> writer(new ApiWriter(client, options.metrics));
  k8s::EventRecorderOptions recorder_options;
  recorder_options.reporting_controller = std::string(kReportingController);
  recorder_options.reporting_instance = options.instance.empty() ? "compute-domain-controller" : options.instance;
  auto recorder = k8s::EventRecorder::New(&client, recorder_options);
  if (!recorder.ok()) return recorder.status();
  writer->recorder_ = std::move(*recorder);
  return writer;
}

ApiWriter::ApiWriter(k8s::Client& client, common::MetricsRegistry* metrics) : client_(client), metrics_(metrics) {}

void ApiWriter::CountWrite() {
  ++writes_;
  if (metrics_ != nullptr) {
    metrics_
        ->AddCounter("nvdra_compute_domain_controller_api_writes_total",
                     "API writes (create, update, patch, apply, delete) made by the reconciler", {})
        .WithLabels({})
        .Inc();
  }
}

k8s::PatchOptions ApiWriter::PatchOptions(std::string subresource) const {
  k8s::PatchOptions options;
  options.field_manager = std::string(kFieldManager);
  options.subresource = std::move(subresource);
  return options;
}

k8s::WriteOptions ApiWriter::WriteOptions() const {
  k8s::WriteOptions options;
  options.field_manager = std::string(kFieldManager);
  return options;
}

k8s::ApiResult<json> ApiWriter::Get(const k8s::ResourceRef& ref, std::string_view ns, std::string_view name,
                                    std::stop_token stop) {
  return client_.Get(ref, ns, name, {}, stop);
}

k8s::ApiResult<json> ApiWriter::ListAll(const k8s::ResourceRef& ref, const k8s::ListOptions& options,
                                        std::stop_token stop) {
  return client_.ListAll(ref, "", options, stop);
}

k8s::ApiResult<json> ApiWriter::Create(const k8s::ResourceRef& ref, std::string_view ns, const json& body,
                                       std::stop_token stop) {
  CountWrite();
  return client_.Create(ref, ns, body, WriteOptions(), stop);
}

k8s::ApiResult<json> ApiWriter::Update(const k8s::ResourceRef& ref, std::string_view ns, const json& body,
                                       std::stop_token stop) {
  CountWrite();
  return client_.Update(ref, ns, body, WriteOptions(), stop);
}

k8s::ApiResult<json> ApiWriter::Patch(const k8s::ResourceRef& ref, std::string_view ns, std::string_view name,
                                      k8s::PatchType type, const json& patch, std::string subresource,
                                      std::stop_token stop) {
  CountWrite();
  return client_.Patch(ref, ns, name, type, patch, PatchOptions(std::move(subresource)), stop);
}

k8s::ApiResult<json> ApiWriter::ApplyForced(const k8s::ResourceRef& ref, std::string_view ns, const json& intent,
                                            std::string subresource, std::stop_token stop) {
  k8s::PatchOptions options = PatchOptions(std::move(subresource));
  options.force = true;
  CountWrite();
  return client_.Apply(ref, ns, intent, options, stop);
}

Status ApiWriter::DeleteOwned(const k8s::ResourceRef& ref, const std::string& ns, const std::string& name,
                              std::stop_token stop) {
  CountWrite();
  k8s::DeleteOptions options;
  options.propagation_policy = "Background";
  auto result = client_.Delete(ref, ns, name, options, stop);
  if (result.ok() || k8s::IsNotFound(result.status())) return OkStatus();
  return result.status();
}

namespace {

// A merge patch setting metadata.finalizers to `object`'s without ours,
// with its resourceVersion as a precondition: a stale read is a conflict.
json WithoutOurFinalizer(const k8s::Object& object) {
  json finalizers = json::array();
  for (const std::string& f : object.finalizers()) {
    if (f != kFinalizer) finalizers.push_back(f);
  }
  return {{"metadata", {{"finalizers", finalizers}, {"resourceVersion", object.resource_version()}}}};
}

}  // namespace

Status ApiWriter::ReleaseOwned(const k8s::ResourceRef& ref, const std::string& ns, const std::string& name,
                               std::stop_token stop) {
  auto current = Get(ref, ns, name, stop);
  if (!current.ok()) return k8s::IsNotFound(current.status()) ? OkStatus() : current.status();
  const k8s::Object object(*std::move(current));
  if (object.HasFinalizer(kFinalizer)) {
    auto patched = Patch(ref, ns, name, k8s::PatchType::kMerge, WithoutOurFinalizer(object), "", stop);
    if (!patched.ok()) return k8s::IsNotFound(patched.status()) ? OkStatus() : patched.status();
  }
  // Assert it is gone (other finalizers, e.g. the garbage collector's, may
  // hold it a little longer; its delete event requeues the domain).
  auto after = Get(ref, ns, name, stop);
  if (!after.ok()) return k8s::IsNotFound(after.status()) ? OkStatus() : after.status();
  if (!k8s::Object(*std::move(after)).deletion_timestamp()) {
    return common::FailedPreconditionError(
        fmt::format("{} {}/{} still exists and is not being deleted", ref.Name(), ns, name));
  }
  return common::UnavailableError(fmt::format("{} {}/{} is still being deleted", ref.Name(), ns, name));
}

Status ApiWriter::ReleaseDomain(const k8s::ComputeDomain& cd, std::stop_token stop) {
  // The first try uses the cached object; a conflict (the cache trailed a
  // write, e.g. the garbage collector's foregroundDeletion finalizer) reads
  // the domain afresh and tries again, as client-go's retry.RetryOnConflict,
  // instead of failing the reconcile into the queue's backoff.
  std::optional<k8s::ComputeDomain> current = cd;
  return k8s::RetryOnConflict(k8s::kDefaultConflictRetry, [&]() -> Status {
    if (!current) {
      auto fresh = Get(k8s::resources::kComputeDomains, cd.namespace_name(), cd.name(), stop);
      if (!fresh.ok()) return k8s::IsNotFound(fresh.status()) ? OkStatus() : fresh.status();
      current.emplace(*std::move(fresh));
      if (current->uid() != cd.uid() || !current->HasFinalizer(kFinalizer)) return OkStatus();
    }
    auto patched = Patch(k8s::resources::kComputeDomains, cd.namespace_name(), cd.name(), k8s::PatchType::kMerge,
                         WithoutOurFinalizer(*current), "", stop);
    current.reset();
    if (!patched.ok() && !k8s::IsNotFound(patched.status())) return patched.status();
    return OkStatus();
  }, stop);
}

void ApiWriter::Emit(const k8s::ComputeDomain& cd, k8s::EventType type, std::string_view reason,
                     std::string_view note) {
  json regarding = cd.json();
  regarding["apiVersion"] = k8s::ComputeDomain::kApiVersion;
  regarding["kind"] = k8s::ComputeDomain::kKind;
  recorder_->Emit(k8s::ObjectReference::FromObject(regarding), type, reason, "Reconcile", note);
}

void ApiWriter::WaitEventsSent(std::chrono::milliseconds timeout) { recorder_->WaitIdle(timeout); }

}  // namespace nvdra::computedomain::controller
