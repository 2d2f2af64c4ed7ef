// compute-domain-kubelet-plugin as a process against the real API server, with
// the mock NVML in a fake driver root (gb200-tray: a fabric clique; h100-sxm:
// none) and this test playing the kubelet over the plugin's gRPC socket.
// Covers: publishing (channel-0, daemon-0, the clique label), a daemon claim
// (mount, env, capability device), a channel claim that waits for its
// domain's readiness outside the node lock and prepares as soon as the test
// marks the clique entry Ready, namespace isolation, a node without a clique,
// crashes at every Prepare step, and upstream's leaked-channel case #1162.
//
// The ComputeDomain and ComputeDomainClique CRDs here are STAND-INS (real
// group, version, kinds and scope; schema x-kubernetes-preserve-unknown-fields)
// until the chart's CRDs land in the repository.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cluster_client.h"
#include "common/crash_point.h"
#include "gpu_plugin_harness.h"
#include "k8s/client.h"
#include "pkg/apis/dra/v1/api.grpc.pb.h"

namespace nvdra::testing {
namespace {

namespace fs = std::filesystem;
namespace drav1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kNamespace = "cd-plugin-test";
constexpr const char* kOtherNamespace = "cd-plugin-other";
constexpr const char* kDriverNamespace = "cd-plugin-driver";
constexpr const char* kDriver = "compute-domain.nvidia.com";
constexpr const char* kCdLabel = "resource.nvidia.com/computeDomain";
constexpr const char* kCliqueLabel = "nvidia.com/gpu.clique";

json StandInCrd(const std::string& plural, const std::string& singular, const std::string& kind,
                bool status_subresource) {
  json version = {{"name", "v1beta1"},
                  {"served", true},
                  {"storage", true},
                  {"schema", {{"openAPIV3Schema", {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}}}}}};
  if (status_subresource) version["subresources"] = {{"status", json::object()}};
  return {{"apiVersion", "apiextensions.k8s.io/v1"},
          {"kind", "CustomResourceDefinition"},
          {"metadata", {{"name", plural + ".resource.nvidia.com"}}},
          {"spec",
           {{"group", "resource.nvidia.com"},
            {"scope", "Namespaced"},
            {"names", {{"plural", plural}, {"singular", singular}, {"kind", kind}, {"listKind", kind + "List"}}},
            {"versions", json::array({version})}}}};
}

// Waits for `condition` with a bound; for API state this test cannot be told
// about otherwise (CRD establishment, another process' writes).
bool Eventually(const std::function<bool()>& condition, std::chrono::seconds bound = std::chrono::seconds(30)) {
  const auto deadline = Clock::now() + bound;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

class CdPluginTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared_ = new ClusterClient();
    std::string error = StartClusterClient(*shared_, kNamespace);
    if (!error.empty()) {
      setup_error_ = new std::string(error);
      return;
    }
    k8s::Client& client = *shared_->client;
    for (const char* ns : {kOtherNamespace, kDriverNamespace}) {
      json object = {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}};
      (void)client.Create(k8s::resources::kNamespaces, "", object);
    }
    for (const char* node : {"cd-node-gb200", "cd-node-h100"}) {
      json object = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", node}}}};
      (void)client.Create(k8s::resources::kNodes, "", object);
    }
    for (const json& crd : {StandInCrd("computedomains", "computedomain", "ComputeDomain", true),
                            StandInCrd("computedomaincliques", "computedomainclique", "ComputeDomainClique", false)}) {
      auto created = client.Create(k8s::resources::kCustomResourceDefinitions, "", crd);
      if (!created.ok()) {
        setup_failure_ = new std::string(created.status().ToString());
        return;
      }
    }
    const bool served = Eventually([&] {
      return client.List(k8s::resources::kComputeDomains, kNamespace).ok() &&
             client.List(k8s::resources::kComputeDomainCliques, kDriverNamespace).ok();
    });
    if (!served) setup_failure_ = new std::string("stand-in CRDs not served");
  }
  static void TearDownTestSuite() {
    delete shared_;
    shared_ = nullptr;
  }

  void SetUp() override {
    if (setup_error_ != nullptr) GTEST_SKIP() << "no cluster: " << *setup_error_;
    ASSERT_EQ(setup_failure_, nullptr) << *setup_failure_;
  }

  // A node folder for `profile` and the plugin's process for it.
  void MakeNode(const std::string& profile, const std::string& node_name, bool clique_label = true,
                const std::vector<std::string>& extra_args = {}, const std::vector<std::string>& extra_env = {}) {
    node_name_ = node_name;
    PluginNodeDir node;
    const std::string error = MakePluginNodeDir("cdplugin", NVDRA_MOCKNVML_MAKE_DRIVER_ROOT,
                                                std::string(NVDRA_MOCKNVML_PROFILES_DIR) + "/" + profile + ".json",
                                                NVDRA_MOCKNVML_PATH, &node);
    dir_ = node.dir;
    ASSERT_EQ(error, "");
    // The capability file make-driver-root does not lay out, and the IMEX
    // config template the chart installs at /templates.
    WriteFile(node.driver_root / "proc/driver/nvidia/capabilities/fabric-imex-mgmt",
              "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n");
    WriteFile(dir_ / "imexd.cfg.tmpl", "SERVER_PORT=50000\n");
    std::vector<std::string> argv = {CD_KUBELET_PLUGIN,
                                     "--node-name", node_name,
                                     "--namespace", kDriverNamespace,
                                     "--kubeconfig", shared_->cluster->kubeconfig().string(),
                                     "--cdi-root", node.cdi.string(),
                                     "--nvidia-driver-root", node.driver_root.string(),
                                     "--container-driver-root", node.driver_root.string(),
                                     "--kubelet-registrar-directory-path", (dir_ / "registry").string(),
                                     "--kubelet-plugins-directory-path", (dir_ / "plugins").string(),
                                     "-v", "4"};
    if (clique_label) argv.emplace_back("--gpu-clique-label-enabled");
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    std::vector<std::string> env = {"NVDRA_BOOT_ID_FILE=" + node.boot_id.string(), "PATH=/usr/bin:/bin",
                                    "ALT_PROC_DEVICES_PATH=" + (node.driver_root / "proc/devices").string(),
                                    "NVDRA_CD_DAEMON_CONFIG_TEMPLATE=" + (dir_ / "imexd.cfg.tmpl").string(),
                                    "NVDRA_PREPARE_READY_WAIT_MS=20000"};
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    driver_root_ = node.driver_root;
    plugin_ = std::make_unique<PluginProcess>(argv, env, node.log);
  }

  void TearDown() override {
    plugin_.reset();
    if ((HasFailure() || std::getenv("NVDRA_TEST_VERBOSE") != nullptr) && !dir_.empty()) {
      std::cerr << "--- plugin log ---\n" << ReadFile(dir_ / "plugin.log") << "\n";
    }
    for (const auto& [ns, name] : created_claims_) {
      (void)shared_->client->Delete(k8s::resources::kResourceClaims, ns, name);
    }
    for (const std::string& name : created_pods_) {
      (void)shared_->client->Delete(k8s::resources::kPods, kDriverNamespace, name);
    }
    if (!node_name_.empty()) SetNodeLabel(kCdLabel, std::nullopt);
    if (!dir_.empty() && !HasFailure()) fs::remove_all(dir_);
  }

  fs::path PluginDir() const { return dir_ / "plugins" / kDriver; }
  fs::path SpecPath(const std::string& uid) const {
    return dir_ / "cdi" / ("k8s.compute-domain.nvidia.com-claim_" + uid + ".yaml");
  }

  void StartPlugin(const std::string& crash_at = "") {
    stub_.reset();
    channel_.reset();
    ASSERT_TRUE(plugin_->Start(crash_at));
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel_ = grpc::CreateCustomChannel("unix://" + (PluginDir() / "dra.sock").string(),
                                         grpc::InsecureChannelCredentials(), args);
    ASSERT_TRUE(channel_->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(60)))
        << "plugin did not serve\n" << ReadFile(dir_ / "plugin.log");
    stub_ = drav1::DRAPlugin::NewStub(channel_);
  }

  json Node() const {
    auto node = shared_->client->Get(k8s::resources::kNodes, "", node_name_);
    return node.ok() ? *node : json();
  }
  std::string NodeLabel(const std::string& key) const {
    json node = Node();
    if (!node.contains("metadata") || !node["metadata"].contains("labels")) return "";
    return node["metadata"]["labels"].value(key, "");
  }
  void SetNodeLabel(const std::string& key, const std::optional<std::string>& value) {
    json patch = {{"metadata", {{"labels", {{key, value ? json(*value) : json(nullptr)}}}}}};
    (void)shared_->client->Patch(k8s::resources::kNodes, "", node_name_, k8s::PatchType::kMerge, patch);
  }

  // A ComputeDomain in `ns`; returns its UID.
  std::string CreateComputeDomain(const std::string& ns, const std::string& name) {
    json cd = {{"apiVersion", "resource.nvidia.com/v1beta1"},
               {"kind", "ComputeDomain"},
               {"metadata", {{"name", name}, {"namespace", ns}}},
               {"spec", {{"numNodes", 0}, {"channel", {{"resourceClaimTemplate", {{"name", name + "-channel"}}}}}}}};
    auto created = shared_->client->Create(k8s::resources::kComputeDomains, ns, cd);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? (*created)["metadata"]["uid"].get<std::string>() : "";
  }

  // The clique entry of this node, as a daemon writes it.
  void MarkCliqueReady(const std::string& cd_uid, const std::string& clique_id) {
    json clique = {{"apiVersion", "resource.nvidia.com/v1beta1"},
                   {"kind", "ComputeDomainClique"},
                   {"metadata",
                    {{"name", cd_uid + "." + clique_id},
                     {"namespace", kDriverNamespace},
                     // As every writer of cliques labels them; the plugin lists by the clique ID.
                     {"labels",
                      {{"resource.nvidia.com/computeDomain", cd_uid},
                       {"resource.nvidia.com/computeDomain.cliqueID", clique_id}}}}},
                   {"daemons", json::array({{{"nodeName", node_name_},
                                             {"ipAddress", "10.0.0.1"},
                                             {"cliqueID", clique_id},
                                             {"index", 0},
                                             {"status", "Ready"}}})}};
    auto created = shared_->client->Create(k8s::resources::kComputeDomainCliques, kDriverNamespace, clique);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
  }

  json CreateAllocatedClaim(const std::string& ns, const std::string& name, const std::string& request,
                            const std::string& device, const json& config) {
    created_claims_.emplace_back(ns, name);
    json claim = {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"metadata", {{"name", name}, {"namespace", ns}}},
                  {"spec",
                   {{"devices",
                     {{"requests", json::array({{{"name", request},
                                                  {"exactly", {{"deviceClassName", "compute-domain.nvidia.com"}}}}})}}}}}};
    auto created = shared_->client->Create(k8s::resources::kResourceClaims, ns, claim);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (!created.ok()) return json();
    json with_status = *created;
    with_status["status"] = {
        {"allocation",
         {{"devices",
           {{"results", json::array({{{"request", request}, {"driver", kDriver}, {"pool", node_name_}, {"device", device}}})},
            {"config", json::array({{{"source", "FromClaim"},
                                     {"requests", json::array({request})},
                                     {"opaque", {{"driver", kDriver}, {"parameters", config}}}}})}}}}}};
    k8s::WriteOptions options;
    options.subresource = "status";
    auto updated = shared_->client->Update(k8s::resources::kResourceClaims, ns, with_status, options);
    EXPECT_TRUE(updated.ok()) << updated.status().ToString();
    return updated.ok() ? *updated : json();
  }
  json ChannelClaim(const std::string& ns, const std::string& name, const std::string& cd_uid,
                    const std::string& device = "channel-0", const std::string& allocation_mode = "") {
    json config = {{"apiVersion", "resource.nvidia.com/v1beta1"},
                   {"kind", "ComputeDomainChannelConfig"},
                   {"domainID", cd_uid}};
    if (!allocation_mode.empty()) config["allocationMode"] = allocation_mode;
    return CreateAllocatedClaim(ns, name, "channel", device, config);
  }

  // status.imexChannelID of a domain, as the controller writes it with
  // --imex-isolation=channel.
  void SetImexChannelId(const std::string& ns, const std::string& name, int id) {
    auto cd = shared_->client->Get(k8s::resources::kComputeDomains, ns, name);
    ASSERT_TRUE(cd.ok()) << cd.status().ToString();
    json with_status = *cd;
    with_status["status"]["imexChannelID"] = id;
    k8s::WriteOptions options;
    options.subresource = "status";
    auto updated = shared_->client->Update(k8s::resources::kComputeDomains, ns, with_status, options);
    ASSERT_TRUE(updated.ok()) << updated.status().ToString();
  }

  // This plugin's slices' device names, once `count` are published.
  std::vector<std::string> PublishedDevices(std::size_t count, int* slices = nullptr) {
    std::vector<std::string> names;
    EXPECT_TRUE(Eventually([&] {
      names.clear();
      int found = 0;
      auto list = shared_->client->List(k8s::resources::kResourceSlices, "");
      if (!list.ok()) return false;
      for (const json& item : (*list)["items"]) {
        if (item["spec"].value("driver", "") != kDriver || item["spec"].value("nodeName", "") != node_name_) continue;
        ++found;
        for (const json& device : item["spec"]["devices"]) names.push_back(device["name"].get<std::string>());
      }
      if (slices != nullptr) *slices = found;
      return names.size() == count;
    })) << names.size() << " devices published, want " << count;
    return names;
  }

  // The channel device nodes a claim's CDI spec injects.
  std::vector<std::string> InjectedChannels(const json& claim) const {
    std::vector<std::string> paths;
    json spec = json::parse(ReadFile(SpecPath(Uid(claim))), nullptr, false);
    if (spec.is_discarded()) return paths;
    for (const json& device : spec["devices"]) {
      for (const json& node : device["containerEdits"].value("deviceNodes", json::array())) {
        paths.push_back(node["path"].get<std::string>());
      }
    }
    return paths;
  }
  json DaemonClaim(const std::string& name, const std::string& cd_uid) {
    return CreateAllocatedClaim(kDriverNamespace, name, "daemon", "daemon-0",
                                {{"apiVersion", "resource.nvidia.com/v1beta1"},
                                 {"kind", "ComputeDomainDaemonConfig"},
                                 {"domainID", cd_uid}});
  }

  grpc::Status Prepare(const json& claim, drav1::NodePrepareResourceResponse* out) {
    drav1::NodePrepareResourcesRequest request;
    *request.add_claims() = ClaimRef(claim);
    drav1::NodePrepareResourcesResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    grpc::Status status = stub_->NodePrepareResources(&context, request, &response);
    if (status.ok()) *out = response.claims().at(Uid(claim));
    return status;
  }
  std::string PrepareError(const json& claim) {
    drav1::NodePrepareResourceResponse response;
    grpc::Status status = Prepare(claim, &response);
    return status.ok() ? response.error() : "grpc: " + status.error_message();
  }
  std::string UnprepareError(const json& claim) {
    drav1::NodeUnprepareResourcesRequest request;
    *request.add_claims() = ClaimRef(claim);
    drav1::NodeUnprepareResourcesResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    grpc::Status status = stub_->NodeUnprepareResources(&context, request, &response);
    return status.ok() ? response.claims().at(Uid(claim)).error() : "grpc: " + status.error_message();
  }

  std::string CheckpointState(const std::string& uid) const {
    json checkpoint = json::parse(ReadFile(PluginDir() / "checkpoint.json"), nullptr, false);
    if (checkpoint.is_discarded()) return "<unreadable>";
    const json& claims = checkpoint["v2"]["preparedClaims"];
    if (!claims.is_object() || !claims.contains(uid)) return "";
    return claims[uid]["checkpointState"].get<std::string>();
  }

  static std::string Uid(const json& claim) { return claim["metadata"]["uid"].get<std::string>(); }

  static ClusterClient* shared_;
  static std::string* setup_error_;    // no control plane: skip
  static std::string* setup_failure_;  // the suite's objects failed: fail
  std::string node_name_;
  fs::path dir_;
  fs::path driver_root_;
  std::unique_ptr<PluginProcess> plugin_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<drav1::DRAPlugin::Stub> stub_;
  std::vector<std::pair<std::string, std::string>> created_claims_;
  std::vector<std::string> created_pods_;  // in kDriverNamespace
};

