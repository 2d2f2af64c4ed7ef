// gpu-kubelet-plugin as a process against the real API server, with the mock
// NVML (h100-sxm profile) in a fake driver root and this test playing the
// kubelet over the plugin's gRPC socket (DRAPlugin v1). Covers what a node
// must never get wrong: idempotent prepare, unprepare of unknown claims, the
// overlap guard, invalid configs, crashes at every step of Prepare and
// Unprepare (NVDRA_TEST_CRASH_AT), a reboot (boot id change), and a claim
// deleted while the plugin was down.

#include <netinet/in.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cluster_client.h"
#include "common/crash_point.h"
#include "gpu_plugin_harness.h"
#include "k8s/client.h"
#include "pkg/apis/dra-health/v1/api.grpc.pb.h"
#include "pkg/apis/dra/v1/api.grpc.pb.h"

namespace nvdra::testing {
namespace {

namespace fs = std::filesystem;
namespace drav1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
using nlohmann::json;

constexpr const char* kNamespace = "gpu-plugin-test";
constexpr const char* kNodeName = "gpu-node-a";
constexpr const char* kDriver = "gpu.nvidia.com";

// stdout and stderr of a shell command.
std::string RunOutput(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  ::pclose(pipe);
  return out;
}

// Plays the kubelet for the MPS control daemons' pods, which nothing runs at
// this tier: a pod that appears is marked Running and Ready (the ReplicaSet
// and Deployment controllers then count it), a pod being deleted is removed
// at once (the kubelet's final delete), so a foreground deletion of the
// Deployment completes.
class DaemonPodKubelet {
 public:
  explicit DaemonPodKubelet(k8s::Client& client)
      : client_(client), thread_([this](std::stop_token stop) { Run(stop); }) {}

 private:
  void Run(std::stop_token stop) {
    while (!stop.stop_requested()) {
      k8s::WatchOptions options;
      options.label_selector = "app";
      options.timeout_seconds = 30;
      auto stream = client_.Watch(k8s::resources::kPods, kNamespace, options, stop);
      if (!stream.ok()) return;  // cancelled, or no server: nothing to play
      while (true) {
        auto event = (*stream)->Next(stop);
        if (!event.ok() || !event->has_value()) break;
        if ((*event)->type == k8s::WatchEventType::kAdded || (*event)->type == k8s::WatchEventType::kModified) {
          Serve((*event)->object);
        }
      }
    }
  }

  void Serve(json pod) {
    const std::string name = pod["metadata"]["name"].get<std::string>();
    if (name.rfind("mps-control-daemon-", 0) != 0) return;
    if (pod["metadata"].contains("deletionTimestamp")) {
      k8s::DeleteOptions now;
      now.grace_period_seconds = 0;
      (void)client_.Delete(k8s::resources::kPods, kNamespace, name, now);
      return;
    }
    if (pod["status"].value("phase", "") == "Running") return;
    const std::string at = "2026-01-01T00:00:00Z";
    pod["status"]["phase"] = "Running";
    pod["status"]["conditions"] = json::array({
        {{"type", "PodScheduled"}, {"status", "True"}, {"lastTransitionTime", at}},
        {{"type", "Initialized"}, {"status", "True"}, {"lastTransitionTime", at}},
        {{"type", "ContainersReady"}, {"status", "True"}, {"lastTransitionTime", at}},
        {{"type", "Ready"}, {"status", "True"}, {"lastTransitionTime", at}},
    });
    pod["status"]["containerStatuses"] = json::array({{{"name", "mps-control-daemon"},
                                                       {"ready", true},
                                                       {"started", true},
                                                       {"restartCount", 0},
                                                       {"image", pod["spec"]["containers"][0]["image"]},
                                                       {"imageID", ""},
                                                       {"state", {{"running", {{"startedAt", at}}}}}}});
    k8s::WriteOptions status;
    status.subresource = "status";
    (void)client_.Update(k8s::resources::kPods, kNamespace, pod, status);
  }

  k8s::Client& client_;
  std::jthread thread_;
};

class GpuPluginTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared_ = new ClusterClient();
    std::string error = StartClusterClient(*shared_, kNamespace);
    if (!error.empty()) {
      setup_error_ = new std::string(error);
      return;
    }
    // The Node the plugin's slices name as owner.
    json node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", kNodeName}}}};
    auto created = shared_->client->Create(k8s::resources::kNodes, "", node);
    if (!created.ok()) setup_error_ = new std::string(created.status().ToString());
  }
  static void TearDownTestSuite() {
    delete shared_;
    shared_ = nullptr;
  }

  void SetUp() override {
    if (setup_error_ != nullptr) GTEST_SKIP() << "no cluster: " << *setup_error_;
    PluginNodeDir node;
    const std::string error =
        MakePluginNodeDir("gpuplugin", NVDRA_MOCKNVML_MAKE_DRIVER_ROOT,
                          std::string(NVDRA_MOCKNVML_PROFILES_DIR) + "/h100-sxm.json", NVDRA_MOCKNVML_PATH, &node);
    dir_ = node.dir;
    node_ = node;
    ASSERT_EQ(error, "");
    driver_root_ = node.driver_root;
    plugin_ = std::make_unique<PluginProcess>(
        GpuPluginArgv(GPU_KUBELET_PLUGIN, node, kNodeName, shared_->cluster->kubeconfig().string()),
        GpuPluginEnv(node), node.log);
  }

  void TearDown() override {
    plugin_.reset();
    kernel_.reset();
    if ((HasFailure() || std::getenv("NVDRA_TEST_VERBOSE") != nullptr) && !dir_.empty()) {
      std::cerr << "--- plugin log ---\n" << ReadFile(dir_ / "plugin.log") << "\n";
    }
    for (const std::string& name : created_claims_) {
      (void)shared_->client->Delete(k8s::resources::kResourceClaims, kNamespace, name);
    }
    if (!dir_.empty() && !HasFailure()) fs::remove_all(dir_);
  }

  fs::path PluginDir() const { return dir_ / "plugins" / kDriver; }
  fs::path SpecPath(const std::string& uid) const {
    return dir_ / "cdi" / ("k8s.gpu.nvidia.com-claim_" + uid + ".yaml");
  }

