#include "kubeletplugin/plugin_server.h"

#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "pkg/apis/dra-health/v1/api.grpc.pb.h"
#include "pkg/apis/dra-health/v1alpha1/api.grpc.pb.h"
#include "pkg/apis/dra/v1/api.grpc.pb.h"
#include "pkg/apis/dra/v1beta1/api.grpc.pb.h"
#include "pkg/apis/pluginregistration/v1/api.grpc.pb.h"

#include "common/status.h"

namespace nvdra::kubeletplugin {
namespace {

namespace fs = std::filesystem;
namespace drav1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace drav1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using namespace std::chrono_literals;

class TempDir {
 public:
  TempDir() {
    // Short, so socket paths stay far below sun_path's 108 bytes.
    std::string templ = "/tmp/kp-XXXXXX";
    path_ = ::mkdtemp(templ.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Returns what it was told to for each UID; records every call.
class FakeDriver final : public DraDriver {
 public:
  std::map<std::string, PrepareResult> PrepareResourceClaims(const std::vector<ClaimRef>& claims) override {
    std::lock_guard lock(mu_);
    prepare_calls_.push_back(claims);
    std::map<std::string, PrepareResult> out;
    for (const auto& c : claims) {
      if (auto it = prepare_results_.find(c.uid); it != prepare_results_.end()) out[c.uid] = it->second;
    }
    return out;
  }
  std::map<std::string, std::string> UnprepareResourceClaims(const std::vector<ClaimRef>& claims) override {
    std::lock_guard lock(mu_);
    unprepare_calls_.push_back(claims);
    std::map<std::string, std::string> out;
    for (const auto& c : claims) {
      if (auto it = unprepare_results_.find(c.uid); it != unprepare_results_.end()) out[c.uid] = it->second;
    }
    return out;
  }

  void SetPrepare(const std::string& uid, PrepareResult r) {
    std::lock_guard lock(mu_);
    prepare_results_[uid] = std::move(r);
  }
  void SetUnprepare(const std::string& uid, std::string error) {
    std::lock_guard lock(mu_);
    unprepare_results_[uid] = std::move(error);
  }
  std::vector<std::vector<ClaimRef>> prepare_calls() {
    std::lock_guard lock(mu_);
    return prepare_calls_;
  }
  std::vector<std::vector<ClaimRef>> unprepare_calls() {
    std::lock_guard lock(mu_);
    return unprepare_calls_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, PrepareResult> prepare_results_;
  std::map<std::string, std::string> unprepare_results_;
  std::vector<std::vector<ClaimRef>> prepare_calls_;
  std::vector<std::vector<ClaimRef>> unprepare_calls_;
};

std::shared_ptr<grpc::Channel> UnixChannel(const fs::path& path) {
  return grpc::CreateChannel("unix:" + path.string(), grpc::InsecureChannelCredentials());
}

void WithDeadline(grpc::ClientContext& context, std::chrono::milliseconds timeout = 5s) {
  context.set_deadline(std::chrono::system_clock::now() + timeout);
}

bool IsSocket(const fs::path& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

class PluginServerTest : public ::testing::Test {
 protected:
  PluginServerOptions Options() const {
    PluginServerOptions o;
    o.driver_name = "gpu.example.com";
    o.registrar_dir = dir_.path() / "plugins_registry";
    o.plugin_dir = dir_.path() / "plugins" / "gpu.example.com";
    o.healthcheck_address = "127.0.0.1";
    return o;
  }

  std::unique_ptr<PluginServer> StartServer(const PluginServerOptions& o) {
    auto server = PluginServer::Start(o, driver_);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(server).value() : nullptr;
  }

  grpc::Status GetInfo(const PluginServer& server, pluginregistration::PluginInfo* info) {
    auto stub = pluginregistration::Registration::NewStub(UnixChannel(server.registration_socket()));
    grpc::ClientContext context;
    WithDeadline(context);
    return stub->GetInfo(&context, pluginregistration::InfoRequest(), info);
  }

  grpc::Status PrepareV1(const PluginServer& server, const drav1::NodePrepareResourcesRequest& request,
                         drav1::NodePrepareResourcesResponse* response) {
    auto stub = drav1::DRAPlugin::NewStub(UnixChannel(server.dra_socket()));
    grpc::ClientContext context;
    WithDeadline(context);
    return stub->NodePrepareResources(&context, request, response);
  }

  TempDir dir_;
  FakeDriver driver_;
};

template <typename Request>
void AddClaim(Request& request, const std::string& uid, const std::string& name, const std::string& ns) {
  auto* c = request.add_claims();
  c->set_uid(uid);
  c->set_name(name);
  c->set_namespace_(ns);
}

TEST_F(PluginServerTest, GetInfoAdvertisesDriverEndpointAndVersionsV1First) {
  PluginServerOptions o = Options();
  o.advertised_endpoint = "/var/lib/kubelet/plugins/gpu.example.com/dra.sock";
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->registration_socket(), o.registrar_dir / "gpu.example.com-reg.sock");
  EXPECT_EQ(server->dra_socket(), o.plugin_dir / "dra.sock");

  pluginregistration::PluginInfo info;
  ASSERT_TRUE(GetInfo(*server, &info).ok());
  EXPECT_EQ(info.type(), "DRAPlugin");
  EXPECT_EQ(info.name(), "gpu.example.com");
  EXPECT_EQ(info.endpoint(), "/var/lib/kubelet/plugins/gpu.example.com/dra.sock");
  EXPECT_THAT(info.supported_versions(),
              ElementsAre("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth",
                          "v1alpha1.DRAResourceHealth"));
}

TEST_F(PluginServerTest, EndpointDefaultsToListeningSocketAndHealthCanBeOff) {
  PluginServerOptions o = Options();
  o.serve_health = false;
  o.serve_v1beta1 = false;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  pluginregistration::PluginInfo info;
  ASSERT_TRUE(GetInfo(*server, &info).ok());
  EXPECT_EQ(info.endpoint(), (o.plugin_dir / "dra.sock").string());
  EXPECT_THAT(info.supported_versions(), ElementsAre("v1.DRAPlugin"));

  // Not served: the kubelet gets UNIMPLEMENTED for both.
  drav1beta1::NodePrepareResourcesResponse response;
  grpc::ClientContext context;
  WithDeadline(context);
  auto status = drav1beta1::DRAPlugin::NewStub(UnixChannel(server->dra_socket()))
                    ->NodePrepareResources(&context, {}, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(PluginServerTest, NotifyRegistrationStatusIsRecorded) {
  auto server = StartServer(Options());
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->registration_state(), RegistrationState{});
  auto stub = pluginregistration::Registration::NewStub(UnixChannel(server->registration_socket()));

  pluginregistration::RegistrationStatus ok;
  ok.set_plugin_registered(true);
  pluginregistration::RegistrationStatusResponse response;
  {
    grpc::ClientContext context;
    WithDeadline(context);
    ASSERT_TRUE(stub->NotifyRegistrationStatus(&context, ok, &response).ok());
  }
  EXPECT_EQ(server->registration_state(), (RegistrationState{true, true, ""}));

  pluginregistration::RegistrationStatus refused;
  refused.set_plugin_registered(false);
  refused.set_error("validation failed");
  grpc::ClientContext context;
  WithDeadline(context);
  // As the Go helper: a refusal is answered with an error.
  EXPECT_FALSE(stub->NotifyRegistrationStatus(&context, refused, &response).ok());
  EXPECT_EQ(server->registration_state(), (RegistrationState{true, false, "validation failed"}));
}

TEST_F(PluginServerTest, V1PrepareAndUnprepareRoundTripResultsAndPerClaimErrors) {
  driver_.SetPrepare("uid-a", PrepareResult{.devices = {PreparedDevice{.requests = {"gpu/small", "nic"},
                                                                       .pool_name = "node-1",
                                                                       .device_name = "gpu-0",
                                                                       .cdi_device_ids = {"k8s.gpu.example.com/gpu=a"}},
                                                        PreparedDevice{.requests = {"shared"},
                                                                       .pool_name = "node-1",
                                                                       .device_name = "gpu-1",
                                                                       .cdi_device_ids = {"k8s.gpu.example.com/gpu=b"},
                                                                       .share_id = "share-7"}},
                                            .error = ""});
  driver_.SetPrepare("uid-b", PrepareResult{.devices = {}, .error = "no such device"});
  driver_.SetUnprepare("uid-a", "");
  driver_.SetUnprepare("uid-b", "busy");
  auto server = StartServer(Options());
  ASSERT_NE(server, nullptr);

  drav1::NodePrepareResourcesRequest request;
  AddClaim(request, "uid-a", "claim-a", "ns1");
  AddClaim(request, "uid-b", "claim-b", "ns2");
  AddClaim(request, "uid-c", "claim-c", "ns3");  // the driver leaves it out
  drav1::NodePrepareResourcesResponse response;
  ASSERT_TRUE(PrepareV1(*server, request, &response).ok());

  ASSERT_EQ(driver_.prepare_calls().size(), 1U);
  EXPECT_THAT(driver_.prepare_calls()[0],
              ElementsAre(ClaimRef{"uid-a", "claim-a", "ns1"}, ClaimRef{"uid-b", "claim-b", "ns2"},
                          ClaimRef{"uid-c", "claim-c", "ns3"}));
  ASSERT_EQ(response.claims().size(), 3U);
  const auto& a = response.claims().at("uid-a");
  EXPECT_EQ(a.error(), "");
  ASSERT_EQ(a.devices_size(), 2);
  // A consumable-capacity share reaches the kubelet (v1 only).
  EXPECT_EQ(a.devices(1).share_id(), "share-7");
  // Subrequest names are cut to the request containers reference.
  EXPECT_THAT(a.devices(0).request_names(), ElementsAre("gpu", "nic"));
  EXPECT_EQ(a.devices(0).pool_name(), "node-1");
  EXPECT_EQ(a.devices(0).device_name(), "gpu-0");
  EXPECT_THAT(a.devices(0).cdi_device_ids(), ElementsAre("k8s.gpu.example.com/gpu=a"));
  EXPECT_FALSE(a.devices(0).has_share_id());
  EXPECT_EQ(response.claims().at("uid-b").error(), "no such device");
  EXPECT_THAT(response.claims().at("uid-b").devices(), IsEmpty());
  EXPECT_THAT(response.claims().at("uid-c").error(), ::testing::HasSubstr("no result"));

  drav1::NodeUnprepareResourcesRequest unprepare;
  AddClaim(unprepare, "uid-a", "claim-a", "ns1");
  AddClaim(unprepare, "uid-b", "claim-b", "ns2");
  AddClaim(unprepare, "uid-c", "claim-c", "ns3");
  drav1::NodeUnprepareResourcesResponse unprepared;
  grpc::ClientContext context;
  WithDeadline(context);
  ASSERT_TRUE(drav1::DRAPlugin::NewStub(UnixChannel(server->dra_socket()))
                  ->NodeUnprepareResources(&context, unprepare, &unprepared)
                  .ok());
  ASSERT_EQ(unprepared.claims().size(), 3U);
  EXPECT_EQ(unprepared.claims().at("uid-a").error(), "");
  EXPECT_EQ(unprepared.claims().at("uid-b").error(), "busy");
  EXPECT_THAT(unprepared.claims().at("uid-c").error(), ::testing::HasSubstr("no result"));
  ASSERT_EQ(driver_.unprepare_calls().size(), 1U);
  EXPECT_EQ(driver_.unprepare_calls()[0].size(), 3U);
}

TEST_F(PluginServerTest, V1beta1PrepareAndUnprepareRoundTrip) {
  driver_.SetPrepare("uid-a", PrepareResult{.devices = {PreparedDevice{.requests = {},
                                                                       .pool_name = "p",
                                                                       .device_name = "d",
                                                                       .cdi_device_ids = {"v/c=1", "v/c=2"}}},
                                            .error = ""});
  driver_.SetPrepare("uid-b", PrepareResult{.devices = {}, .error = "bad config"});
  driver_.SetUnprepare("uid-a", "stuck");
  auto server = StartServer(Options());
  ASSERT_NE(server, nullptr);
  auto stub = drav1beta1::DRAPlugin::NewStub(UnixChannel(server->dra_socket()));

  drav1beta1::NodePrepareResourcesRequest request;
  AddClaim(request, "uid-a", "a", "ns");
  AddClaim(request, "uid-b", "b", "ns");
  drav1beta1::NodePrepareResourcesResponse response;
  {
    grpc::ClientContext context;
    WithDeadline(context);
    ASSERT_TRUE(stub->NodePrepareResources(&context, request, &response).ok());
  }
  ASSERT_EQ(response.claims().size(), 2U);
  ASSERT_EQ(response.claims().at("uid-a").devices_size(), 1);
  EXPECT_THAT(response.claims().at("uid-a").devices(0).request_names(), IsEmpty());
  EXPECT_THAT(response.claims().at("uid-a").devices(0).cdi_device_ids(), ElementsAre("v/c=1", "v/c=2"));
  EXPECT_EQ(response.claims().at("uid-b").error(), "bad config");

  drav1beta1::NodeUnprepareResourcesRequest unprepare;
  AddClaim(unprepare, "uid-a", "a", "ns");
  drav1beta1::NodeUnprepareResourcesResponse unprepared;
  grpc::ClientContext context;
  WithDeadline(context);
  ASSERT_TRUE(stub->NodeUnprepareResources(&context, unprepare, &unprepared).ok());
  EXPECT_EQ(unprepared.claims().at("uid-a").error(), "stuck");
}

TEST_F(PluginServerTest, EmptyPrepareDoesNotReachTheDriver) {
  auto server = StartServer(Options());
  ASSERT_NE(server, nullptr);
  drav1::NodePrepareResourcesResponse response;
  ASSERT_TRUE(PrepareV1(*server, {}, &response).ok());
  EXPECT_THAT(response.claims(), IsEmpty());
  EXPECT_THAT(driver_.prepare_calls(), IsEmpty());
}

// grpc.health.v1 by hand (no generated stub for it in the tree): the request
// is field 1 (service, a string), the response field 1 (status, an enum).
struct HealthAnswer {
  grpc::Status status;
  int serving_status = -1;  // 0 UNKNOWN, 1 SERVING, 2 NOT_SERVING
};

HealthAnswer HealthCheck(int port, const std::string& service) {
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  std::string wire;
  if (!service.empty()) {
    wire.push_back('\x0a');
    wire.push_back(static_cast<char>(service.size()));
    wire += service;
  }
  grpc::Slice slice(wire);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  WithDeadline(context);
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  HealthAnswer answer;
  answer.status = done.get_future().get();
  if (answer.status.ok()) {
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(response.Dump(&slices).ok());
    std::string bytes;
    for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    answer.serving_status = bytes.size() == 2 && bytes[0] == '\x08' ? bytes[1] : 0;
  }
  return answer;
}

TEST_F(PluginServerTest, HealthCheckServingWhileBothSocketsAnswer) {
  PluginServerOptions o = Options();
  o.healthcheck_port = 0;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->healthcheck_port(), 0);
  EXPECT_TRUE(server->ProbeNow());

  for (const std::string service : {"", "liveness"}) {
    HealthAnswer answer = HealthCheck(server->healthcheck_port(), service);
    ASSERT_TRUE(answer.status.ok()) << service << ": " << answer.status.error_message();
    EXPECT_EQ(answer.serving_status, 1) << service;
  }
  EXPECT_EQ(HealthCheck(server->healthcheck_port(), "other").status.error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(PluginServerTest, HealthPortOffByDefault) {
  auto server = StartServer(Options());
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->healthcheck_port(), -1);
}

DeviceHealth Device(const std::string& name, DeviceHealthStatus health) {
  DeviceHealth d;
  d.pool_name = "node-1";
  d.device_name = name;
  d.health = health;
  d.last_updated = std::chrono::system_clock::time_point(std::chrono::seconds(1700000000));
  d.health_check_timeout = 60s;
  return d;
}

TEST_F(PluginServerTest, NodeWatchResourcesReceivesLatestThenPushedReports) {
  auto server = StartServer(Options());
  ASSERT_NE(server, nullptr);
  // Published before the stream opens: the stream starts with it.
  server->PublishDeviceHealth({Device("gpu-0", DeviceHealthStatus::kHealthy)});

  auto stub = ::v1::DRAResourceHealth::NewStub(UnixChannel(server->dra_socket()));
  grpc::ClientContext context;
  WithDeadline(context, 10s);
  auto reader = stub->NodeWatchResources(&context, ::v1::NodeWatchResourcesRequest());
  ::v1::NodeWatchResourcesResponse message;
  ASSERT_TRUE(reader->Read(&message));
  ASSERT_EQ(message.devices_size(), 1);
  EXPECT_EQ(message.devices(0).device().device_name(), "gpu-0");
  EXPECT_EQ(message.devices(0).health(), ::v1::HEALTHY);

  std::string long_message(2000, 'x');
  DeviceHealth sick = Device("gpu-1", DeviceHealthStatus::kUnhealthy);
  sick.message = long_message;
  server->PublishDeviceHealth({Device("gpu-0", DeviceHealthStatus::kHealthy), sick});
  ASSERT_TRUE(reader->Read(&message));
  ASSERT_EQ(message.devices_size(), 2);
  const auto& d = message.devices(1);
  EXPECT_EQ(d.device().pool_name(), "node-1");
  EXPECT_EQ(d.device().device_name(), "gpu-1");
  EXPECT_EQ(d.health(), ::v1::UNHEALTHY);
  EXPECT_EQ(d.last_updated_time(), 1700000000);
  EXPECT_EQ(d.health_check_timeout_seconds(), 60);
  EXPECT_EQ(d.message(), long_message.substr(0, 1021) + "...");

  // v1alpha1 carries the same report.
  auto alpha = ::v1alpha1::DRAResourceHealth::NewStub(UnixChannel(server->dra_socket()));
  grpc::ClientContext alpha_context;
  WithDeadline(alpha_context, 10s);
  auto alpha_reader = alpha->NodeWatchResources(&alpha_context, ::v1alpha1::NodeWatchResourcesRequest());
  ::v1alpha1::NodeWatchResourcesResponse alpha_message;
  ASSERT_TRUE(alpha_reader->Read(&alpha_message));
  ASSERT_EQ(alpha_message.devices_size(), 2);
  EXPECT_EQ(alpha_message.devices(1).health(), ::v1alpha1::UNHEALTHY);

  server->PublishDeviceHealth({Device("gpu-0", DeviceHealthStatus::kUnknown)});
  ASSERT_TRUE(alpha_reader->Read(&alpha_message));
  ASSERT_EQ(alpha_message.devices_size(), 1);
  EXPECT_EQ(alpha_message.devices(0).health(), ::v1alpha1::UNKNOWN);
  context.TryCancel();
  alpha_context.TryCancel();
}

TEST_F(PluginServerTest, DestructorReturnsPromptlyWithOpenHealthStreams) {
  PluginServerOptions o = Options();
  o.shutdown_grace = 20s;  // a hang on the open stream would show as ~20 s
  o.healthcheck_port = 0;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  server->PublishDeviceHealth({Device("gpu-0", DeviceHealthStatus::kHealthy)});
  auto stub = ::v1::DRAResourceHealth::NewStub(UnixChannel(server->dra_socket()));
  grpc::ClientContext context;
  WithDeadline(context, 60s);
  auto reader = stub->NodeWatchResources(&context, ::v1::NodeWatchResourcesRequest());
  ::v1::NodeWatchResourcesResponse message;
  ASSERT_TRUE(reader->Read(&message));  // the stream is open on the server

  const fs::path dra = server->dra_socket();
  const fs::path reg = server->registration_socket();
  const auto start = std::chrono::steady_clock::now();
  server.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);

  // The stream ended cleanly, and the sockets are gone.
  EXPECT_FALSE(reader->Read(&message));
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_FALSE(fs::exists(dra));
  EXPECT_FALSE(fs::exists(reg));
}

// Polls `done` until it holds or `timeout` passes (the server rebinds on an
// inotify event; the client can only observe the result).
template <typename F>
bool Eventually(F done, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return done();
}

TEST_F(PluginServerTest, RemovedSocketsAreBoundAgain) {
  auto server = StartServer(Options());
  ASSERT_NE(server, nullptr);

  ASSERT_TRUE(fs::remove(server->dra_socket()));
  EXPECT_TRUE(Eventually([&] {
    drav1::NodePrepareResourcesResponse response;
    return IsSocket(server->dra_socket()) && PrepareV1(*server, {}, &response).ok();
  }));
  EXPECT_GE(server->rebinds(), 1);

  ASSERT_TRUE(fs::remove(server->registration_socket()));
  EXPECT_TRUE(Eventually([&] {
    pluginregistration::PluginInfo info;
    return IsSocket(server->registration_socket()) && GetInfo(*server, &info).ok();
  }));
  EXPECT_GE(server->rebinds(), 2);

  // A whole directory removed: it is re-created with the socket in it. Moved
  // away in one step first: a recursive remove races with the server, which
  // may bind the socket again in the directory before it is gone.
  const fs::path gone = Options().plugin_dir.string() + ".gone";
  fs::rename(Options().plugin_dir, gone);
  fs::remove_all(gone);
  EXPECT_TRUE(Eventually([&] {
    drav1::NodePrepareResourcesResponse response;
    return IsSocket(server->dra_socket()) && PrepareV1(*server, {}, &response).ok();
  }));
}

TEST_F(PluginServerTest, StaleSocketFilesAreReplacedAndDirectoriesCreated) {
  PluginServerOptions o = Options();
  fs::create_directories(o.plugin_dir);
  std::ofstream(o.plugin_dir / "dra.sock") << "stale";
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(IsSocket(server->dra_socket()));
  EXPECT_TRUE(IsSocket(server->registration_socket()));
}

TEST_F(PluginServerTest, StartRejectsBadOptions) {
  PluginServerOptions relative = Options();
  relative.registrar_dir = "plugins_registry";
  EXPECT_EQ(PluginServer::Start(relative, driver_).status().code(), common::StatusCode::kInvalidArgument);

  PluginServerOptions unnamed = Options();
  unnamed.driver_name.clear();
  EXPECT_EQ(PluginServer::Start(unnamed, driver_).status().code(), common::StatusCode::kInvalidArgument);

  PluginServerOptions long_path = Options();
  long_path.plugin_dir = dir_.path() / std::string(120, 'd');
  EXPECT_EQ(PluginServer::Start(long_path, driver_).status().code(), common::StatusCode::kInvalidArgument);

  PluginServerOptions no_version = Options();
  no_version.serve_v1 = false;
  no_version.serve_v1beta1 = false;
  EXPECT_EQ(PluginServer::Start(no_version, driver_).status().code(), common::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nvdra::kubeletplugin