ClusterClient* CdPluginTest::shared_ = nullptr;
std::string* CdPluginTest::setup_error_ = nullptr;
std::string* CdPluginTest::setup_failure_ = nullptr;

TEST_F(CdPluginTest, PublishesChannelAndDaemonInTheNodesPoolAndLabelsTheClique) {
  MakeNode("gb200-tray", "cd-node-gb200");
  StartPlugin();
  json slice;
  ASSERT_TRUE(Eventually([&] {
    auto list = shared_->client->List(k8s::resources::kResourceSlices, "");
    if (!list.ok()) return false;
    for (const json& item : (*list)["items"]) {
      if (item["spec"].value("driver", "") == kDriver && item["spec"].value("nodeName", "") == node_name_) {
        slice = item;
        return true;
      }
    }
    return false;
  }));
  EXPECT_EQ(slice["spec"]["pool"]["name"], node_name_);
  ASSERT_EQ(slice["spec"]["devices"].size(), 2u) << slice.dump();
  EXPECT_EQ(slice["spec"]["devices"][0]["name"], "channel-0");
  EXPECT_EQ(slice["spec"]["devices"][0]["attributes"]["type"]["string"], "channel");
  EXPECT_EQ(slice["spec"]["devices"][0]["attributes"]["id"]["int"], 0);
  EXPECT_EQ(slice["spec"]["devices"][1]["name"], "daemon-0");
  EXPECT_EQ(slice["spec"]["devices"][1]["attributes"]["type"]["string"], "daemon");
  const std::string clique = NodeLabel(kCliqueLabel);
  EXPECT_NE(clique.find('.'), std::string::npos) << "clique label: " << clique;
  EXPECT_TRUE(fs::exists(dir_ / "cdi" / "k8s.compute-domain.nvidia.com-device_base.yaml"));
  plugin_->Stop();
  EXPECT_EQ(NodeLabel(kCliqueLabel), "");
}