  // Starts the plugin and connects to its DRA socket.
  void StartPlugin(const std::string& crash_at = "") {
    stub_.reset();
    channel_.reset();
    ASSERT_TRUE(plugin_->Start(crash_at));
    // A channel of its own: with gRPC's global subchannel pool a new channel
    // could reuse the previous process' connection and seem ready at once.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel_ = grpc::CreateCustomChannel("unix://" + (PluginDir() / "dra.sock").string(),
                                         grpc::InsecureChannelCredentials(), args);
    // The socket appears once start-up (discovery, slices, reconciliation)
    // is done; gRPC keeps retrying the connection until the deadline.
    ASSERT_TRUE(channel_->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(60)))
        << "plugin did not serve " << (PluginDir() / "dra.sock") << "\n"
        << ReadFile(dir_ / "plugin.log");
    stub_ = drav1::DRAPlugin::NewStub(channel_);
  }

  // Creates a claim for one device and allocates `device` to it, as the
  // scheduler would. `config` is an optional opaque config's parameters.
  json CreateAllocatedClaim(const std::string& name, const std::string& device,
                            const std::optional<json>& config = std::nullopt) {
    // Deleted by TearDown even when the allocation below fails.
    created_claims_.push_back(name);
    auto claim = nvdra::testing::CreateAllocatedClaim(*shared_->client, kNamespace, kNodeName, kDriver, name,
                                                      device, config);
    EXPECT_TRUE(claim.ok()) << claim.status().ToString();
    return claim.ok() ? *claim : json();
  }

  static drav1::Claim Ref(const json& claim) { return ClaimRef(claim); }

  grpc::Status Prepare(const json& claim, drav1::NodePrepareResourceResponse* out) {
    drav1::NodePrepareResourcesRequest request;
    *request.add_claims() = Ref(claim);
    drav1::NodePrepareResourcesResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    grpc::Status status = stub_->NodePrepareResources(&context, request, &response);
    if (status.ok()) *out = response.claims().at(claim["metadata"]["uid"].get<std::string>());
    return status;
  }

  grpc::Status Unprepare(const json& claim, std::string* error) {
    drav1::NodeUnprepareResourcesRequest request;
    *request.add_claims() = Ref(claim);
    drav1::NodeUnprepareResourcesResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    grpc::Status status = stub_->NodeUnprepareResources(&context, request, &response);
    if (status.ok()) *error = response.claims().at(claim["metadata"]["uid"].get<std::string>()).error();
    return status;
  }

  // checkpointState of a claim in checkpoint.json's v2 view, "" when absent.
  std::string CheckpointState(const std::string& uid) const {
    json checkpoint = json::parse(ReadFile(PluginDir() / "checkpoint.json"), nullptr, false);
    if (checkpoint.is_discarded()) return "<unreadable>";
    const json& claims = checkpoint["v2"]["preparedClaims"];
    if (!claims.is_object() || !claims.contains(uid)) return "";
    return claims[uid]["checkpointState"].get<std::string>();
  }

  static std::string Uid(const json& claim) { return claim["metadata"]["uid"].get<std::string>(); }

  // The plugin, not yet started, with --feature-gates=`gates`.
  void UseFeatureGates(const std::string& gates) {
    std::vector<std::string> argv =
        GpuPluginArgv(GPU_KUBELET_PLUGIN, node_, kNodeName, shared_->cluster->kubeconfig().string());
    argv.push_back("--feature-gates=" + gates);
    plugin_ = std::make_unique<PluginProcess>(argv, GpuPluginEnv(node_), node_.log);
  }

  // Runs the driver root's (simulated) nvidia-smi; its output.
  std::string NvidiaSmi(const std::string& args) const { return RunOutput(NvidiaSmiCommand() + " " + args); }
  std::string NvidiaSmiCommand() const { return (driver_root_ / "usr/bin/nvidia-smi").string(); }

  // The UUID of GPU `index` as nvidia-smi -L lists it.
  std::string GpuUuid(int index) const {
    const std::string line = NvidiaSmi("-L -i " + std::to_string(index));
    const std::size_t at = line.find("UUID: ");
    return at == std::string::npos ? "" : line.substr(at + 6, line.find(')', at) - at - 6);
  }

  // computePolicy[uuid] of the node's mock NVML state file (the compute mode
  // and time slice the simulated nvidia-smi recorded); {} when none.
  json ComputePolicy(const std::string& uuid) const {
    json state = json::parse(ReadFile(driver_root_ / "mock-nvml/state.json"), nullptr, false);
    if (state.is_discarded() || !state.contains("computePolicy") || !state["computePolicy"].contains(uuid)) {
      return json::object();
    }
    return state["computePolicy"][uuid];
  }

  // The plugin, not yet started, with MPSSupport: its daemons' Deployments
  // go to this test's namespace, their template comes from the checkout.
  void UseMps() {
    std::vector<std::string> argv =
        GpuPluginArgv(GPU_KUBELET_PLUGIN, node_, kNodeName, shared_->cluster->kubeconfig().string());
    argv.push_back("--feature-gates=MPSSupport=true");
    argv.push_back(std::string("--namespace=") + kNamespace);
    std::vector<std::string> env = GpuPluginEnv(node_);
    env.push_back("NVDRA_TEMPLATES_DIR=" NVDRA_SOURCE_DIR "/templates");
    plugin_ = std::make_unique<PluginProcess>(argv, env, node_.log);
  }

  // The plugin, not yet started, with DynamicMIG.
  void UseDynamicMig() {
    std::vector<std::string> argv =
        GpuPluginArgv(GPU_KUBELET_PLUGIN, node_, kNodeName, shared_->cluster->kubeconfig().string());
    argv.push_back("--feature-gates=DynamicMIG=true");
    // The driver root's /proc stand-in (nvidia-caps major, MIG capability
    // files), as the chart passes it on simulated nodes.
    std::vector<std::string> env = GpuPluginEnv(node_);
    env.push_back("ALT_PROC_DEVICES_PATH=" + (driver_root_ / "proc/devices").string());
    plugin_ = std::make_unique<PluginProcess>(argv, env, node_.log);
  }

  // The GPU instances the mock NVML's state file records for `uuid`, as
  // "<profileId>@<start>" (empty while the GPU has none).
  std::vector<std::string> GpuInstances(const std::string& uuid) const {
    std::vector<std::string> out;
    json state = json::parse(ReadFile(driver_root_ / "mock-nvml/state.json"), nullptr, false);
    if (state.is_discarded() || !state.contains("gpus") || !state["gpus"].contains(uuid)) return out;
    for (const json& gi : state["gpus"][uuid].value("gpuInstances", json::array())) {
      out.push_back(std::to_string(gi["profileId"].get<int>()) + "@" + std::to_string(gi["start"].get<int>()));
    }
    return out;
  }
  int MigModeOf(const std::string& uuid) const {
    json state = json::parse(ReadFile(driver_root_ / "mock-nvml/state.json"), nullptr, false);
    if (state.is_discarded() || !state.contains("gpus") || !state["gpus"].contains(uuid)) return -1;
    return state["gpus"][uuid]["migMode"]["current"].get<int>();
  }

  // The plugin, not yet started, with PassthroughSupport and DeviceMetadata
  // over the node's mock sysfs (its host root is the driver root), which the
  // simulated PCI driver core serves.
  void UseVfio() {
    std::vector<std::string> argv =
        GpuPluginArgv(GPU_KUBELET_PLUGIN, node_, kNodeName, shared_->cluster->kubeconfig().string());
    argv.push_back("--feature-gates=PassthroughSupport=true,DeviceMetadata=true");
    argv.push_back("--host-root=" + driver_root_.string());
    plugin_ = std::make_unique<PluginProcess>(argv, GpuPluginEnv(node_), node_.log);
    kernel_ = StartSimSysfs(node_);
    ASSERT_NE(kernel_, nullptr);
  }
  std::string PciDriverOf(const std::string& bus_id) const {
    std::error_code ec;
    return fs::read_symlink(driver_root_ / "sys/bus/pci/devices" / bus_id / "driver", ec).filename().string();
  }

  // The device names of the node's slices of this driver.
  std::set<std::string> PublishedDevices() const {
    std::set<std::string> out;
    auto slices = shared_->client->List(k8s::resources::kResourceSlices, "",
                                        k8s::ListOptions{.field_selector = std::string("spec.nodeName=") + kNodeName +
                                                                           ",spec.driver=" + kDriver});
    if (!slices.ok()) return out;
    for (const json& slice : (*slices)["items"]) {
      for (const json& device : slice["spec"].value("devices", json::array())) out.insert(device["name"]);
    }
    return out;
  }
  // Waits until `done(PublishedDevices())`, woken by a watch of the node's
  // slices (not a poll); false after `timeout`.
  bool WaitPublished(const std::function<bool(const std::set<std::string>&)>& done,
                     std::chrono::seconds timeout = std::chrono::seconds(30)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const std::string selector = std::string("spec.nodeName=") + kNodeName + ",spec.driver=" + kDriver;
    while (std::chrono::steady_clock::now() < deadline) {
      auto list = shared_->client->List(k8s::resources::kResourceSlices, "", k8s::ListOptions{.field_selector = selector});
      if (!list.ok()) return false;
      std::set<std::string> devices;
      for (const json& slice : (*list)["items"]) {
        for (const json& device : slice["spec"].value("devices", json::array())) devices.insert(device["name"]);
      }
      if (done(devices)) return true;
      k8s::WatchOptions options;
      options.field_selector = selector;
      options.resource_version = (*list)["metadata"]["resourceVersion"].get<std::string>();
      options.timeout_seconds = 5;
      auto stream = shared_->client->Watch(k8s::resources::kResourceSlices, "", options);
      if (!stream.ok()) continue;
      auto event = (*stream)->Next();  // any change: list again
      (void)event;
    }
    return false;
  }

  static json MpsConfig() {
    return json{{"apiVersion", "resource.nvidia.com/v1beta1"},
                {"kind", "GpuConfig"},
                {"sharing",
                 {{"strategy", "MPS"},
                  {"mpsConfig", {{"defaultActiveThreadPercentage", 50}, {"defaultPinnedDeviceMemoryLimit", "10Gi"}}}}}};
  }

  // The MPS daemon Deployments of `claim` in the test namespace.
  std::vector<json> DaemonDeployments(const json& claim) const {
    std::vector<json> out;
    auto list = shared_->client->List(k8s::resources::kDeployments, kNamespace);
    if (!list.ok()) return out;
    for (const json& item : (*list)["items"]) {
      if (item["metadata"]["name"].get<std::string>().rfind("mps-control-daemon-" + Uid(claim) + "-", 0) == 0) {
        out.push_back(item);
      }
    }
    return out;
  }

  // Blocks until Deployment `name` of the test namespace is gone (a watch
  // from the current state, not a poll); false after `timeout`.
  bool WaitDeploymentGone(const std::string& name, std::chrono::seconds timeout = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      auto current = shared_->client->Get(k8s::resources::kDeployments, kNamespace, name);
      if (!current.ok()) return k8s::IsNotFound(current.status());
      k8s::WatchOptions options;
      options.field_selector = "metadata.name=" + name;
      options.resource_version = (*current)["metadata"]["resourceVersion"].get<std::string>();
      options.timeout_seconds = 10;
      auto stream = shared_->client->Watch(k8s::resources::kDeployments, kNamespace, options);
      if (!stream.ok()) continue;
      while (true) {
        auto event = (*stream)->Next();
        if (!event.ok() || !event->has_value()) break;
        if ((*event)->type == k8s::WatchEventType::kDeleted) return true;
      }
    }
    return false;
  }

  static json TimeSlicingConfig(const char* interval) {
    return json{{"apiVersion", "resource.nvidia.com/v1beta1"},
                {"kind", "GpuConfig"},
                {"sharing", {{"strategy", "TimeSlicing"}, {"timeSlicingConfig", {{"interval", interval}}}}}};
  }

  static ClusterClient* shared_;
  static std::string* setup_error_;
  fs::path dir_;
  PluginNodeDir node_;
  fs::path driver_root_;
  std::unique_ptr<PluginProcess> plugin_;
  std::unique_ptr<PluginProcess> kernel_;  // simsysfs, for VFIO tests
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<drav1::DRAPlugin::Stub> stub_;
  std::vector<std::string> created_claims_;
};

ClusterClient* GpuPluginTest::shared_ = nullptr;
std::string* GpuPluginTest::setup_error_ = nullptr;

