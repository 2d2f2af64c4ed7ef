#include "kubeletplugin/internal/grpc_services.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <utility>

#include "common/log.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace nvdra::kubeletplugin::internal {

std::string BaseRequestName(const std::string& request) {
  return request.substr(0, request.find('/'));
}

// --- Registration -------------------------------------------------------------

RegistrationService::RegistrationService(std::string driver_name, std::string endpoint,
                                         std::vector<std::string> supported_versions)
    : driver_name_(std::move(driver_name)),
      endpoint_(std::move(endpoint)),
      supported_versions_(std::move(supported_versions)) {}

grpc::Status RegistrationService::GetInfo(grpc::ServerContext* /*context*/,
                                          const registration::InfoRequest* /*request*/,
                                          registration::PluginInfo* response) {
  // The kubelet's plugin-type constant for DRA drivers.
  response->set_type("DRAPlugin");
  response->set_name(driver_name_);
  response->set_endpoint(endpoint_);
  for (const auto& version : supported_versions_) response->add_supported_versions(version);
  LOG_INFO(6, "GetInfo answered", {{"driver", driver_name_}, {"endpoint", endpoint_}});
  return grpc::Status::OK;
}

grpc::Status RegistrationService::NotifyRegistrationStatus(
    grpc::ServerContext* /*context*/, const registration::RegistrationStatus* request,
    registration::RegistrationStatusResponse* /*response*/) {
  {
    common::MutexLock lock(state_mu_);
    state_.notified = true;
    state_.registered = request->plugin_registered();
    state_.error = request->error();
  }
  if (request->plugin_registered()) {
    LOG_INFO(0, "registered with the kubelet", {{"driver", driver_name_}});
    return grpc::Status::OK;
  }
  LOG_ERROR("kubelet refused the registration",
            {{"driver", driver_name_}, {"err", request->error()}});
  // As the Go helper: a refusal is answered with an error.
  return grpc::Status(grpc::StatusCode::UNKNOWN, "failed registration process: " + request->error());
}

RegistrationState RegistrationService::state() const {
  common::MutexLock lock(state_mu_);
  return state_;
}

// --- DRAPlugin -------------------------------------------------------------------

namespace {

template <typename Request>
std::vector<ClaimRef> ClaimsOf(const Request& request) {
  std::vector<ClaimRef> claims;
  claims.reserve(static_cast<std::size_t>(request.claims_size()));
  for (const auto& claim : request.claims()) {
    claims.push_back(ClaimRef{.uid = claim.uid(), .name = claim.name(), .ns = claim.namespace_()});
  }
  return claims;
}

// What both RPCs do: read the claims, let the driver handle them, and give
// each requested claim one reply entry, which `answer` fills from the
// driver's result. The kubelet rejects a reply that leaves out a requested
// claim, so a claim the driver did not answer gets an error entry instead.
template <typename Request, typename Response, typename Handle, typename Answer>
grpc::Status HandleClaims(std::string_view rpc, const Request& request, Response* response, Handle handle,
                          Answer answer) {
  const std::vector<ClaimRef> claims = ClaimsOf(request);
  // An empty request is the liveness probe's: it tests the gRPC path, not
  // the driver (whose Prepare may wait on a node-wide lock).
  if (claims.empty()) return grpc::Status::OK;
  LOG_INFO(6, rpc, {{"claims", claims.size()}});
  const auto results = handle(claims);
  auto& out = *response->mutable_claims();
  for (const auto& claim : claims) {
    auto& entry = out[claim.uid];
    const auto it = results.find(claim.uid);
    if (it == results.end()) {
      entry.set_error("the driver returned no result for this claim");
    } else {
      answer(entry, it->second);
    }
  }
  return grpc::Status::OK;
}

template <typename Request, typename Response>
grpc::Status Prepare(DraDriver& driver, const Request& request, Response* response) {
  return HandleClaims(
      "NodePrepareResources", request, response,
      [&](const std::vector<ClaimRef>& claims) { return driver.PrepareResourceClaims(claims); },
      [](auto& entry, const PrepareResult& result) {
        if (!result.error.empty()) {
          entry.set_error(result.error);
          return;
        }
        for (const auto& device : result.devices) {
          auto* d = entry.add_devices();
          for (const auto& request_name : device.requests) d->add_request_names(BaseRequestName(request_name));
          d->set_pool_name(device.pool_name);
          d->set_device_name(device.device_name);
          for (const auto& id : device.cdi_device_ids) d->add_cdi_device_ids(id);
          if constexpr (requires { d->set_share_id(std::string()); }) {
            if (device.share_id) d->set_share_id(*device.share_id);
          }
        }
      });
}

template <typename Request, typename Response>
grpc::Status Unprepare(DraDriver& driver, const Request& request, Response* response) {
  return HandleClaims(
      "NodeUnprepareResources", request, response,
      [&](const std::vector<ClaimRef>& claims) { return driver.UnprepareResourceClaims(claims); },
      [](auto& entry, const std::string& error) {
        if (!error.empty()) entry.set_error(error);
      });
}

}  // namespace