TEST_F(CdPluginTest, DaemonClaimGetsMountEnvAndImexCapability) {
  MakeNode("gb200-tray", "cd-node-gb200");
  StartPlugin();
  const std::string cd_uid = CreateComputeDomain(kNamespace, "daemon-cd");
  json claim = DaemonClaim("daemon-claim", cd_uid);
  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(claim, &response).ok());
  ASSERT_EQ(response.error(), "");
  ASSERT_EQ(response.devices_size(), 1);
  ASSERT_EQ(response.devices(0).cdi_device_ids_size(), 2);
  EXPECT_EQ(response.devices(0).cdi_device_ids(0), "k8s.compute-domain.nvidia.com/device=all");
  EXPECT_EQ(response.devices(0).cdi_device_ids(1), "k8s.compute-domain.nvidia.com/claim=" + Uid(claim) + "-daemon-0");
  json spec = json::parse(ReadFile(SpecPath(Uid(claim))), nullptr, false);
  ASSERT_FALSE(spec.is_discarded());
  const json& edits = spec["devices"][0]["containerEdits"];
  const fs::path domain_dir = PluginDir() / "domains" / cd_uid;
  EXPECT_EQ(edits["mounts"][0]["containerPath"], "/imexd");
  EXPECT_EQ(edits["mounts"][0]["hostPath"], domain_dir.string());
  EXPECT_EQ(edits["mounts"][0]["options"], json::array({"rw", "nosuid", "nodev", "bind"}));
  EXPECT_EQ(edits["env"], json::array({"CLIQUE_ID=" + NodeLabel(kCliqueLabel), "COMPUTE_DOMAIN_UUID=" + cd_uid,
                                       "COMPUTE_DOMAIN_NAME=daemon-cd", std::string("COMPUTE_DOMAIN_NAMESPACE=") + kNamespace}));
  EXPECT_EQ(edits["deviceNodes"][0]["path"], "/dev/nvidia-caps/nvidia-cap1");
  EXPECT_EQ(edits["deviceNodes"][0]["major"], 235);
  EXPECT_EQ(ReadFile(domain_dir / "imexd.cfg.tmpl"), "SERVER_PORT=50000\n");
  EXPECT_EQ(UnprepareError(claim), "");
  EXPECT_FALSE(fs::exists(SpecPath(Uid(claim))));
}