TEST_F(GpuPluginTest, PreparesIdempotentlyAndUnpreparesAGpu) {
  StartPlugin();
  json claim = CreateAllocatedClaim("one-gpu", "gpu-0");
  ASSERT_FALSE(claim.is_null());
  const std::string uid = Uid(claim);

  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(claim, &response).ok());
  ASSERT_EQ(response.error(), "");
  ASSERT_EQ(response.devices_size(), 1);
  EXPECT_EQ(response.devices(0).device_name(), "gpu-0");
  EXPECT_EQ(response.devices(0).pool_name(), kNodeName);
  ASSERT_EQ(response.devices(0).request_names_size(), 1);
  EXPECT_EQ(response.devices(0).request_names(0), "gpu");
  ASSERT_EQ(response.devices(0).cdi_device_ids_size(), 1);
  EXPECT_EQ(response.devices(0).cdi_device_ids(0), "k8s.gpu.nvidia.com/claim=" + uid + "-gpu-0");
  ASSERT_TRUE(fs::exists(SpecPath(uid)));
  EXPECT_NE(ReadFile(SpecPath(uid)).find("/dev/nvidia0"), std::string::npos) << ReadFile(SpecPath(uid));
  EXPECT_EQ(CheckpointState(uid), "PrepareCompleted");

  // Idempotent: the same answer again.
  drav1::NodePrepareResourceResponse again;
  ASSERT_TRUE(Prepare(claim, &again).ok());
  EXPECT_EQ(again.SerializeAsString(), response.SerializeAsString());

  std::string error;
  ASSERT_TRUE(Unprepare(claim, &error).ok());
  EXPECT_EQ(error, "");
  EXPECT_FALSE(fs::exists(SpecPath(uid)));
  EXPECT_EQ(CheckpointState(uid), "");
  // Unpreparing what is not prepared is a success.
  ASSERT_TRUE(Unprepare(claim, &error).ok());
  EXPECT_EQ(error, "");
}

TEST_F(GpuPluginTest, RefusesADeviceAnotherClaimHolds) {
  StartPlugin();
  json first = CreateAllocatedClaim("holder", "gpu-1");
  json second = CreateAllocatedClaim("intruder", "gpu-1");
  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(first, &response).ok());
  ASSERT_EQ(response.error(), "");
  ASSERT_TRUE(Prepare(second, &response).ok());
  EXPECT_NE(response.error().find("already prepared for claim " + std::string(kNamespace) + "/holder"),
            std::string::npos)
      << response.error();
  EXPECT_FALSE(fs::exists(SpecPath(Uid(second))));
}

TEST_F(GpuPluginTest, InvalidConfigNamesTheFieldAndLeavesNothingBehind) {
  StartPlugin();
  json claim = CreateAllocatedClaim(
      "bad-config", "gpu-2",
      json{{"apiVersion", "resource.nvidia.com/v1beta1"}, {"kind", "GpuConfig"}, {"sharing", {{"stratgy", "MPS"}}}});
  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(claim, &response).ok());
  EXPECT_NE(response.error().find("sharing.stratgy: unknown field"), std::string::npos) << response.error();

  json unsupported = CreateAllocatedClaim(
      "mps-config", "gpu-3",
      json{{"apiVersion", "resource.nvidia.com/v1beta1"}, {"kind", "GpuConfig"}, {"sharing", {{"strategy", "MPS"}}}});
  ASSERT_TRUE(Prepare(unsupported, &response).ok());
  EXPECT_NE(response.error().find("MPS needs the feature gate MPSSupport"), std::string::npos) << response.error();
  EXPECT_NE(response.error().find("featureGates.MPSSupport=true"), std::string::npos) << response.error();

  // The failed attempts can be unprepared, leaving no entry (upstream #1346).
  std::string error;
  ASSERT_TRUE(Unprepare(claim, &error).ok());
  EXPECT_EQ(error, "");
  EXPECT_EQ(CheckpointState(Uid(claim)), "");
}

// TimeSlicing on a full GPU, as upstream: Prepare sets compute mode DEFAULT
// and the interval through the driver root's nvidia-smi and records
// timeSliceApplied; Unprepare sets the interval back to Default. With the
// gate off the same claim fails, naming the gate and the chart value.
TEST_F(GpuPluginTest, TimeSlicesAFullGpuAndResetsItAtUnprepare) {
  const std::string uuid = GpuUuid(7);
  ASSERT_FALSE(uuid.empty()) << NvidiaSmi("-L");
  // Another tenant left the GPU in EXCLUSIVE_PROCESS.
  NvidiaSmi("-i " + uuid + " -c EXCLUSIVE_PROCESS");
  ASSERT_EQ(ComputePolicy(uuid)["computeMode"], 3);

  StartPlugin();
  json gated = CreateAllocatedClaim("time-sliced-gated", "gpu-7", TimeSlicingConfig("Long"));
  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(gated, &response).ok());
  EXPECT_NE(response.error().find("TimeSlicing needs the feature gate TimeSlicingSettings"), std::string::npos)
      << response.error();
  EXPECT_EQ(ComputePolicy(uuid)["computeMode"], 3) << "a refused claim changed the GPU";
  std::string error;
  ASSERT_TRUE(Unprepare(gated, &error).ok());
  plugin_->Stop();

  UseFeatureGates("TimeSlicingSettings=true");
  StartPlugin();
  json claim = CreateAllocatedClaim("time-sliced", "gpu-7", TimeSlicingConfig("Long"));
  ASSERT_TRUE(Prepare(claim, &response).ok());
  ASSERT_EQ(response.error(), "");
  ASSERT_EQ(response.devices_size(), 1);
  EXPECT_EQ(ComputePolicy(uuid), (json{{"computeMode", 0}, {"timeSlice", 3}}));
  EXPECT_NE(NvidiaSmi("-q -i " + uuid).find("Compute Mode                                       : Default"), std::string::npos)
      << NvidiaSmi("-q -i " + uuid);
  json checkpoint = json::parse(ReadFile(PluginDir() / "checkpoint.json"));
  const json& group = checkpoint["v2"]["preparedClaims"][Uid(claim)]["preparedDevices"][0];
  EXPECT_EQ(group["configState"], (json{{"timeSliceApplied", true}})) << group.dump();

  ASSERT_TRUE(Unprepare(claim, &error).ok());
  EXPECT_EQ(error, "");
  EXPECT_EQ(ComputePolicy(uuid)["timeSlice"], 0);
  EXPECT_EQ(CheckpointState(Uid(claim)), "");
}

// A kill after the compute mode or the interval changed, before the
// checkpoint recorded it: after the restart the retry converges, and the
// unprepare leaves the interval at Default.
TEST_F(GpuPluginTest, SurvivesACrashWhileTimeSlicing) {
  const std::string uuid = GpuUuid(6);
  UseFeatureGates("TimeSlicingSettings=true");
  int index = 0;
  for (const std::string point : {"prepare-after-compute-mode", "prepare-after-time-slice"}) {
    SCOPED_TRACE(point);
    json claim = CreateAllocatedClaim("ts-crash-" + std::to_string(index++), "gpu-6", TimeSlicingConfig("Short"));
    StartPlugin(point);
    drav1::NodePrepareResourceResponse response;
    EXPECT_FALSE(Prepare(claim, &response).ok()) << "the plugin answered instead of crashing";
    EXPECT_EQ(plugin_->WaitExit(std::chrono::seconds(30)), common::kCrashPointExitCode);
    EXPECT_EQ(CheckpointState(Uid(claim)), "PrepareStarted");

    StartPlugin();
    ASSERT_TRUE(Prepare(claim, &response).ok());
    ASSERT_EQ(response.error(), "");
    EXPECT_EQ(ComputePolicy(uuid), (json{{"computeMode", 0}, {"timeSlice", 1}}));
    std::string error;
    ASSERT_TRUE(Unprepare(claim, &error).ok());
    EXPECT_EQ(error, "");
    EXPECT_EQ(ComputePolicy(uuid)["timeSlice"], 0);
    EXPECT_EQ(CheckpointState(Uid(claim)), "");
    plugin_->Stop();
  }
}

