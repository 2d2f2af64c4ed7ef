#pragma once

// The gRPC service implementations behind PluginServer (plugin_server.h):
// registration, DRAPlugin v1 and v1beta1 (adapters to DraDriver), and
// DRAResourceHealth v1 and v1alpha1 (streams fed by a HealthHub).
// Internal to src/kubeletplugin; tests use PluginServer.
//
// Defines: RegistrationService, DraPluginV1Service, DraPluginV1beta1Service,
// HealthHub, DraHealthV1Service, DraHealthV1alpha1Service, and the message
// conversions they use.
//
// Ownership: services borrow the DraDriver; health streams share ownership of
// the HealthHub (a stream may end after the server that opened it is gone).
// Thread-safety: thread-safe; gRPC calls each service from many threads.

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "pkg/apis/dra-health/v1/api.grpc.pb.h"
#include "pkg/apis/dra-health/v1alpha1/api.grpc.pb.h"
#include "pkg/apis/dra/v1/api.grpc.pb.h"
#include "pkg/apis/dra/v1beta1/api.grpc.pb.h"
#include "pkg/apis/pluginregistration/v1/api.grpc.pb.h"

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "kubeletplugin/dra_service.h"
#include "kubeletplugin/plugin_server.h"

namespace nvdra::kubeletplugin::internal {

namespace drav1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace drav1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;
namespace healthv1 = ::v1;
namespace healthv1alpha1 = ::v1alpha1;
namespace registration = ::pluginregistration;

// "<request>/<subrequest>" -> "<request>": containers reference base requests.
std::string BaseRequestName(const std::string& request);

// Messages are cut to this length on the wire, as the kubelet expects.
inline constexpr std::size_t kMaxHealthMessage = 1024;

// --- Registration -------------------------------------------------------------

class RegistrationService final : public registration::Registration::Service {
 public:
  RegistrationService(std::string driver_name, std::string endpoint,
                      std::vector<std::string> supported_versions);

  grpc::Status GetInfo(grpc::ServerContext* context, const registration::InfoRequest* request,
                       registration::PluginInfo* response) override;
  grpc::Status NotifyRegistrationStatus(grpc::ServerContext* context,
                                        const registration::RegistrationStatus* request,
                                        registration::RegistrationStatusResponse* response) override;

  RegistrationState state() const EXCLUDES(state_mu_);

 private:
  const std::string driver_name_;
  const std::string endpoint_;
  const std::vector<std::string> supported_versions_;

  mutable common::Mutex state_mu_;  // guards state_
  RegistrationState state_ GUARDED_BY(state_mu_);
};

// --- DRAPlugin -------------------------------------------------------------------
// One adapter per version, from one template: the messages have the same
// shape (v1 adds Device.share_id, set from PreparedDevice::share_id).
// `Service` is a version's generated DRAPlugin::Service; the request and
// response types are read off its methods' signatures.

template <typename Method>
struct RpcTypes;
template <typename Service, typename RequestT, typename ResponseT>
struct RpcTypes<grpc::Status (Service::*)(grpc::ServerContext*, const RequestT*, ResponseT*)> {
  using Request = RequestT;
  using Response = ResponseT;
};

template <typename Service>
class DraPluginService final : public Service {
  using PrepareRpc = RpcTypes<decltype(&Service::NodePrepareResources)>;
  using UnprepareRpc = RpcTypes<decltype(&Service::NodeUnprepareResources)>;

 public:
  explicit DraPluginService(DraDriver& driver) : driver_(driver) {}
  grpc::Status NodePrepareResources(grpc::ServerContext* context, const typename PrepareRpc::Request* request,
                                    typename PrepareRpc::Response* response) override;
  grpc::Status NodeUnprepareResources(grpc::ServerContext* context, const typename UnprepareRpc::Request* request,
                                      typename UnprepareRpc::Response* response) override;

 private:
  DraDriver& driver_;
};

// Defined and instantiated in grpc_services.cc.
using DraPluginV1Service = DraPluginService<drav1::DRAPlugin::Service>;
using DraPluginV1beta1Service = DraPluginService<drav1beta1::DRAPlugin::Service>;
extern template class DraPluginService<drav1::DRAPlugin::Service>;
extern template class DraPluginService<drav1beta1::DRAPlugin::Service>;

// --- DRAResourceHealth ------------------------------------------------------------

using HealthReport = std::shared_ptr<const std::vector<DeviceHealth>>;

// One open NodeWatchResources stream, as the hub sees it.
class HealthSink {
 public:
  // Sends `report` (or queues it, replacing an unsent one). Never blocks.
  virtual void Offer(const HealthReport& report) = 0;
  // Ends the stream with OK. Never blocks; later Offers are dropped.
  virtual void Close() = 0;

 protected:
  ~HealthSink() = default;
};

// The latest report and the open streams. Thread-safe.
class HealthHub {
 public:
  // Adds a stream; returns the latest report (null if none yet) for it to send.
  HealthReport Add(std::shared_ptr<HealthSink> sink) EXCLUDES(mu_);
  void Remove(const HealthSink* sink) EXCLUDES(mu_);
  // Stores `devices` as the latest report and offers it to every stream.
  void Publish(std::vector<DeviceHealth> devices) EXCLUDES(mu_);
  // Ends every open stream (server shutdown or rebind).
  void CloseAll() EXCLUDES(mu_);

 private:
  common::Mutex mu_;  // guards sinks_, latest_
  std::vector<std::shared_ptr<HealthSink>> sinks_ GUARDED_BY(mu_);
  HealthReport latest_ GUARDED_BY(mu_);
};

class DraHealthV1Service final : public healthv1::DRAResourceHealth::CallbackService {
 public:
  explicit DraHealthV1Service(std::shared_ptr<HealthHub> hub) : hub_(std::move(hub)) {}
  grpc::ServerWriteReactor<healthv1::NodeWatchResourcesResponse>* NodeWatchResources(
      grpc::CallbackServerContext* context, const healthv1::NodeWatchResourcesRequest* request) override;

 private:
  std::shared_ptr<HealthHub> hub_;
};

class DraHealthV1alpha1Service final : public healthv1alpha1::DRAResourceHealth::CallbackService {
 public:
  explicit DraHealthV1alpha1Service(std::shared_ptr<HealthHub> hub) : hub_(std::move(hub)) {}
  grpc::ServerWriteReactor<healthv1alpha1::NodeWatchResourcesResponse>* NodeWatchResources(
      grpc::CallbackServerContext* context,
      const healthv1alpha1::NodeWatchResourcesRequest* request) override;

 private:
  std::shared_ptr<HealthHub> hub_;
};

// Conversions, exposed for tests.
void ToProto(const std::vector<DeviceHealth>& devices, healthv1::NodeWatchResourcesResponse* out);
void ToProto(const std::vector<DeviceHealth>& devices, healthv1alpha1::NodeWatchResourcesResponse* out);

}  // namespace nvdra::kubeletplugin::internal