// An operator moves a checkpoint aside (the recovery a corrupt one's error
// names): the restarted plugin keeps the running claim's CDI spec, whose pod
// may still restart containers, and removes it at the claim's Unprepare.
// On a driver older than IMEXDaemonsWithDNSNames needs, the plugin stops and
// says which gate to turn off, as the Go driver's.
TEST_F(CdPluginTest, ADriverTooOldForDnsNamesStopsNamingTheGate) {
  MakeNode("gb200-tray", "cd-node-old");
  const fs::path profile = driver_root_ / "mock-nvml/profile.json";
  json doc = json::parse(ReadFile(profile));
  doc["driverVersion"] = "565.57.01";
  WriteFile(profile, doc.dump());
  ASSERT_TRUE(plugin_->Start());
  const std::optional<int> exit_code = plugin_->WaitExit(std::chrono::seconds(30));
  ASSERT_TRUE(exit_code.has_value()) << "the plugin runs on a driver too old for its gates";
  EXPECT_NE(*exit_code, 0);
  const std::string log = ReadFile(dir_ / "plugin.log");
  EXPECT_NE(log.find("NVIDIA driver 565.57.01 is older than 570.158.01"), std::string::npos) << log;
  EXPECT_NE(log.find("featureGates.IMEXDaemonsWithDNSNames=false"), std::string::npos) << log;
}

