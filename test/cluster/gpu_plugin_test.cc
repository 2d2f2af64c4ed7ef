// gpu-kubelet-plugin as a process against the real API server, with the mock
// NVML (h100-sxm profile) in a fake driver root and this test playing the
// kubelet over the plugin's gRPC socket (DRAPlugin v1). Covers what a node
// must never get wrong: idempotent prepare, unprepare of unknown claims, the
// overlap guard, invalid configs, crashes at every step of Prepare and
// Unprepare (NVDRA_TEST_CRASH_AT), a reboot (boot id change), and a claim
// deleted while the plugin was down.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cluster_client.h"
#include "common/crash_point.h"
#include "k8s/client.h"
#include "pkg/apis/dra/v1/api.grpc.pb.h"

namespace nvdra::testing {
namespace {

namespace fs = std::filesystem;
namespace drav1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
using nlohmann::json;

constexpr const char* kNamespace = "gpu-plugin-test";
constexpr const char* kNodeName = "gpu-node-a";
constexpr const char* kDriver = "gpu.nvidia.com";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

// The plugin process. Destruction stops it.
class PluginProcess {
 public:
  PluginProcess(std::vector<std::string> argv, std::vector<std::string> env, fs::path log)
      : argv_(std::move(argv)), env_(std::move(env)), log_(std::move(log)) {}
  ~PluginProcess() { Stop(); }

  bool Start(const std::string& crash_at = "") {
    std::vector<std::string> env = env_;
    if (!crash_at.empty()) env.push_back("NVDRA_TEST_CRASH_AT=" + crash_at);
    pid_ = fork();
    if (pid_ == 0) {
      int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> args;
      for (auto& a : argv_) args.push_back(a.data());
      args.push_back(nullptr);
      std::vector<char*> envp;
      for (auto& e : env) envp.push_back(e.data());
      envp.push_back(nullptr);
      execve(args[0], args.data(), envp.data());
      _exit(127);
    }
    pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
    return pid_ > 0 && pidfd_ >= 0;
  }

  // Waits for the process to end by itself; its exit status or nullopt.
  std::optional<int> WaitExit(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return std::nullopt;
    pollfd p{pidfd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return std::nullopt;
    int status = 0;
    waitpid(pid_, &status, 0);
    Reset();
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    if (!WaitExit(std::chrono::seconds(20))) {
      kill(pid_, SIGKILL);
      WaitExit(std::chrono::seconds(20));
    }
  }

  bool running() const { return pid_ > 0; }

 private:
  void Reset() {
    if (pidfd_ >= 0) close(pidfd_);
    pidfd_ = -1;
    pid_ = -1;
  }
  std::vector<std::string> argv_;
  std::vector<std::string> env_;
  fs::path log_;
  pid_t pid_ = -1;
  int pidfd_ = -1;
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
    char pattern[] = "/tmp/gpuplugin-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    driver_root_ = dir_ / "driver-root";
    const std::string make = std::string(NVDRA_MOCKNVML_MAKE_DRIVER_ROOT) + " " + driver_root_.string() + " " +
                             NVDRA_MOCKNVML_PROFILES_DIR + "/h100-sxm.json " + NVDRA_MOCKNVML_PATH;
    ASSERT_EQ(std::system(make.c_str()), 0) << make;
    fs::create_directories(dir_ / "cdi");
    WriteFile(dir_ / "boot_id", "11111111-2222-3333-4444-555555555555\n");
    plugin_ = std::make_unique<PluginProcess>(
        std::vector<std::string>{
            GPU_KUBELET_PLUGIN, "--node-name", kNodeName, "--kubeconfig", shared_->cluster->kubeconfig().string(),
            "--cdi-root", (dir_ / "cdi").string(), "--nvidia-driver-root", driver_root_.string(),
            "--container-driver-root", driver_root_.string(), "--kubelet-registrar-directory-path",
            (dir_ / "registry").string(), "--kubelet-plugins-directory-path", (dir_ / "plugins").string(),
            "--image-name", "test/image:v1", "-v", "4"},
        std::vector<std::string>{"NVDRA_BOOT_ID_FILE=" + (dir_ / "boot_id").string(),
                                 "PATH=/usr/bin:/bin"},
        dir_ / "plugin.log");
  }

  void TearDown() override {
    plugin_.reset();
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
    json claim = {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"metadata", {{"name", name}, {"namespace", kNamespace}}},
                  {"spec",
                   {{"devices",
                     {{"requests", json::array({{{"name", "gpu"},
                                                  {"exactly", {{"deviceClassName", "gpu.nvidia.com"}}}}})}}}}}};
    if (config) {
      claim["spec"]["devices"]["config"] =
          json::array({{{"requests", json::array({"gpu"})},
                        {"opaque", {{"driver", kDriver}, {"parameters", *config}}}}});
    }
    auto created = shared_->client->Create(k8s::resources::kResourceClaims, kNamespace, claim);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (!created.ok()) return json();
    created_claims_.push_back(name);
    json status_claim = *created;
    json allocation = {
        {"devices",
         {{"results", json::array({{{"request", "gpu"}, {"driver", kDriver}, {"pool", kNodeName}, {"device", device}}})}}},
        {"nodeSelector",
         {{"nodeSelectorTerms",
           json::array({{{"matchFields", json::array({{{"key", "metadata.name"},
                                                        {"operator", "In"},
                                                        {"values", json::array({kNodeName})}}})}}})}}}};
    if (config) {
      allocation["devices"]["config"] = json::array(
          {{{"source", "FromClaim"}, {"requests", json::array({"gpu"})},
            {"opaque", {{"driver", kDriver}, {"parameters", *config}}}}});
    }
    status_claim["status"] = {{"allocation", allocation}};
    k8s::WriteOptions options;
    options.subresource = "status";
    auto updated = shared_->client->Update(k8s::resources::kResourceClaims, kNamespace, status_claim, options);
    EXPECT_TRUE(updated.ok()) << updated.status().ToString();
    return updated.ok() ? *updated : json();
  }

  static drav1::Claim Ref(const json& claim) {
    drav1::Claim ref;
    ref.set_namespace_(claim["metadata"]["namespace"].get<std::string>());
    ref.set_name(claim["metadata"]["name"].get<std::string>());
    ref.set_uid(claim["metadata"]["uid"].get<std::string>());
    return ref;
  }

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

  static ClusterClient* shared_;
  static std::string* setup_error_;
  fs::path dir_;
  fs::path driver_root_;
  std::unique_ptr<PluginProcess> plugin_;
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
  EXPECT_NE(response.error().find("not supported by this driver version yet"), std::string::npos)
      << response.error();

  // The failed attempts can be unprepared, leaving no entry (upstream #1346).
  std::string error;
  ASSERT_TRUE(Unprepare(claim, &error).ok());
  EXPECT_EQ(error, "");
  EXPECT_EQ(CheckpointState(Uid(claim)), "");
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
  // The claim can be prepared again in the new boot.
  ASSERT_TRUE(Prepare(claim, &response).ok());
  EXPECT_EQ(response.error(), "");
  EXPECT_EQ(CheckpointState(Uid(claim)), "PrepareCompleted");
}

}  // namespace
}  // namespace nvdra::testing