template <typename Service>
grpc::Status DraPluginService<Service>::NodePrepareResources(grpc::ServerContext* /*context*/,
                                                             const typename PrepareRpc::Request* request,
                                                             typename PrepareRpc::Response* response) {
  return Prepare(driver_, *request, response);
}

template <typename Service>
grpc::Status DraPluginService<Service>::NodeUnprepareResources(grpc::ServerContext* /*context*/,
                                                               const typename UnprepareRpc::Request* request,
                                                               typename UnprepareRpc::Response* response) {
  return Unprepare(driver_, *request, response);
}

template class DraPluginService<drav1::DRAPlugin::Service>;
template class DraPluginService<drav1beta1::DRAPlugin::Service>;

// --- DRAResourceHealth ------------------------------------------------------------

namespace {

template <typename Response, typename HealthEnum>
void FillHealth(const std::vector<DeviceHealth>& devices, Response* out, HealthEnum unknown,
                HealthEnum healthy, HealthEnum unhealthy) {
  out->Clear();
  for (const auto& device : devices) {
    auto* d = out->add_devices();
    d->mutable_device()->set_pool_name(device.pool_name);
    d->mutable_device()->set_device_name(device.device_name);
    switch (device.health) {
      case DeviceHealthStatus::kHealthy: d->set_health(healthy); break;
      case DeviceHealthStatus::kUnhealthy: d->set_health(unhealthy); break;
      case DeviceHealthStatus::kUnknown: d->set_health(unknown); break;
    }
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
        device.last_updated.time_since_epoch());
    d->set_last_updated_time(static_cast<std::int64_t>(seconds.count()));
    d->set_health_check_timeout_seconds(static_cast<std::int64_t>(device.health_check_timeout.count()));
    if (device.message.size() > kMaxHealthMessage) {
      d->set_message(device.message.substr(0, kMaxHealthMessage - 3) + "...");
    } else {
      d->set_message(device.message);
    }
  }
}

// One NodeWatchResources stream. At most one write is in flight; a report
// offered meanwhile replaces any unsent one, so a slow reader gets the newest
// complete list rather than a backlog. Finish is called exactly once and only
// with no write in flight, which is also what keeps the reactor alive while
// another thread calls StartWrite or Finish on it.
// Lifetime: shared by the hub and itself (self_) until gRPC calls OnDone.
template <typename Response>
class HealthStream final : public grpc::ServerWriteReactor<Response>, public HealthSink {
 public:
  explicit HealthStream(std::shared_ptr<HealthHub> hub) : hub_(std::move(hub)) {}

  // Registers with the hub and sends its latest report; returns the reactor
  // gRPC drives.
  static grpc::ServerWriteReactor<Response>* Open(const std::shared_ptr<HealthHub>& hub) {
    auto stream = std::make_shared<HealthStream>(hub);
    stream->self_ = stream;
    LOG_INFO(3, "health stream opened");
    if (HealthReport latest = hub->Add(stream)) stream->Offer(latest);
    return stream.get();
  }

  void Offer(const HealthReport& report) override EXCLUDES(mu_) {
    common::MutexLock lock(mu_);
    if (finish_wanted_) return;
    if (writing_) {
      pending_ = report;
      return;
    }
    writing_ = true;
    FillCurrent(*report);
    lock.Unlock();
    this->StartWrite(&current_);
  }

  void Close() override { RequestFinish(grpc::Status::OK); }

  void OnWriteDone(bool ok) override EXCLUDES(mu_) {
    common::MutexLock lock(mu_);
    if (!ok && !finish_wanted_) {
      // The client went away (or the server is cancelling calls).
      finish_wanted_ = true;
      finish_status_ = grpc::Status(grpc::StatusCode::CANCELLED, "health stream write failed");
    }
    if (finish_wanted_) {
      writing_ = false;
      finish_called_ = true;
      const grpc::Status status = finish_status_;
      lock.Unlock();
      this->Finish(status);
      return;
    }
    if (pending_) {
      FillCurrent(**pending_);
      pending_.reset();
      lock.Unlock();
      this->StartWrite(&current_);
      return;
    }
    writing_ = false;
  }