// After a reboot the checkpoint of the earlier boot is discarded, and with
// it the specs of its claims (a CDI root on disk keeps them otherwise).
TEST_F(CdPluginTest, ARebootRemovesTheSpecsOfTheEarlierBootsClaims) {
  MakeNode("gb200-tray", "cd-node-gb200");
  StartPlugin();
  const std::string cd_uid = CreateComputeDomain(kNamespace, "reboot-cd");
  json claim = DaemonClaim("before-reboot", cd_uid);
  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(claim, &response).ok());
  ASSERT_EQ(response.error(), "");
  ASSERT_TRUE(fs::exists(SpecPath(Uid(claim))));
  plugin_->Stop();
  WriteFile(dir_ / "boot_id", "99999999-2222-3333-4444-555555555555\n");
  StartPlugin();
  EXPECT_FALSE(fs::exists(SpecPath(Uid(claim)))) << "a spec of the earlier boot stayed";
}

TEST_F(CdPluginTest, ACheckpointMovedAsideKeepsRunningClaimsSpecsUntilUnprepare) {
  MakeNode("gb200-tray", "cd-node-gb200");
  StartPlugin();
  const std::string cd_uid = CreateComputeDomain(kNamespace, "lost-cd");
  json claim = DaemonClaim("outlives-checkpoint", cd_uid);
  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(claim, &response).ok());
  ASSERT_EQ(response.error(), "");
  plugin_->Stop();
  fs::rename(PluginDir() / "checkpoint.json", PluginDir() / "checkpoint.json.bad");
  StartPlugin();
  EXPECT_TRUE(fs::exists(SpecPath(Uid(claim)))) << "the running pod's CDI spec was removed";
  EXPECT_EQ(UnprepareError(claim), "");
  EXPECT_FALSE(fs::exists(SpecPath(Uid(claim)))) << "the unknown claim's spec stayed";
}

TEST_F(CdPluginTest, ChannelClaimWaitsWithoutBlockingOthersAndPreparesOnTheReadyEvent) {
  MakeNode("gb200-tray", "cd-node-gb200");
  StartPlugin();
  const std::string clique = NodeLabel(kCliqueLabel);
  const std::string cd_uid = CreateComputeDomain(kNamespace, "waiting-cd");
  json channel = ChannelClaim(kNamespace, "waiting-channel", cd_uid);
  auto waiting = std::async(std::launch::async, [&] {
    drav1::NodePrepareResourceResponse response;
    grpc::Status status = Prepare(channel, &response);
    return std::make_pair(status, response);
  });
  // The label that lets the domain's DaemonSet place a daemon here.
  ASSERT_TRUE(Eventually([&] { return NodeLabel(kCdLabel) == cd_uid; }));
  // Meanwhile another claim (the daemon's) prepares: nothing holds the lock.
  json daemon = DaemonClaim("waiting-daemon", cd_uid);
  const auto daemon_start = Clock::now();
  EXPECT_EQ(PrepareError(daemon), "");
  EXPECT_LT(Clock::now() - daemon_start, std::chrono::seconds(5));
  EXPECT_EQ(waiting.wait_for(std::chrono::seconds(0)), std::future_status::timeout) << "prepared while not Ready";

  const auto ready_at = Clock::now();
  MarkCliqueReady(cd_uid, clique);
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const auto latency = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - ready_at);
  std::cout << "ready event to prepared: " << latency.count() << " ms\n";
  EXPECT_LT(latency, std::chrono::seconds(2));
  auto [status, response] = waiting.get();
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(response.error(), "");
  ASSERT_EQ(response.devices_size(), 1);
  EXPECT_EQ(response.devices(0).device_name(), "channel-0");
  json spec = json::parse(ReadFile(SpecPath(Uid(channel))), nullptr, false);
  ASSERT_FALSE(spec.is_discarded());
  const json& node = spec["devices"][0]["containerEdits"]["deviceNodes"][0];
  EXPECT_EQ(node["path"], "/dev/nvidia-caps-imex-channels/channel0");
  EXPECT_EQ(node["type"], "c");
  EXPECT_EQ(node["major"], 236);
  EXPECT_EQ(CheckpointState(Uid(channel)), "PrepareCompleted");

  EXPECT_EQ(UnprepareError(channel), "");
  EXPECT_EQ(NodeLabel(kCdLabel), "");
  EXPECT_EQ(CheckpointState(Uid(channel)), "");
  EXPECT_EQ(UnprepareError(daemon), "");
}

TEST_F(CdPluginTest, ChannelClaimFromAnotherNamespaceFailsPermanently) {
  MakeNode("gb200-tray", "cd-node-gb200");
  StartPlugin();
  const std::string cd_uid = CreateComputeDomain(kNamespace, "isolated-cd");
  json claim = ChannelClaim(kOtherNamespace, "intruder-channel", cd_uid);
  const auto start = Clock::now();
  const std::string error = PrepareError(claim);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5)) << "a permanent error must not wait";
  EXPECT_NE(error.find("namespace isolation"), std::string::npos) << error;
  EXPECT_NE(error.find(kOtherNamespace), std::string::npos) << error;
  EXPECT_EQ(NodeLabel(kCdLabel), "");
  EXPECT_FALSE(fs::exists(SpecPath(Uid(claim))));
}