// MPS: Prepare starts a control daemon Deployment for the claim (from the
// checkout's template), waits for its pod to be Ready, records the daemon in
// the checkpoint and gives the device the daemon's pipes; Unprepare removes
// the Deployment and folders and sets the GPU's compute mode back.
TEST_F(GpuPluginTest, MpsStartsADaemonPerClaimAndUnprepareStopsIt) {
  DaemonPodKubelet kubelet(*shared_->client);
  const std::string uuid = GpuUuid(5);
  UseMps();
  StartPlugin();
  json claim = CreateAllocatedClaim("mps-claim", "gpu-5", MpsConfig());
  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(claim, &response).ok());
  ASSERT_EQ(response.error(), "");
  EXPECT_EQ(CheckpointState(Uid(claim)), "PrepareCompleted");
  EXPECT_EQ(ComputePolicy(uuid)["computeMode"], 3);  // EXCLUSIVE_PROCESS

  const std::vector<json> deployments = DaemonDeployments(claim);
  ASSERT_EQ(deployments.size(), 1u);
  const json& deployment = deployments[0];
  const std::string name = deployment["metadata"]["name"];
  const std::string id = name.substr(std::string("mps-control-daemon-").size());
  EXPECT_EQ(deployment["metadata"]["labels"]["app"], name);
  EXPECT_EQ(deployment["spec"]["template"]["spec"]["nodeName"], kNodeName);
  EXPECT_EQ(deployment["spec"]["template"]["spec"]["containers"][0]["image"], "test/image:v1");
  json checkpoint = json::parse(ReadFile(PluginDir() / "checkpoint.json"));
  EXPECT_EQ(checkpoint["v2"]["preparedClaims"][Uid(claim)]["preparedDevices"][0]["configState"]["mpsControlDaemonID"],
            id);
  const fs::path folder = PluginDir() / "mps" / id;
  EXPECT_TRUE(fs::is_directory(folder / "pipe"));
  const std::string spec = ReadFile(SpecPath(Uid(claim)));
  EXPECT_NE(spec.find("CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"), std::string::npos) << spec;
  EXPECT_NE(spec.find((folder / "pipe").string()), std::string::npos) << spec;

  std::string error;
  ASSERT_TRUE(Unprepare(claim, &error).ok());
  EXPECT_EQ(error, "");
  EXPECT_TRUE(WaitDeploymentGone(name));
  EXPECT_FALSE(fs::exists(folder));
  EXPECT_EQ(ComputePolicy(uuid)["computeMode"], 0);
  EXPECT_EQ(CheckpointState(Uid(claim)), "");
}

// A kill at each new MPS step (folders made, compute mode set, Deployment
// created, daemon Ready but the checkpoint not yet written): after a
// restart the kubelet's retry prepares the claim with one daemon, and
// Unprepare leaves no Deployment, folder or compute mode behind.
TEST_F(GpuPluginTest, SurvivesACrashAtEveryMpsStep) {
  DaemonPodKubelet kubelet(*shared_->client);
  const std::string uuid = GpuUuid(5);
  int index = 0;
  for (const std::string point :
       {"mps-after-folders", "mps-after-compute-mode", "mps-after-deployment", "prepare-after-devices"}) {
    SCOPED_TRACE(point);
    json claim = CreateAllocatedClaim("mps-crash-" + std::to_string(index++), "gpu-5", MpsConfig());
    UseMps();
    StartPlugin(point);
    drav1::NodePrepareResourceResponse response;
    EXPECT_FALSE(Prepare(claim, &response).ok()) << "the plugin answered instead of crashing";
    EXPECT_EQ(plugin_->WaitExit(std::chrono::seconds(30)), common::kCrashPointExitCode);
    EXPECT_EQ(CheckpointState(Uid(claim)), "PrepareStarted");

    UseMps();
    StartPlugin();
    ASSERT_TRUE(Prepare(claim, &response).ok());
    ASSERT_EQ(response.error(), "");
    EXPECT_EQ(ComputePolicy(uuid)["computeMode"], 3);
    const std::vector<json> deployments = DaemonDeployments(claim);
    ASSERT_EQ(deployments.size(), 1u);
    const std::string name = deployments[0]["metadata"]["name"];
    std::string error;
    ASSERT_TRUE(Unprepare(claim, &error).ok());
    EXPECT_EQ(error, "");
    EXPECT_TRUE(WaitDeploymentGone(name));
    EXPECT_TRUE(fs::is_empty(PluginDir() / "mps"));
    EXPECT_EQ(ComputePolicy(uuid)["computeMode"], 0);
    EXPECT_EQ(CheckpointState(Uid(claim)), "");
    plugin_->Stop();
  }
}

// Daemons no checkpointed claim holds (a discarded checkpoint, an entry
// removed by hand) are removed when the plugin starts: its Deployment on
// this node and its folder, with the GPU it recorded set back to DEFAULT.
// Another node's daemon is left alone.
TEST_F(GpuPluginTest, RemovesMpsDaemonsNoClaimHoldsAtStartUp) {
  const std::string uuid = GpuUuid(3);
  ASSERT_EQ(RunOutput(NvidiaSmiCommand() + " -i " + uuid + " -c EXCLUSIVE_PROCESS").find("rror"), std::string::npos);
  const std::string leftover = "9f0c2f1e-0000-4000-8000-000000000001-abcde";
  const std::string elsewhere = "9f0c2f1e-0000-4000-8000-000000000002-abcde";
  const fs::path folder = PluginDir() / "mps" / leftover;
  fs::create_directories(folder / "pipe");
  { std::ofstream(folder / "gpus") << uuid << "\n"; }
  for (const auto& [id, node] : {std::pair{leftover, std::string(kNodeName)}, std::pair{elsewhere, std::string("gpu-node-b")}}) {
    json deployment = {
        {"apiVersion", "apps/v1"},
        {"kind", "Deployment"},
        {"metadata", {{"name", "mps-control-daemon-" + id}, {"labels", {{"app", "mps-control-daemon-" + id}}}}},
        {"spec",
         {{"replicas", 0},
          {"selector", {{"matchLabels", {{"app", "mps-control-daemon-" + id}}}}},
          {"template",
           {{"metadata", {{"labels", {{"app", "mps-control-daemon-" + id}}}}},
            {"spec", {{"nodeName", node}, {"containers", json::array({{{"name", "c"}, {"image", "x"}}})}}}}}}}};
    ASSERT_TRUE(shared_->client->Create(k8s::resources::kDeployments, kNamespace, deployment).ok());
  }
  UseMps();
  StartPlugin();  // serves after its first reconcile, which sweeps
  EXPECT_TRUE(WaitDeploymentGone("mps-control-daemon-" + leftover));
  EXPECT_FALSE(fs::exists(folder));
  EXPECT_EQ(ComputePolicy(uuid)["computeMode"], 0);
  EXPECT_TRUE(shared_->client->Get(k8s::resources::kDeployments, kNamespace, "mps-control-daemon-" + elsewhere).ok());
  (void)shared_->client->Delete(k8s::resources::kDeployments, kNamespace, "mps-control-daemon-" + elsewhere);
}

// DynamicMIG on an H100 node (MIG capable, mode off): the full GPUs and
// every profile x placement are published, with counter sets in slices of
// their own (the 1.35+ layout this API server needs); a claim for a MIG
// device gets it made at its placement (MIG mode on first), and Unprepare
// destroys it (MIG mode off again).
TEST_F(GpuPluginTest, DynamicMigMakesTheAllocatedDeviceAndUnprepareDestroysIt) {
  const std::string uuid = GpuUuid(1);
  UseDynamicMig();
  StartPlugin();
  auto slices = shared_->client->List(k8s::resources::kResourceSlices, "",
                                      k8s::ListOptions{.field_selector = std::string("spec.nodeName=") + kNodeName +
                                                                         ",spec.driver=" + kDriver});
  ASSERT_TRUE(slices.ok());
  std::set<std::string> devices;
  int counter_slices = 0;
  for (const json& slice : (*slices)["items"]) {
    const json& spec = slice["spec"];
    if (spec.contains("sharedCounters")) {
      ++counter_slices;
      EXPECT_FALSE(spec.contains("devices") && !spec["devices"].empty()) << "1.35+: counters and devices apart";
    }
    for (const json& device : spec.value("devices", json::array())) devices.insert(device["name"].get<std::string>());
  }
  EXPECT_GE(counter_slices, 1);
  EXPECT_TRUE(devices.contains("gpu-1"));
  EXPECT_TRUE(devices.contains("gpu-1-mig-1g10gb-19-3"));
  EXPECT_TRUE(devices.contains("gpu-1-mig-7g80gb-0-0"));

  json claim = CreateAllocatedClaim("dyn-mig", "gpu-1-mig-1g10gb-19-3");
  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(claim, &response).ok());
  ASSERT_EQ(response.error(), "");
  EXPECT_EQ(GpuInstances(uuid), std::vector<std::string>{"19@3"});
  EXPECT_EQ(MigModeOf(uuid), 1);
  json checkpoint = json::parse(ReadFile(PluginDir() / "checkpoint.json"));
  const json& mig =
      checkpoint["v2"]["preparedClaims"][Uid(claim)]["preparedDevices"][0]["devices"][0]["mig"]["concrete"];
  EXPECT_EQ(mig.value("parentUUID", ""), uuid) << mig.dump();
  EXPECT_EQ(mig.value("migUUID", "").rfind("MIG-", 0), 0u) << mig.dump();
  const std::string spec = ReadFile(SpecPath(Uid(claim)));
  EXPECT_NE(spec.find("nvidia-cap"), std::string::npos) << spec;

  std::string error;
  ASSERT_TRUE(Unprepare(claim, &error).ok());
  EXPECT_EQ(error, "");
  EXPECT_TRUE(GpuInstances(uuid).empty());
  EXPECT_EQ(MigModeOf(uuid), 0);
}