  void OnCancel() override {
    RequestFinish(grpc::Status(grpc::StatusCode::CANCELLED, "health stream cancelled"));
  }

  void OnDone() override {
    LOG_INFO(3, "health stream closed");
    hub_->Remove(this);
    // Last use of `this` by gRPC; the hub may still hold a reference, whose
    // Offer or Close then finds finish_wanted_ set and does nothing.
    std::shared_ptr<HealthStream> self = std::move(self_);
  }

 private:
  void RequestFinish(grpc::Status status) EXCLUDES(mu_) {
    common::MutexLock lock(mu_);
    if (finish_wanted_ && (writing_ || finish_called_)) return;
    if (!finish_wanted_) {
      finish_wanted_ = true;
      finish_status_ = std::move(status);
    }
    if (writing_ || finish_called_) return;  // OnWriteDone finishes
    finish_called_ = true;
    const grpc::Status final_status = finish_status_;
    lock.Unlock();
    this->Finish(final_status);
  }

  void FillCurrent(const std::vector<DeviceHealth>& devices) REQUIRES(mu_) { ToProto(devices, &current_); }

  const std::shared_ptr<HealthHub> hub_;
  std::shared_ptr<HealthStream> self_;  // set by Open, released in OnDone

  common::Mutex mu_;  // guards everything below
  bool writing_ GUARDED_BY(mu_) = false;
  bool finish_wanted_ GUARDED_BY(mu_) = false;
  bool finish_called_ GUARDED_BY(mu_) = false;
  grpc::Status finish_status_ GUARDED_BY(mu_);
  std::optional<HealthReport> pending_ GUARDED_BY(mu_);
  // The message being written: filled under mu_, then read by gRPC without
  // it, which is safe because nothing refills it while writing_ is set.
  Response current_ GUARDED_BY(mu_);
};

}  // namespace

void ToProto(const std::vector<DeviceHealth>& devices, healthv1::NodeWatchResourcesResponse* out) {
  FillHealth(devices, out, healthv1::UNKNOWN, healthv1::HEALTHY, healthv1::UNHEALTHY);
}

void ToProto(const std::vector<DeviceHealth>& devices,
             healthv1alpha1::NodeWatchResourcesResponse* out) {
  FillHealth(devices, out, healthv1alpha1::UNKNOWN, healthv1alpha1::HEALTHY,
             healthv1alpha1::UNHEALTHY);
}

HealthReport HealthHub::Add(std::shared_ptr<HealthSink> sink) {
  common::MutexLock lock(mu_);
  sinks_.push_back(std::move(sink));
  return latest_;
}

void HealthHub::Remove(const HealthSink* sink) {
  common::MutexLock lock(mu_);
  std::erase_if(sinks_, [sink](const auto& s) { return s.get() == sink; });
}

void HealthHub::Publish(std::vector<DeviceHealth> devices) {
  auto report = std::make_shared<const std::vector<DeviceHealth>>(std::move(devices));
  std::vector<std::shared_ptr<HealthSink>> sinks;
  {
    common::MutexLock lock(mu_);
    latest_ = report;
    sinks = sinks_;
  }
  // Outside the lock: Offer calls into gRPC.
  for (const auto& sink : sinks) sink->Offer(report);
}

void HealthHub::CloseAll() {
  std::vector<std::shared_ptr<HealthSink>> sinks;
  {
    common::MutexLock lock(mu_);
    sinks = sinks_;
  }
  for (const auto& sink : sinks) sink->Close();
}

grpc::ServerWriteReactor<healthv1::NodeWatchResourcesResponse>* DraHealthV1Service::NodeWatchResources(
    grpc::CallbackServerContext* /*context*/, const healthv1::NodeWatchResourcesRequest* /*request*/) {
  return HealthStream<healthv1::NodeWatchResourcesResponse>::Open(hub_);
}

grpc::ServerWriteReactor<healthv1alpha1::NodeWatchResourcesResponse>*
DraHealthV1alpha1Service::NodeWatchResources(
    grpc::CallbackServerContext* /*context*/,
    const healthv1alpha1::NodeWatchResourcesRequest* /*request*/) {
  return HealthStream<healthv1alpha1::NodeWatchResourcesResponse>::Open(hub_);
}

}  // namespace nvdra::kubeletplugin::internal