TEST_F(CdPluginTest, NodeWithoutCliquePreparesChannelsWithoutInjection) {
  MakeNode("h100-sxm", "cd-node-h100");
  StartPlugin();
  EXPECT_EQ(NodeLabel(kCliqueLabel), "");
  const std::string cd_uid = CreateComputeDomain(kNamespace, "fabricless-cd");
  // No clique: readiness comes from the domain's status.nodes.
  auto cd = shared_->client->Get(k8s::resources::kComputeDomains, kNamespace, "fabricless-cd");
  ASSERT_TRUE(cd.ok());
  json with_status = *cd;
  with_status["status"] = {{"status", "Ready"},
                           {"nodes", json::array({{{"name", node_name_}, {"ipAddress", "10.0.0.2"}, {"cliqueID", ""},
                                                   {"index", -1}, {"status", "Ready"}}})}};
  k8s::WriteOptions options;
  options.subresource = "status";
  ASSERT_TRUE(shared_->client->Update(k8s::resources::kComputeDomains, kNamespace, with_status, options).ok());
  json claim = ChannelClaim(kNamespace, "fabricless-channel", cd_uid);
  drav1::NodePrepareResourceResponse response;
  ASSERT_TRUE(Prepare(claim, &response).ok());
  ASSERT_EQ(response.error(), "");
  ASSERT_EQ(response.devices_size(), 1);
  EXPECT_EQ(response.devices(0).cdi_device_ids_size(), 0);
  EXPECT_FALSE(fs::exists(SpecPath(Uid(claim))));
  EXPECT_EQ(UnprepareError(claim), "");
  EXPECT_EQ(NodeLabel(kCdLabel), "");
}

TEST_F(CdPluginTest, SurvivesACrashAtEveryStepOfPrepare) {
  MakeNode("gb200-tray", "cd-node-gb200");
  StartPlugin();
  const std::string clique = NodeLabel(kCliqueLabel);
  const std::string cd_uid = CreateComputeDomain(kNamespace, "crash-cd");
  MarkCliqueReady(cd_uid, clique);
  plugin_->Stop();
  const std::vector<std::string> points = {
      "prepare-before-started-checkpoint", "prepare-after-started-checkpoint", "prepare-after-node-label",
      "prepare-before-cdi-write",          "prepare-after-cdi-write",          "prepare-after-devices",
      "prepare-after-completed-checkpoint",
  };
  int index = 0;
  for (const std::string& point : points) {
    SCOPED_TRACE(point);
    json claim = ChannelClaim(kNamespace, "crash-" + std::to_string(index++), cd_uid);
    StartPlugin(point);
    drav1::NodePrepareResourceResponse response;
    EXPECT_FALSE(Prepare(claim, &response).ok()) << "the plugin answered instead of crashing";
    EXPECT_EQ(plugin_->WaitExit(std::chrono::seconds(30)), common::kCrashPointExitCode);
    StartPlugin();
    EXPECT_EQ(PrepareError(claim), "");
    EXPECT_TRUE(fs::exists(SpecPath(Uid(claim))));
    EXPECT_EQ(CheckpointState(Uid(claim)), "PrepareCompleted");
    EXPECT_EQ(UnprepareError(claim), "");
    EXPECT_FALSE(fs::exists(SpecPath(Uid(claim))));
    EXPECT_EQ(CheckpointState(Uid(claim)), "");
    EXPECT_EQ(NodeLabel(kCdLabel), "");
    plugin_->Stop();
  }
}