// A kill right after the GPU instance is made, after the compute instance,
// and before the checkpoint records the device: the kubelet's retry after
// the restart prepares the claim with exactly one instance, and Unprepare
// leaves none.
TEST_F(GpuPluginTest, SurvivesACrashAtEveryDynamicMigStep) {
  const std::string uuid = GpuUuid(2);
  int index = 0;
  for (const std::string point : {"mig-after-gi", "mig-after-ci", "prepare-after-devices"}) {
    SCOPED_TRACE(point);
    json claim = CreateAllocatedClaim("dyn-mig-crash-" + std::to_string(index++), "gpu-2-mig-3g40gb-9-4");
    UseDynamicMig();
    StartPlugin(point);
    drav1::NodePrepareResourceResponse response;
    EXPECT_FALSE(Prepare(claim, &response).ok()) << "the plugin answered instead of crashing";
    EXPECT_EQ(plugin_->WaitExit(std::chrono::seconds(30)), common::kCrashPointExitCode);
    EXPECT_EQ(CheckpointState(Uid(claim)), "PrepareStarted");

    UseDynamicMig();
    StartPlugin();
    ASSERT_TRUE(Prepare(claim, &response).ok());
    ASSERT_EQ(response.error(), "");
    EXPECT_EQ(GpuInstances(uuid), std::vector<std::string>{"9@4"});
    std::string error;
    ASSERT_TRUE(Unprepare(claim, &error).ok());
    EXPECT_EQ(error, "");
    EXPECT_TRUE(GpuInstances(uuid).empty());
    EXPECT_EQ(CheckpointState(Uid(claim)), "");
    plugin_->Stop();
  }
}

// At start-up, MIG devices no completed claim holds are destroyed (as
// upstream: a hand-made instance too), and those a completed claim holds
// stay.
TEST_F(GpuPluginTest, DynamicMigSweepsUnheldInstancesAtStartUp) {
  const std::string held_gpu = GpuUuid(3);
  const std::string stray_gpu = GpuUuid(4);
  UseDynamicMig();
  StartPlugin();
  json claim = CreateAllocatedClaim("dyn-mig-held", "gpu-3-mig-2g20gb-14-2");
  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(claim, &response).ok());
  ASSERT_EQ(response.error(), "");
  plugin_->Stop();

  // A hand-made instance on GPU 4 while the plugin is down.
  json state = json::parse(ReadFile(driver_root_ / "mock-nvml/state.json"));
  state["gpus"][stray_gpu]["migMode"] = {{"current", 1}, {"pending", 1}};
  state["gpus"][stray_gpu]["gpuInstances"] = json::array(
      {{{"id", 1}, {"profileId", 19}, {"start", 0}, {"size", 1},
        {"computeInstances", json::array({{{"id", 0}, {"profileId", 0}, {"start", 0}, {"size", 1}}})}}});
  WriteFile(driver_root_ / "mock-nvml/state.json", state.dump());

  UseDynamicMig();
  StartPlugin();  // serves after its first reconcile, which sweeps
  EXPECT_TRUE(GpuInstances(stray_gpu).empty());
  EXPECT_EQ(GpuInstances(held_gpu), std::vector<std::string>{"14@2"});
  std::string error;
  ASSERT_TRUE(Unprepare(claim, &error).ok());
  EXPECT_TRUE(GpuInstances(held_gpu).empty());
}

// The plugin dies at each step of Prepare; after a restart the kubelet's
// retry succeeds, and an unprepare leaves no file or entry behind.
TEST_F(GpuPluginTest, SurvivesACrashAtEveryStepOfPrepare) {
  const std::vector<std::string> points = {
      "prepare-before-started-checkpoint", "prepare-after-started-checkpoint", "prepare-before-cdi-write",
      "prepare-after-cdi-write",           "prepare-after-devices",            "prepare-after-completed-checkpoint",
  };
  int index = 0;
  for (const std::string& point : points) {
    SCOPED_TRACE(point);
    json claim = CreateAllocatedClaim("crash-" + std::to_string(index++), "gpu-4");
    ASSERT_FALSE(claim.is_null());
    StartPlugin(point);
    drav1::NodePrepareResourceResponse response;
    EXPECT_FALSE(Prepare(claim, &response).ok()) << "the plugin answered instead of crashing";
    EXPECT_EQ(plugin_->WaitExit(std::chrono::seconds(30)), common::kCrashPointExitCode);

    StartPlugin();
    ASSERT_TRUE(Prepare(claim, &response).ok());
    ASSERT_EQ(response.error(), "");
    ASSERT_EQ(response.devices_size(), 1);
    EXPECT_TRUE(fs::exists(SpecPath(Uid(claim))));
    EXPECT_EQ(CheckpointState(Uid(claim)), "PrepareCompleted");

    std::string error;
    ASSERT_TRUE(Unprepare(claim, &error).ok());
    EXPECT_EQ(error, "");
    EXPECT_FALSE(fs::exists(SpecPath(Uid(claim))));
    EXPECT_EQ(CheckpointState(Uid(claim)), "");
    plugin_->Stop();
  }
}

TEST_F(GpuPluginTest, SurvivesACrashDuringUnprepare) {
  StartPlugin("unprepare-after-devices");
  json claim = CreateAllocatedClaim("crash-unprepare", "gpu-5");
  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(claim, &response).ok());
  ASSERT_EQ(response.error(), "");
  std::string error;
  EXPECT_FALSE(Unprepare(claim, &error).ok());
  EXPECT_EQ(plugin_->WaitExit(std::chrono::seconds(30)), common::kCrashPointExitCode);
  StartPlugin();
  ASSERT_TRUE(Unprepare(claim, &error).ok());
  EXPECT_EQ(error, "");
  EXPECT_FALSE(fs::exists(SpecPath(Uid(claim))));
  EXPECT_EQ(CheckpointState(Uid(claim)), "");
}

TEST_F(GpuPluginTest, UnpreparesAClaimDeletedWhileThePluginWasDown) {
  StartPlugin();
  json claim = CreateAllocatedClaim("deleted-while-down", "gpu-6");
  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(claim, &response).ok());
  ASSERT_EQ(response.error(), "");
  plugin_->Stop();
  ASSERT_TRUE(shared_->client->Delete(k8s::resources::kResourceClaims, kNamespace, "deleted-while-down").ok());
  // The start-up reconciliation runs before the socket is served.
  StartPlugin();
  EXPECT_FALSE(fs::exists(SpecPath(Uid(claim))));
  EXPECT_EQ(CheckpointState(Uid(claim)), "");
}

TEST_F(GpuPluginTest, ARebootClearsPreparedState) {
  StartPlugin();
  json claim = CreateAllocatedClaim("before-reboot", "gpu-7");
  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(claim, &response).ok());
  ASSERT_EQ(response.error(), "");
  plugin_->Stop();
  WriteFile(dir_ / "boot_id", "99999999-2222-3333-4444-555555555555\n");
  StartPlugin();
  EXPECT_EQ(CheckpointState(Uid(claim)), "");
  // The CDI root here is on disk, like /etc/cdi: the discarded claim's spec
  // is removed too.
  EXPECT_FALSE(fs::exists(SpecPath(Uid(claim))));
  // The claim can be prepared again in the new boot.
  ASSERT_TRUE(Prepare(claim, &response).ok());
  EXPECT_EQ(response.error(), "");
  EXPECT_EQ(CheckpointState(Uid(claim)), "PrepareCompleted");
}

// An operator moves a corrupt checkpoint aside (what the plugin's error
// says to do): the plugin starts with no prepared claims but keeps the CDI
// spec of the claim whose pod still runs, so its containers can restart;
// the kubelet's Unprepare of that claim removes it.
TEST_F(GpuPluginTest, ACheckpointMovedAsideKeepsRunningClaimsSpecsUntilUnprepare) {
  StartPlugin();
  json claim = CreateAllocatedClaim("outlives-checkpoint", "gpu-6");
  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(claim, &response).ok());
  ASSERT_EQ(response.error(), "");
  plugin_->Stop();

  // A corrupt checkpoint stops the plugin, naming the way out.
  const fs::path checkpoint = PluginDir() / "checkpoint.json";
  std::string bytes = ReadFile(checkpoint);
  bytes[bytes.find("PrepareCompleted")] = 'p';
  WriteFile(checkpoint, bytes);
  ASSERT_TRUE(plugin_->Start());
  const std::optional<int> exit_code = plugin_->WaitExit(std::chrono::seconds(30));
  ASSERT_TRUE(exit_code.has_value()) << "the plugin runs on a corrupt checkpoint";
  EXPECT_NE(*exit_code, 0);
  const std::string log = ReadFile(dir_ / "plugin.log");
  EXPECT_NE(log.find("to recover, move the file aside"), std::string::npos) << log;

  fs::rename(checkpoint, PluginDir() / "checkpoint.json.bad");
  StartPlugin();
  EXPECT_EQ(CheckpointState(Uid(claim)), "");
  EXPECT_TRUE(fs::exists(SpecPath(Uid(claim)))) << "the running pod's CDI spec was removed";
  std::string error;
  ASSERT_TRUE(Unprepare(claim, &error).ok());
  EXPECT_EQ(error, "");
  EXPECT_FALSE(fs::exists(SpecPath(Uid(claim))));
}

// Samples of a text-format scrape by series ("name{labels}"); comments skipped.
std::map<std::string, double> ParseSamples(const std::string& text) {
  std::map<std::string, double> samples;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const std::size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return samples;
}