// Upstream #1162: the kubelet gives up on a claim still waiting for its
// domain and unprepares it; the pending prepare must not complete afterwards
// (it would leak channel 0 and the node label), nor may a stale retry.
TEST_F(CdPluginTest, APrepareOutlivedByItsUnprepareIsRefusedAsStale) {
  MakeNode("gb200-tray", "cd-node-gb200");
  StartPlugin();
  const std::string clique = NodeLabel(kCliqueLabel);
  const std::string cd_uid = CreateComputeDomain(kNamespace, "stale-cd");
  json claim = ChannelClaim(kNamespace, "stale-channel", cd_uid);
  auto pending = std::async(std::launch::async, [&] { return PrepareError(claim); });
  ASSERT_TRUE(Eventually([&] { return NodeLabel(kCdLabel) == cd_uid; }));
  EXPECT_EQ(UnprepareError(claim), "");
  EXPECT_EQ(CheckpointState(Uid(claim)), "PrepareAborted");
  EXPECT_EQ(NodeLabel(kCdLabel), "");
  MarkCliqueReady(cd_uid, clique);
  ASSERT_EQ(pending.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const std::string error = pending.get();
  EXPECT_NE(error.find("stale prepare"), std::string::npos) << error;
  EXPECT_NE(PrepareError(claim).find("stale prepare"), std::string::npos);
  EXPECT_EQ(NodeLabel(kCdLabel), "");
  EXPECT_FALSE(fs::exists(SpecPath(Uid(claim))));
  EXPECT_EQ(CheckpointState(Uid(claim)), "PrepareAborted");
}

// After a reboot the checkpoint's claims are discarded; a domain label no
// prepared claim accounts for is removed before the plugin serves (the
// kubelet's Unprepare of such a claim has nothing left to undo).
TEST_F(CdPluginTest, StartUpRemovesADomainLabelNoPreparedClaimUses) {
  MakeNode("gb200-tray", "cd-node-gb200");
  const std::string clique_cd = CreateComputeDomain(kNamespace, "labelled-cd");
  SetNodeLabel(kCdLabel, clique_cd);
  ASSERT_EQ(NodeLabel(kCdLabel), clique_cd);
  StartPlugin();
  EXPECT_EQ(NodeLabel(kCdLabel), "") << "serving with a label no prepared claim uses";
  // A label a prepared (here: crashed half-way) claim uses stays.
  MarkCliqueReady(clique_cd, NodeLabel(kCliqueLabel));
  plugin_->Stop();
  json claim = ChannelClaim(kNamespace, "labelled-channel", clique_cd);
  StartPlugin("prepare-after-node-label");
  drav1::NodePrepareResourceResponse response;
  EXPECT_FALSE(Prepare(claim, &response).ok());
  EXPECT_EQ(plugin_->WaitExit(std::chrono::seconds(30)), common::kCrashPointExitCode);
  StartPlugin();
  EXPECT_EQ(NodeLabel(kCdLabel), clique_cd);
  EXPECT_EQ(PrepareError(claim), "");
  EXPECT_EQ(UnprepareError(claim), "");
  EXPECT_EQ(NodeLabel(kCdLabel), "");
}

// The controller labels a node when a workload claim is allocated there,
// before the kubelet prepares it; a pod deleted before that Prepare never
// gets the Unprepare that would remove the label. The plugin removes a label
// whose domain's daemon runs on the node but which no prepared claim uses,
// on the second check in a row that finds it so, and keeps one in use.
TEST_F(CdPluginTest, ReleasesAnEarlyLabelNoClaimUsedAndKeepsOneInUse) {
  MakeNode("gb200-tray", "cd-node-gb200", true, {}, {"NVDRA_UNUSED_LABEL_CHECK_MS=200"});
  StartPlugin();
  const std::string cd_uid = CreateComputeDomain(kNamespace, "early-cd");
  MarkCliqueReady(cd_uid, NodeLabel(kCliqueLabel));
  json channel = ChannelClaim(kNamespace, "early-channel", cd_uid);
  ASSERT_EQ(PrepareError(channel), "");
  ASSERT_EQ(NodeLabel(kCdLabel), cd_uid);
  // The domain's daemon pod on this node, as its DaemonSet places it (no
  // kubelet runs it here; the plugin only reads it from its pod cache).
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "early-daemon"}, {"namespace", kDriverNamespace},
                            {"labels", {{kCdLabel, cd_uid}}}}},
              {"spec", {{"nodeName", node_name_},
                        {"containers", json::array({{{"name", "daemon"}, {"image", "daemon:test"}}})}}}};
  auto created = shared_->client->Create(k8s::resources::kPods, kDriverNamespace, pod);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  created_pods_.push_back("early-daemon");
  const auto checks = [&] {
    const std::string log = ReadFile(dir_ / "plugin.log");
    std::size_t count = 0;
    for (std::size_t at = log.find("unused node label check"); at != std::string::npos;
         at = log.find("unused node label check", at + 1)) {
      ++count;
    }
    return count;
  };
  // Three checks that saw the daemon: the prepared claim keeps the label.
  ASSERT_TRUE(Eventually([&] { return checks() >= 3; })) << ReadFile(dir_ / "plugin.log");
  EXPECT_EQ(NodeLabel(kCdLabel), cd_uid) << "removed a label a prepared claim uses";

  // The claim goes (its Unprepare removes the label); then the controller's
  // early label for a claim whose pod goes before its Prepare.
  ASSERT_EQ(UnprepareError(channel), "");
  ASSERT_EQ(NodeLabel(kCdLabel), "");
  SetNodeLabel(kCdLabel, cd_uid);
  ASSERT_TRUE(Eventually([&] { return NodeLabel(kCdLabel).empty(); })) << "the unused label stayed";
  EXPECT_NE(ReadFile(dir_ / "plugin.log").find("removing the node label"), std::string::npos);
  // A claim prepared afterwards labels the node again.
  json again = ChannelClaim(kNamespace, "early-channel-2", cd_uid);
  EXPECT_EQ(PrepareError(again), "");
  EXPECT_EQ(NodeLabel(kCdLabel), cd_uid);
  EXPECT_EQ(UnprepareError(again), "");
}