// --http-endpoint serves upstream's nvidia_dra_* metrics: request series at
// zero before any request, then counts, durations, errors and the prepared
// devices of the checkpoint after a prepare, a failed prepare and an unprepare.
TEST_F(GpuPluginTest, ServesUpstreamMetricsOnTheHttpEndpoint) {
  const int port = FreeLocalPort();
  ASSERT_GT(port, 0);
  std::vector<std::string> argv =
      GpuPluginArgv(GPU_KUBELET_PLUGIN, node_, kNodeName, shared_->cluster->kubeconfig().string());
  argv.push_back("--http-endpoint=127.0.0.1:" + std::to_string(port));
  plugin_ = std::make_unique<PluginProcess>(argv, GpuPluginEnv(node_), node_.log);
  StartPlugin();

  httplib::Client http("127.0.0.1", port);
  auto scrape = [&http] {
    auto response = http.Get("/metrics");
    EXPECT_TRUE(response) << "no answer from the metrics endpoint";
    if (!response) return std::map<std::string, double>();
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
    SaveMetricsScrape("gpu-kubelet-plugin", response->body);
    return ParseSamples(response->body);
  };
  const std::string op_prepare = "{driver=\"gpu.nvidia.com\",operation=\"prepare\"}";
  const std::string op_unprepare = "{driver=\"gpu.nvidia.com\",operation=\"unprepare\"}";
  const std::string gpu_devices =
      "nvidia_dra_prepared_devices{device_type=\"gpu\",driver=\"gpu.nvidia.com\",node=\"gpu-node-a\"}";
  const std::string prepare_errors =
      "nvidia_dra_node_prepare_errors_total{driver=\"gpu.nvidia.com\",error_type=\"prepare_devices\"}";

  std::map<std::string, double> samples = scrape();
  EXPECT_EQ(samples.at("nvidia_dra_requests_total" + op_prepare), 0);
  EXPECT_EQ(samples.at("nvidia_dra_requests_total" + op_unprepare), 0);
  EXPECT_EQ(samples.at("nvidia_dra_request_duration_seconds_count" + op_prepare), 0);
  EXPECT_EQ(samples.at("nvidia_dra_requests_inflight" + op_prepare), 0);
  EXPECT_EQ(samples.at(gpu_devices), 0);
  EXPECT_EQ(samples.count(prepare_errors), 0u);

  json claim = CreateAllocatedClaim("metrics-gpu", "gpu-0");
  json bad = CreateAllocatedClaim(
      "metrics-bad-config", "gpu-1",
      json{{"apiVersion", "resource.nvidia.com/v1beta1"}, {"kind", "GpuConfig"}, {"sharing", {{"stratgy", "MPS"}}}});
  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(claim, &response).ok());
  ASSERT_EQ(response.error(), "");
  ASSERT_TRUE(Prepare(bad, &response).ok());
  ASSERT_NE(response.error(), "");

  samples = scrape();
  EXPECT_EQ(samples.at("nvidia_dra_requests_total" + op_prepare), 1);  // successes only
  EXPECT_EQ(samples.at("nvidia_dra_request_duration_seconds_count" + op_prepare), 1);
  const std::string buckets = "nvidia_dra_request_duration_seconds_bucket{driver=\"gpu.nvidia.com\","
                              "operation=\"prepare\",le=\"";
  EXPECT_EQ(samples.at(buckets + "+Inf\"}"), 1);
  EXPECT_LE(samples.at(buckets + "0.05\"}"), samples.at(buckets + "12.8\"}"));
  const double sum = samples.at("nvidia_dra_request_duration_seconds_sum" + op_prepare);
  EXPECT_GT(sum, 0);
  EXPECT_LT(sum, 60);
  EXPECT_EQ(samples.at(prepare_errors), 1);
  EXPECT_EQ(samples.at(gpu_devices), 1);
  EXPECT_EQ(samples.at("nvidia_dra_requests_inflight" + op_prepare), 0);

  std::string error;
  ASSERT_TRUE(Unprepare(claim, &error).ok());
  ASSERT_EQ(error, "");
  samples = scrape();
  EXPECT_EQ(samples.at("nvidia_dra_requests_total" + op_unprepare), 1);
  EXPECT_EQ(samples.at("nvidia_dra_request_duration_seconds_count" + op_unprepare), 1);
  EXPECT_EQ(samples.at(gpu_devices), 0);
  EXPECT_EQ(samples.at("nvidia_dra_requests_total" + op_prepare), 1);

  auto elsewhere = http.Get("/");
  ASSERT_TRUE(elsewhere);
  EXPECT_EQ(elsewhere->status, 404);
}

// VFIO through the plugin process: the twins are published, a Prepare binds
// the GPU to vfio-pci and the API server's slice loses the full GPU until
// Unprepare; the claim's containers get /dev/vfio/<group> and a device
// metadata file (DeviceMetadata) whose CDI id comes with the device.
TEST_F(GpuPluginTest, VfioPassesTheGpuThroughAndRepublishesTheSlice) {
  UseVfio();
  StartPlugin();
  std::set<std::string> devices = PublishedDevices();
  for (const char* name : {"gpu-0", "gpu-vfio-0", "gpu-7", "gpu-vfio-7"}) {
    EXPECT_TRUE(devices.contains(name)) << name;
  }

  json claim = CreateAllocatedClaim("vfio-0", "gpu-vfio-0");
  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(claim, &response).ok());
  ASSERT_EQ(response.error(), "");
  ASSERT_EQ(response.devices_size(), 1);
  EXPECT_THAT(std::vector<std::string>(response.devices(0).cdi_device_ids().begin(),
                                       response.devices(0).cdi_device_ids().end()),
              ::testing::ElementsAre("k8s.gpu.nvidia.com/claim=" + Uid(claim) + "-gpu-vfio-0",
                                     "gpu.nvidia.com/metadata=" + Uid(claim) + "_gpu"));
  EXPECT_EQ(PciDriverOf("0000:18:00.0"), "vfio-pci");
  const std::string spec = ReadFile(SpecPath(Uid(claim)));
  EXPECT_NE(spec.find("/dev/vfio/20"), std::string::npos) << spec;
  EXPECT_EQ(spec.find("/dev/nvidia0"), std::string::npos) << spec;
  const json metadata = json::parse(ReadFile(PluginDir() / "dra-device-metadata" / (std::string(kNamespace) + "_vfio-0") /
                                             "gpu" / "metadata.json"));
  const json& attributes = metadata["requests"][0]["devices"][0]["attributes"];
  EXPECT_EQ(attributes["type"]["string"], "vfio") << metadata.dump();
  EXPECT_EQ(attributes["resource.kubernetes.io/pciBusID"]["string"], "0000:18:00.0") << metadata.dump();
  EXPECT_TRUE(WaitPublished([](const auto& d) { return !d.contains("gpu-0") && d.contains("gpu-vfio-0"); }))
      << "gpu-0 still published while its twin is passed through";

  // The sibling is refused while the twin is prepared.
  json sibling = CreateAllocatedClaim("gpu-0-meanwhile", "gpu-0");
  drav1::NodePrepareResourceResponse refused;
  ASSERT_TRUE(Prepare(sibling, &refused).ok());
  EXPECT_NE(refused.error().find("gpu-0 and gpu-vfio-0 are the same GPU"), std::string::npos) << refused.error();

  std::string error;
  ASSERT_TRUE(Unprepare(claim, &error).ok());
  EXPECT_EQ(error, "");
  EXPECT_EQ(PciDriverOf("0000:18:00.0"), "nvidia");
  EXPECT_FALSE(fs::exists(PluginDir() / "dra-device-metadata" / (std::string(kNamespace) + "_vfio-0")));
  EXPECT_TRUE(WaitPublished([](const auto& d) { return d.contains("gpu-0"); })) << "gpu-0 not republished";

  // A restart while the twin is prepared keeps the withdrawal (NVML does not
  // see the GPU, the checkpoint holds the claim). Given back at Unprepare,
  // the GPU is published as gpu-0 again from the plugin's next start
  // (docs/vfio.md says so).
  ASSERT_TRUE(Prepare(claim, &response).ok());
  ASSERT_EQ(response.error(), "");
  plugin_->Stop();
  StartPlugin();
  EXPECT_TRUE(WaitPublished([](const auto& d) { return !d.contains("gpu-0") && d.contains("gpu-vfio-0"); }));
  ASSERT_TRUE(Unprepare(claim, &error).ok());
  EXPECT_EQ(error, "");
  EXPECT_EQ(PciDriverOf("0000:18:00.0"), "nvidia");
  plugin_->Stop();
  StartPlugin();
  EXPECT_TRUE(WaitPublished([](const auto& d) { return d.contains("gpu-0") && d.contains("gpu-vfio-0"); }));
}

// A kill right after the bind, before the checkpoint records the claim: the
// restarted plugin gives the GPU back (its record says the plugin bound it),
// and the kubelet's retry binds it again.
TEST_F(GpuPluginTest, SurvivesACrashRightAfterTheVfioBind) {
  UseVfio();
  StartPlugin("prepare-after-vfio-bind");
  json claim = CreateAllocatedClaim("vfio-crash", "gpu-vfio-3");
  drav1::NodePrepareResourceResponse response;
  EXPECT_FALSE(Prepare(claim, &response).ok()) << "the plugin was to die mid-prepare";
  ASSERT_TRUE(plugin_->WaitExit(std::chrono::seconds(20)).has_value());
  EXPECT_EQ(PciDriverOf("0000:5d:00.0"), "vfio-pci");
  StartPlugin();
  // The first reconcile swept the PrepareStarted leftover's bind.
  EXPECT_EQ(PciDriverOf("0000:5d:00.0"), "nvidia");
  ASSERT_TRUE(Prepare(claim, &response).ok());
  EXPECT_EQ(response.error(), "");
  EXPECT_EQ(PciDriverOf("0000:5d:00.0"), "vfio-pci");
  std::string error;
  ASSERT_TRUE(Unprepare(claim, &error).ok());
  EXPECT_EQ(error, "");
  EXPECT_EQ(PciDriverOf("0000:5d:00.0"), "nvidia");
}

// --- Device health (NVMLDeviceHealthCheck) -----------------------------------------

// Waits until `done(list)` holds for the objects of `resource` in `ns` with
// `field_selector`, woken by a watch from each list (not a poll); false after
// `timeout`.
bool WaitListed(k8s::Client& client, const k8s::ResourceRef& resource, const std::string& ns,
                const std::string& field_selector, const std::function<bool(const json& list)>& done,
                std::chrono::seconds timeout = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto list = client.List(resource, ns, k8s::ListOptions{.field_selector = field_selector});
    if (!list.ok()) return false;
    if (done(*list)) return true;
    k8s::WatchOptions options;
    options.field_selector = field_selector;
    options.resource_version = (*list)["metadata"]["resourceVersion"].get<std::string>();
    options.timeout_seconds = 5;
    auto stream = client.Watch(resource, ns, options);
    if (!stream.ok()) continue;
    (void)(*stream)->Next();  // any change: list again
  }
  return false;
}

// Blocks until `path` holds a line containing `needle`, woken by inotify on
// its folder; false after `timeout`.
bool AwaitLineInFile(const fs::path& path, const std::string& needle, std::chrono::seconds timeout) {
  const int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd < 0) return false;
  inotify_add_watch(fd, path.parent_path().c_str(), IN_CREATE | IN_MODIFY | IN_MOVED_TO | IN_CLOSE_WRITE);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool found = false;
  while (!(found = ReadFile(path).find(needle) != std::string::npos) && std::chrono::steady_clock::now() < deadline) {
    pollfd pfd{.fd = fd, .events = POLLIN, .revents = 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (::poll(&pfd, 1, static_cast<int>(std::max<std::int64_t>(1, left.count()))) > 0) {
      char buffer[4096];
      while (::read(fd, buffer, sizeof(buffer)) > 0) {
      }
    }
  }
  ::close(fd);
  return found;
}

class GpuHealthTest : public GpuPluginTest {
 protected:
  void StartWithHealthCheck() {
    UseFeatureGates("NVMLDeviceHealthCheck=true");
    StartPlugin();
  }
  // The events file and the registration record of the node's mock NVML.
  fs::path EventsFile() const { return driver_root_ / "mock-nvml/events.jsonl"; }
  bool AwaitMonitored(const std::string& uuid) {
    return AwaitLineInFile(driver_root_ / "mock-nvml/event-registrations.jsonl", uuid, std::chrono::seconds(30));
  }
  void Inject(const json& line) { std::ofstream(EventsFile(), std::ios::app) << line.dump() << "\n"; }

  // The published device whose uuid attribute is `uuid`.
  std::string DeviceOf(const std::string& uuid) {
    std::string name;
    WaitListed(*shared_->client, k8s::resources::kResourceSlices, "", SliceSelector(), [&](const json& list) {
      for (const json& slice : list["items"]) {
        for (const json& device : slice["spec"].value("devices", json::array())) {
          if (device["attributes"]["uuid"]["string"] == uuid) name = device["name"];
        }
      }
      return !name.empty();
    });
    return name;
  }
  static std::string SliceSelector() { return std::string("spec.nodeName=") + kNodeName + ",spec.driver=" + kDriver; }
  // The taints of `device` in the node's slices ([] when none).
  static json TaintsIn(const json& list, const std::string& device) {
    for (const json& slice : list["items"]) {
      for (const json& entry : slice["spec"].value("devices", json::array())) {
        if (entry["name"] == device) return entry.value("taints", json::array());
      }
    }
    return json::array();
  }
  bool WaitTaints(const std::string& device, const std::function<bool(const json& taints)>& done) {
    return WaitListed(*shared_->client, k8s::resources::kResourceSlices, "", SliceSelector(),
                      [&](const json& list) { return done(TaintsIn(list, device)); });
  }
  static bool HasXid(const json& taints, const std::string& xid, const std::string& effect) {
    for (const json& taint : taints) {
      if (taint["key"] == "gpu.nvidia.com/xid" && taint.value("value", "") == xid && taint["effect"] == effect &&
          taint.contains("timeAdded")) {
        return true;
      }
    }
    return false;
  }
  // Waits for an Event about the Node with `reason` whose note mentions `text`.
  bool WaitNodeEvent(const std::string& reason, const std::string& text) {
    return WaitListed(*shared_->client, k8s::resources::kEvents, "default",
                      std::string("regarding.name=") + kNodeName + ",reason=" + reason, [&](const json& list) {
                        for (const json& event : list["items"]) {
                          if (event.value("note", "").find(text) != std::string::npos &&
                              event["regarding"]["kind"] == "Node") {
                            return true;
                          }
                        }
                        return false;
                      });
  }
  // The first report of the plugin's DRAResourceHealth v1 stream.
  std::map<std::string, std::pair<int, std::string>> HealthReport() {
    auto stub = ::v1::DRAResourceHealth::NewStub(channel_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ::v1::NodeWatchResourcesRequest request;
    auto reader = stub->NodeWatchResources(&context, request);
    ::v1::NodeWatchResourcesResponse response;
    std::map<std::string, std::pair<int, std::string>> out;
    if (!reader->Read(&response)) return out;
    for (const auto& device : response.devices()) {
      out[device.device().device_name()] = {static_cast<int>(device.health()), device.message()};
    }
    context.TryCancel();
    return out;
  }
  void ClearNodeAnnotation() {
    json patch = {{"metadata", {{"annotations", {{"gpu.nvidia.com/device-health-reset", nullptr}}}}}};
    (void)shared_->client->Patch(k8s::resources::kNodes, "", kNodeName, k8s::PatchType::kMerge, patch);
  }
};

// XID 79 on one GPU: its device is tainted NoSchedule in the slice (the API
// server stamps timeAdded), the kubelet's health report says Unhealthy, the
// Node has a DeviceUnhealthy Event. An application XID taints with effect
// None and leaves the device healthy. A restart keeps the taint; the reset
// annotation clears it (and goes away); a reboot starts clean.
TEST_F(GpuHealthTest, AnXidTaintsTheDeviceUntilResetAndARestartKeepsIt) {
  StartWithHealthCheck();
  const std::string bad = GpuUuid(3);
  const std::string noisy = GpuUuid(5);
  const std::string bad_device = DeviceOf(bad);
  const std::string noisy_device = DeviceOf(noisy);
  ASSERT_FALSE(bad_device.empty());
  ASSERT_TRUE(AwaitMonitored(bad)) << "the plugin registered no NVML events for " << bad;
  Inject({{"uuid", bad}, {"type", "xid"}, {"data", 79}});
  Inject({{"uuid", noisy}, {"type", "xid"}, {"data", 13}});
  ASSERT_TRUE(WaitTaints(bad_device, [](const json& taints) { return HasXid(taints, "79", "NoSchedule"); }));
  ASSERT_TRUE(WaitTaints(noisy_device, [](const json& taints) { return HasXid(taints, "13", "None"); }));
  EXPECT_TRUE(WaitNodeEvent("DeviceUnhealthy", "XID 79 on GPU " + bad));

  auto report = HealthReport();
  EXPECT_EQ(report[bad_device].first, ::v1::UNHEALTHY);
  EXPECT_THAT(report[bad_device].second, ::testing::HasSubstr("XID 79"));
  EXPECT_EQ(report[noisy_device].first, ::v1::HEALTHY) << "an application XID leaves the GPU healthy";
  EXPECT_EQ(report["gpu-0"].first, ::v1::HEALTHY);

  // A restart: the taint is in the first slices and the first report.
  plugin_->Stop();
  StartPlugin();
  ASSERT_TRUE(WaitTaints(bad_device, [](const json& taints) { return HasXid(taints, "79", "NoSchedule"); }));
  EXPECT_EQ(HealthReport()[bad_device].first, ::v1::UNHEALTHY);

  // A bad reset value is refused with an Event; the taint stays.
  ClearNodeAnnotation();
  json patch = {{"metadata", {{"annotations", {{"gpu.nvidia.com/device-health-reset", "gpu-99"}}}}}};
  ASSERT_TRUE(shared_->client->Patch(k8s::resources::kNodes, "", kNodeName, k8s::PatchType::kMerge, patch).ok());
  EXPECT_TRUE(WaitNodeEvent("DeviceHealthResetRefused", "gpu-99"));
  // The operator's reset of that device: taint gone, annotation removed.
  patch["metadata"]["annotations"]["gpu.nvidia.com/device-health-reset"] = bad_device;
  ASSERT_TRUE(shared_->client->Patch(k8s::resources::kNodes, "", kNodeName, k8s::PatchType::kMerge, patch).ok());
  ASSERT_TRUE(WaitTaints(bad_device, [](const json& taints) { return taints.empty(); }));
  EXPECT_TRUE(HasXid(TaintsIn(*shared_->client->List(k8s::resources::kResourceSlices, "",
                                                      k8s::ListOptions{.field_selector = SliceSelector()}),
                              noisy_device),
                     "13", "None"))
      << "only the named device was reset";
  EXPECT_TRUE(WaitListed(*shared_->client, k8s::resources::kNodes, "", std::string("metadata.name=") + kNodeName,
                         [](const json& list) {
                           const json& metadata = list["items"][0]["metadata"];
                           return !metadata.contains("annotations") ||
                                  !metadata["annotations"].contains("gpu.nvidia.com/device-health-reset");
                         }));
  EXPECT_TRUE(WaitNodeEvent("DeviceHealthy", bad_device));
  EXPECT_EQ(HealthReport()[bad_device].first, ::v1::HEALTHY);

  // A reboot resets the GPUs: the remaining taint is not carried over.
  plugin_->Stop();
  WriteFile(dir_ / "boot_id", "99999999-2222-3333-4444-555555555555\n");
  StartPlugin();
  EXPECT_TRUE(WaitTaints(noisy_device, [](const json& taints) { return taints.empty(); }));
}

// A lost GPU: tainted gpu-lost until it answers NVML again, then clean by
// itself.
TEST_F(GpuHealthTest, ALostGpuIsTaintedUntilItAnswersAgain) {
  StartWithHealthCheck();
  const std::string uuid = GpuUuid(6);
  const std::string device = DeviceOf(uuid);
  ASSERT_TRUE(AwaitMonitored(uuid));
  Inject({{"uuid", uuid}, {"type", "gpu_lost"}});
  const auto lost = [](const json& taints) {
    for (const json& taint : taints) {
      if (taint["key"] == "gpu.nvidia.com/gpu-lost" && taint["effect"] == "NoSchedule") return true;
    }
    return false;
  };
  ASSERT_TRUE(WaitTaints(device, lost));
  EXPECT_TRUE(WaitTaints("gpu-0", [](const json& taints) { return taints.empty(); }))
      << "only the GPU that stopped answering";
  Inject({{"uuid", uuid}, {"type", "gpu_recovered"}});
  EXPECT_TRUE(WaitTaints(device, [](const json& taints) { return taints.empty(); }));
  EXPECT_TRUE(WaitNodeEvent("DeviceHealthy", "answers NVML again"));
}

// --- Fabric Manager partitions (FabricManagerPartitioning) -------------------------

// A simulated HGX H100 (hgx-h100 profile: NVSwitches, module ids 1-8) with
// the mock Fabric Manager of its driver root, listening where upstream's
// plugin looks with NVIDIA_FABRICMANAGER_ADDRESS=127.0.0.1.
class GpuFabricTest : public GpuPluginTest {
 protected:
  void SetUp() override {
    GpuPluginTest::SetUp();
    if (IsSkipped()) return;
    plugin_.reset();
    fs::remove_all(dir_);
    PluginNodeDir node;
    ASSERT_EQ(MakePluginNodeDir("gpufabric", NVDRA_MOCKNVML_MAKE_DRIVER_ROOT,
                                std::string(NVDRA_MOCKNVML_PROFILES_DIR) + "/hgx-h100.json", NVDRA_MOCKNVML_PATH, &node),
              "");
    dir_ = node.dir;
    node_ = node;
    driver_root_ = node.driver_root;
  }
  void UseFabricManager(const fs::path& host_root) {
    std::vector<std::string> argv =
        GpuPluginArgv(GPU_KUBELET_PLUGIN, node_, kNodeName, shared_->cluster->kubeconfig().string());
    argv.push_back("--feature-gates=FabricManagerPartitioning=true");
    argv.push_back("--host-root=" + host_root.string());
    std::vector<std::string> env = GpuPluginEnv(node_);
    env.push_back("NVIDIA_FABRICMANAGER_ADDRESS=127.0.0.1");
    plugin_ = std::make_unique<PluginProcess>(argv, env, node_.log);
  }
  // The partitions the mock FM has active.
  std::set<int> ActivePartitions() const {
    json state = json::parse(ReadFile(driver_root_ / "mock-nvml/fabric-manager.json"), nullptr, false);
    std::set<int> out;
    if (state.is_discarded() || !state.contains("activePartitions")) return out;
    for (const json& id : state["activePartitions"]) out.insert(id.get<int>());
    return out;
  }
  // The attributes of published device `name`.
  json AttributesOf(const std::string& name) const {
    auto slices = shared_->client->List(k8s::resources::kResourceSlices, "",
                                        k8s::ListOptions{.field_selector = std::string("spec.nodeName=") + kNodeName +
                                                                           ",spec.driver=" + kDriver});
    if (!slices.ok()) return json();
    for (const json& slice : (*slices)["items"]) {
      for (const json& device : slice["spec"].value("devices", json::array())) {
        if (device["name"] == name) return device["attributes"];
      }
    }
    return json();
  }
};

TEST_F(GpuFabricTest, PublishesPartitionsAndActivatesTheClaimsPartitionUntilUnprepare) {
  UseFabricManager(driver_root_);
  StartPlugin();
  ASSERT_TRUE(WaitPublished([](const std::set<std::string>& devices) { return devices.contains("gpu-4"); }));
  const json gpu4 = AttributesOf("gpu-4");
  // Attributes of the driver's own domain are published unqualified.
  EXPECT_EQ(gpu4["gpuModuleID"], json({{"int", 5}})) << gpu4.dump();
  for (const char* size : {"partition1", "partition2", "partition4", "partition8"}) {
    EXPECT_TRUE(gpu4.contains(size)) << size << " missing: " << gpu4.dump();
  }
  EXPECT_EQ(gpu4["partition8"], json({{"int", 0}}));
  const int single = gpu4["partition1"]["int"].get<int>();

  json claim = CreateAllocatedClaim("fm-claim", "gpu-4");
  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(claim, &response).ok());
  ASSERT_EQ(response.error(), "");
  EXPECT_EQ(ActivePartitions(), std::set<int>{single});
  // Prepare again (the kubelet retries): still one active partition, no error.
  ASSERT_TRUE(Prepare(claim, &response).ok());
  EXPECT_EQ(response.error(), "");
  std::string error;
  ASSERT_TRUE(Unprepare(claim, &error).ok());
  EXPECT_EQ(error, "");
  EXPECT_TRUE(ActivePartitions().empty());
}