// A stand-in for the host's nvidia-imex-ctl (NVDRA_IMEX_CTL_PATH): prints
// the file `answer` holds and records its arguments.
fs::path WriteImexCtlStub(const fs::path& dir) {
  const fs::path stub = dir / "nvidia-imex-ctl";
  WriteFile(stub, "#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/imex-ctl.args\"\ncat \"$(dirname \"$0\")/imex-ctl.answer\"\n");
  fs::permissions(stub, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
  WriteFile(dir / "imex-ctl.answer", "INITIALIZING\n");
  return stub;
}

TEST_F(CdPluginTest, HostManagedPublishesNoDaemonAndPreparesOnceTheHostImexIsReady) {
  const fs::path tools = fs::temp_directory_path() / ("cd-hostmanaged-" + std::to_string(::getpid()));
  fs::create_directories(tools);
  const fs::path stub = WriteImexCtlStub(tools);
  MakeNode("gb200-tray", "cd-node-gb200", true,
           {"--imex-mode", "hostManaged", "--feature-gates", "HostManagedIMEXDaemon=true"},
           {"NVDRA_IMEX_CTL_PATH=" + stub.string()});
  StartPlugin();
  EXPECT_EQ(PublishedDevices(1), std::vector<std::string>{"channel-0"});
  const std::string cd_uid = CreateComputeDomain(kNamespace, "host-cd");

  // No daemon device: a daemon claim fails at once, permanently.
  json daemon = DaemonClaim("host-daemon", cd_uid);
  std::string error = PrepareError(daemon);
  EXPECT_NE(error.find("hostManaged"), std::string::npos) << error;

  // The host daemon is not ready: retryable, answered without waiting.
  json channel = ChannelClaim(kNamespace, "host-channel", cd_uid);
  error = PrepareError(channel);
  EXPECT_NE(error.find("not ready"), std::string::npos) << error;
  EXPECT_NE(error.find("INITIALIZING"), std::string::npos) << error;
  EXPECT_EQ(ReadFile(tools / "imex-ctl.args"), "-q --u=" + (driver_root_ / "etc/nvidia-imex/imex_ctrl.sock").string() + "\n");
  EXPECT_EQ(CheckpointState(Uid(channel)), "PrepareStarted");

  WriteFile(tools / "imex-ctl.answer", "READY\n");
  EXPECT_EQ(PrepareError(channel), "");
  EXPECT_EQ(InjectedChannels(channel), std::vector<std::string>{"/dev/nvidia-caps-imex-channels/channel0"});
  EXPECT_EQ(NodeLabel(kCdLabel), "") << "hostManaged mode labels no node";
  EXPECT_EQ(UnprepareError(channel), "");
  EXPECT_FALSE(fs::exists(SpecPath(Uid(channel))));
  fs::remove_all(tools);
}

TEST_F(CdPluginTest, ChannelIsolationPublishesTheRangeAndInjectsOnlyTheDomainsChannel) {
  MakeNode("gb200-tray", "cd-node-gb200", true, {"--imex-isolation", "channel", "--imex-channel-count", "200"});
  StartPlugin();
  int slices = 0;
  const std::vector<std::string> names = PublishedDevices(201, &slices);
  EXPECT_GE(slices, 2) << "200 channels and a daemon exceed one slice's 128 devices";
  EXPECT_NE(std::find(names.begin(), names.end(), "channel-199"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "daemon-0"), names.end());
  const std::string clique = NodeLabel(kCliqueLabel);
  const std::string cd_uid = CreateComputeDomain(kNamespace, "isolated-channel-cd");
  MarkCliqueReady(cd_uid, clique);

  // No status.imexChannelID yet: the claim waits for the controller.
  json claim = ChannelClaim(kNamespace, "channel-3-claim", cd_uid, "channel-3", "All");
  auto waiting = std::async(std::launch::async, [&] { return PrepareError(claim); });
  ASSERT_TRUE(Eventually([&] { return CheckpointState(Uid(claim)) == "PrepareStarted"; }));
  EXPECT_EQ(waiting.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "prepared without the domain's channel id";
  SetImexChannelId(kNamespace, "isolated-channel-cd", 3);
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(waiting.get(), "");
  // allocationMode All still gets only the domain's channel.
  EXPECT_EQ(InjectedChannels(claim), std::vector<std::string>{"/dev/nvidia-caps-imex-channels/channel3"});

  // Another domain's channel: permanent, at once.
  json wrong = ChannelClaim(kNamespace, "channel-5-claim", cd_uid, "channel-5");
  const std::string error = PrepareError(wrong);
  EXPECT_NE(error.find("owns channel 3"), std::string::npos) << error;
  EXPECT_NE(error.find("channel-5"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(SpecPath(Uid(wrong))));
  EXPECT_EQ(UnprepareError(wrong), "");
  EXPECT_EQ(UnprepareError(claim), "");
  EXPECT_EQ(NodeLabel(kCdLabel), "");
}

TEST_F(CdPluginTest, TwoDomainsOnOneHostManagedImexDomainGetDifferentChannels) {
  const fs::path tools = fs::temp_directory_path() / ("cd-hostchannels-" + std::to_string(::getpid()));
  fs::create_directories(tools);
  const fs::path stub = WriteImexCtlStub(tools);
  WriteFile(tools / "imex-ctl.answer", "READY\n");
  MakeNode("gb200-tray", "cd-node-gb200", true,
           {"--imex-mode", "hostManaged", "--feature-gates", "HostManagedIMEXDaemon=true", "--imex-isolation",
            "channel", "--imex-channel-count", "8"},
           {"NVDRA_IMEX_CTL_PATH=" + stub.string()});
  StartPlugin();
  EXPECT_EQ(PublishedDevices(8).size(), 8u);
  const std::string a_uid = CreateComputeDomain(kNamespace, "host-cd-a");
  const std::string b_uid = CreateComputeDomain(kNamespace, "host-cd-b");
  SetImexChannelId(kNamespace, "host-cd-a", 1);
  SetImexChannelId(kNamespace, "host-cd-b", 2);
  json a = ChannelClaim(kNamespace, "host-a", a_uid, "channel-1");
  json b = ChannelClaim(kNamespace, "host-b", b_uid, "channel-2");
  // A prepare that races the ids' watch events waits for them.
  ASSERT_EQ(PrepareError(a), "");
  ASSERT_EQ(PrepareError(b), "");
  EXPECT_EQ(InjectedChannels(a), std::vector<std::string>{"/dev/nvidia-caps-imex-channels/channel1"});
  EXPECT_EQ(InjectedChannels(b), std::vector<std::string>{"/dev/nvidia-caps-imex-channels/channel2"});
  EXPECT_EQ(UnprepareError(a), "");
  EXPECT_EQ(UnprepareError(b), "");
  fs::remove_all(tools);
}

}  // namespace
}  // namespace nvdra::testing