TEST_F(GpuFabricTest, WithoutAnNvSwitchFabricThePluginStartsAndSaysWhy) {
  // A host root without /proc/driver/nvidia-nvswitch/devices.
  const fs::path host_root = dir_ / "host-without-nvswitch";
  fs::create_directories(host_root / "proc");
  UseFabricManager(host_root);
  StartPlugin();
  ASSERT_TRUE(WaitPublished([](const std::set<std::string>& devices) { return devices.contains("gpu-4"); }));
  const json gpu4 = AttributesOf("gpu-4");
  EXPECT_FALSE(gpu4.contains("partition1")) << gpu4.dump();
  EXPECT_TRUE(gpu4.contains("gpuModuleID")) << "the module id needs no Fabric Manager: " << gpu4.dump();
  EXPECT_THAT(ReadFile(dir_ / "plugin.log"), ::testing::HasSubstr("no NVSwitch fabric on this node"));
  json claim = CreateAllocatedClaim("fm-none", "gpu-4");
  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(claim, &response).ok());
  EXPECT_EQ(response.error(), "");
  EXPECT_TRUE(ActivePartitions().empty());
}

// A kill right after the activation, before the checkpoint records the
// claim: the restarted plugin's sweep deactivates the partition (no completed
// claim holds it) and the kubelet's retry activates it again. A Fabric
// Manager that restarted and forgot the partition gets it back at the next
// reconcile (here: the plugin's start).
TEST_F(GpuFabricTest, ConvergesAfterACrashAfterActivationAndAFabricManagerRestart) {
  UseFabricManager(driver_root_);
  StartPlugin("prepare-after-fabric-activate");
  json claim = CreateAllocatedClaim("fm-crash", "gpu-6");
  drav1::NodePrepareResourceResponse response;
  EXPECT_FALSE(Prepare(claim, &response).ok()) << "the plugin was to die mid-prepare";
  ASSERT_TRUE(plugin_->WaitExit(std::chrono::seconds(20)).has_value());
  ASSERT_EQ(ActivePartitions().size(), 1u) << "killed after the activation";
  UseFabricManager(driver_root_);
  StartPlugin();
  EXPECT_TRUE(ActivePartitions().empty()) << "the start-up sweep deactivates what no completed claim holds";
  ASSERT_TRUE(Prepare(claim, &response).ok());
  ASSERT_EQ(response.error(), "");
  const std::set<int> active = ActivePartitions();
  ASSERT_EQ(active.size(), 1u);

  // Fabric Manager restarts and comes back with no partition active.
  plugin_->Stop();
  json state = json::parse(ReadFile(driver_root_ / "mock-nvml/fabric-manager.json"));
  state["generation"] = state.value("generation", 1) + 1;
  state["activePartitions"] = json::array();
  WriteFile(driver_root_ / "mock-nvml/fabric-manager.json.test", state.dump());
  fs::rename(driver_root_ / "mock-nvml/fabric-manager.json.test", driver_root_ / "mock-nvml/fabric-manager.json");
  UseFabricManager(driver_root_);
  StartPlugin();
  EXPECT_EQ(ActivePartitions(), active) << "the prepared claim's partition is active again";
  std::string error;
  ASSERT_TRUE(Unprepare(claim, &error).ok());
  EXPECT_EQ(error, "");
  EXPECT_TRUE(ActivePartitions().empty());
}

}  // namespace
}  // namespace nvdra::testing
