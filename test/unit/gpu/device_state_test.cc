// The GPU plugin's device state at unit tier: which config kind each device
// takes, the typed groups PrepareDevices returns, and the claim CDI spec it
// writes and UnprepareDevices removes. The node is a hand-made inventory
// over a mock driver root (test/mocknvml/make-driver-root with a100-mig.json,
// whose capability files give GPU 2's GI 5 / CI 0 their device minors).
#include "gpu/device_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <set>
#include <string>

#include "common/file_io.h"
#include "gpu/claim_cdi.h"
#include "gpu/dynamic_mig.h"
#include "gpu/fabric_partitions.h"
#include "gpu/published_devices.h"
#include "gpu/mig_profile.h"
#include "gpu/mps_daemon.h"
#include "gpu/vfio_passthrough.h"
#include "ready_file.h"
#include "kubeletplugin/cdi_spec.h"

namespace nvdra::gpu {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kVersion[] = "550.163.01";  // driverVersion of a100-mig.json

GpuInfo Gpu(std::uint32_t minor, std::string uuid) {
  GpuInfo gpu;
  gpu.index = minor;
  gpu.minor = minor;
  gpu.uuid = std::move(uuid);
  gpu.pci.bus_id = "0000:1" + std::to_string(minor) + ":00.0";
  return gpu;
}

// Records what the device state asked of the GPUs; fails when told to.
class FakeComputePolicy final : public ComputePolicy {
 public:
  common::Status SetComputeMode(const std::string& gpu_uuid, ComputeMode mode) override {
    calls.push_back(gpu_uuid + " -c " + std::string(ComputeModeName(mode)));
    return failure;
  }
  common::Status SetTimeSlice(const std::string& gpu_uuid, api::TimeSliceInterval interval) override {
    calls.push_back(gpu_uuid + " timeslice " + std::string(api::TimeSliceIntervalName(interval)));
    return failure;
  }
  std::vector<std::string> calls;
  common::Status failure;
};

class GpuDeviceStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "gpu-device-state-test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = fs::canonical(templ);
    const std::string command = std::string(NVDRA_MOCKNVML_MAKE_DRIVER_ROOT) + " '" + Root().string() +
                                "' '" NVDRA_MOCKNVML_PROFILES_DIR "/a100-mig.json' '" NVDRA_MOCKNVML_PATH
                                "' >/dev/null";
    ASSERT_EQ(std::system(command.c_str()), 0);

    NodeInventory inventory;
    inventory.driver_version = kVersion;
    inventory.gpus.push_back(Gpu(0, "GPU-0000"));
    GpuInfo mig_parent = Gpu(2, "GPU-0002");
    mig_parent.mig_capable = true;
    mig_parent.mig_enabled = true;
    MigDeviceInfo slice;
    slice.uuid = "MIG-0002-5";
    slice.profile = "1g.10gb";
    slice.gi.id = 19;
    slice.gi_id = 5;
    slice.ci_id = 0;
    slice.placement.start = 0;
    mig_parent.mig_devices.push_back(slice);
    inventory.gpus.push_back(mig_parent);
    mig_name_ = MigDeviceName(2, "1g.10gb", 19, 0);

    GpuCdiOptions options;
    options.cdi_root = dir_ / "cdi";
    options.driver_root = "/run/nvidia/driver";
    options.container_driver_root = Root();
    options.driver_version = kVersion;
    options.hook_path = "/usr/bin/nvidia-cdi-hook";
    options.proc.proc_root = Root() / "proc";
    auto cdi = GpuCdi::Create(options);
    ASSERT_TRUE(cdi.ok()) << cdi.status();
    cdi_ = std::move(*cdi);
    state_ = std::make_unique<GpuDeviceState>(std::move(inventory), *cdi_, policy_);
  }
  void TearDown() override {
    state_.reset();
    cdi_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  fs::path Root() const { return dir_ / "driver"; }
  fs::path SpecFile(const std::string& uid) const {
    return dir_ / "cdi" / kubeletplugin::ClaimCdiSpecFileName(kGpuCdiVendor, uid);
  }

  static api::ConfiguredResults Group(api::ConfigKind kind, const std::string& device) {
    return {.config = api::DefaultConfig(kind),
            .source = "default",
            .results = {{.request = "r", .pool = "node-a", .device = device, .admin_access = false,
                         .share_id = std::nullopt}}};
  }

  // A group of `device` whose config asks for time-slicing.
  static api::ConfiguredResults TimeSliced(api::ConfigKind kind, const std::string& device, const char* interval) {
    api::ConfiguredResults group = Group(kind, device);
    group.config.object["sharing"] = {{"strategy", "TimeSlicing"}};
    if (interval != nullptr) group.config.object["sharing"]["timeSlicingConfig"] = {{"interval", interval}};
    return group;
  }

  fs::path dir_;
  std::string mig_name_;
  FakeComputePolicy policy_;
  std::unique_ptr<GpuCdi> cdi_;
  std::unique_ptr<GpuDeviceState> state_;
};

TEST_F(GpuDeviceStateTest, EachDeviceTakesItsConfigKindAndUnknownDevicesAreNotFound) {
  EXPECT_EQ(*state_->ConfigKindOf("gpu-0"), api::ConfigKind::kGpuConfig);
  EXPECT_EQ(*state_->ConfigKindOf(mig_name_), api::ConfigKind::kMigDeviceConfig);
  // A MIG-enabled GPU is published as its MIG devices only.
  EXPECT_FALSE(state_->ConfigKindOf("gpu-2").ok());
  auto unknown = state_->ConfigKindOf("gpu-9");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), common::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("device gpu-9 is not on this node"));
  EXPECT_EQ(state_->DefaultConfigKinds(),
            (std::vector<api::ConfigKind>{api::ConfigKind::kGpuConfig, api::ConfigKind::kMigDeviceConfig}));
}

TEST_F(GpuDeviceStateTest, PrepareReturnsTypedGroupsAndWritesTheClaimSpecThatUnprepareRemoves) {
  const kubeletplugin::ClaimView view{
      .ref = {.uid = "uid-1", .name = "c", .ns = "ns"},
      .groups = {Group(api::ConfigKind::kGpuConfig, "gpu-0"), Group(api::ConfigKind::kMigDeviceConfig, mig_name_)}};
  auto groups = state_->PrepareDevices(view);
  ASSERT_TRUE(groups.ok()) << groups.status();
  ASSERT_EQ(groups->size(), 2u);

  const kubeletplugin::PreparedDeviceEntry& gpu = (*groups)[0].devices.at(0);
  EXPECT_EQ(std::get<kubeletplugin::PreparedGpu>(gpu.kind).uuid, "GPU-0000");
  EXPECT_EQ(gpu.device.device.device_name, "gpu-0");
  EXPECT_EQ(gpu.device.device.pool_name, "node-a");
  EXPECT_EQ(gpu.device.device.requests, std::vector<std::string>{"r"});
  EXPECT_EQ(gpu.device.device.cdi_device_ids, std::vector<std::string>{"k8s.gpu.nvidia.com/claim=uid-1-gpu-0"});
  EXPECT_EQ((*groups)[0].config_state, kubeletplugin::PreparedConfigState(kubeletplugin::GpuConfigState{}));

  const auto& mig = std::get<kubeletplugin::PreparedMig>((*groups)[1].devices.at(0).kind);
  EXPECT_EQ(mig.parent_minor, 2);
  EXPECT_EQ(mig.gi_id, 5);
  EXPECT_EQ(mig.ci_id, 0);
  EXPECT_EQ(mig.mig_uuid, "MIG-0002-5");
  EXPECT_EQ(mig.parent_uuid, "GPU-0002");
  EXPECT_EQ(mig.parent_pci_bus_id, "0000:12:00.0");

  std::ifstream in(SpecFile("uid-1"));
  ASSERT_TRUE(in) << SpecFile("uid-1");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("uid-1-gpu-0"));
  EXPECT_THAT(text.str(), HasSubstr("/dev/nvidia0"));
  EXPECT_THAT(text.str(), HasSubstr("uid-1-" + mig_name_));
  // GI 5's access capability of GPU 2 (DeviceFileMinor 318 in the mock root).
  EXPECT_THAT(text.str(), HasSubstr("/dev/nvidia-caps/nvidia-cap318"));

  const kubeletplugin::CheckpointedClaim entry;
  ASSERT_TRUE(state_->UnprepareDevices({.ref = view.ref, .entry = entry, .view = view}).ok());
  EXPECT_FALSE(fs::exists(SpecFile("uid-1")));
  // Undoing again (a retried Unprepare) is not an error.
  EXPECT_TRUE(state_->UnprepareDevices({.ref = view.ref, .entry = entry, .view = view}).ok());
}

TEST_F(GpuDeviceStateTest, TimeSlicingSetsTheFullGpusPolicyRecordsItAndUnprepareResetsIt) {
  const kubeletplugin::ClaimView view{
      .ref = {.uid = "uid-ts", .name = "c", .ns = "ns"},
      .groups = {TimeSliced(api::ConfigKind::kGpuConfig, "gpu-0", "Long"),
                 TimeSliced(api::ConfigKind::kMigDeviceConfig, mig_name_, nullptr)}};
  auto groups = state_->PrepareDevices(view);
  ASSERT_TRUE(groups.ok()) << groups.status();
  // Compute mode DEFAULT first, then the interval; the MIG device is left alone.
  EXPECT_EQ(policy_.calls, (std::vector<std::string>{"GPU-0000 -c DEFAULT", "GPU-0000 timeslice Long"}));
  EXPECT_EQ(std::get<kubeletplugin::GpuConfigState>((*groups)[0].config_state).time_slice_applied, true);
  EXPECT_EQ((*groups)[1].config_state, kubeletplugin::PreparedConfigState(kubeletplugin::GpuConfigState{}));

  policy_.calls.clear();
  kubeletplugin::CheckpointedClaim entry;
  entry.state = kubeletplugin::ClaimCheckpointState::kPrepareCompleted;
  entry.prepared_devices = *groups;
  ASSERT_TRUE(state_->UnprepareDevices({.ref = view.ref, .entry = entry, .view = view}).ok());
  EXPECT_EQ(policy_.calls, std::vector<std::string>{"GPU-0000 timeslice Default"});
  EXPECT_FALSE(fs::exists(SpecFile("uid-ts")));
}

TEST_F(GpuDeviceStateTest, APrepareStartedLeftoverResetsWhatItsAllocationAskedToTimeSlice) {
  // A crash after the interval was set and before the checkpoint recorded it:
  // the entry has no groups, only the allocation.
  const kubeletplugin::ClaimView view{.ref = {.uid = "uid-crash", .name = "c", .ns = "ns"},
                                      .groups = {TimeSliced(api::ConfigKind::kGpuConfig, "gpu-0", "Short")}};
  const kubeletplugin::CheckpointedClaim started;
  ASSERT_TRUE(state_->UnprepareDevices({.ref = view.ref, .entry = started, .view = view}).ok());
  EXPECT_EQ(policy_.calls, std::vector<std::string>{"GPU-0000 timeslice Default"});

  // A GPU another claim still holds (consumable shares) keeps its interval.
  policy_.calls.clear();
  ASSERT_TRUE(
      state_->UnprepareDevices({.ref = view.ref, .entry = started, .view = view, .held_by_other_claims = {"gpu-0"}})
          .ok());
  EXPECT_TRUE(policy_.calls.empty());

  // An exclusive claim's entry changes nothing.
  policy_.calls.clear();
  const kubeletplugin::ClaimView exclusive{.ref = view.ref, .groups = {Group(api::ConfigKind::kGpuConfig, "gpu-0")}};
  ASSERT_TRUE(state_->UnprepareDevices({.ref = view.ref, .entry = started, .view = exclusive}).ok());
  EXPECT_TRUE(policy_.calls.empty());
}

TEST_F(GpuDeviceStateTest, AFailedPolicyChangeFailsPrepareBeforeTheSpecIsWritten) {
  policy_.failure = common::InternalError("nvidia-smi: Insufficient Permissions");
  const kubeletplugin::ClaimView view{.ref = {.uid = "uid-denied", .name = "c", .ns = "ns"},
                                      .groups = {TimeSliced(api::ConfigKind::kGpuConfig, "gpu-0", nullptr)}};
  auto groups = state_->PrepareDevices(view);
  ASSERT_FALSE(groups.ok());
  EXPECT_THAT(groups.status().message(), HasSubstr("Insufficient Permissions"));
  EXPECT_FALSE(fs::exists(SpecFile("uid-denied")));
}

// The daemons' Deployments as a map; readiness is set by the test.
class FakeMpsDeployments final : public MpsDeployments {
 public:
  common::Status Create(const nlohmann::json& deployment) override {
    ++creates;
    objects[deployment["metadata"]["name"].get<std::string>()] = deployment;
    return common::OkStatus();
  }
  common::Status Delete(const std::string& name) override {
    deleted.push_back(name);
    objects.erase(name);
    return common::OkStatus();
  }
  bool Exists(const std::string& name) const override { return objects.contains(name); }
  bool Ready(const std::string& name) const override { return ready.contains(name) && Exists(name); }
  std::vector<std::string> NamesOnNode(const std::string& node) const override {
    std::vector<std::string> names;
    for (const auto& [name, object] : objects) {
      if (object["spec"]["template"]["spec"]["nodeName"] == node) names.push_back(name);
    }
    return names;
  }
  bool WaitReady(const std::vector<std::string>& names, std::chrono::steady_clock::time_point) override {
    ++waits;
    // What the watch would deliver while the claim waits.
    for (const std::string& name : names) ready.insert(name);
    return true;
  }
  void Cancel() override {}

  std::map<std::string, nlohmann::json> objects;
  std::set<std::string> ready;
  std::vector<std::string> deleted;
  int creates = 0;
  int waits = 0;
};

class GpuDeviceStateMpsTest : public GpuDeviceStateTest {
 protected:
  void SetUp() override {
    GpuDeviceStateTest::SetUp();
    auto text = common::ReadWholeFile(fs::path(NVDRA_SOURCE_DIR) / "templates" / kMpsDaemonTemplate);
    ASSERT_TRUE(text.ok()) << text.status();
    MpsOptions options;
    options.node_name = "node-a";
    options.driver_namespace = "nvidia-dra-driver";
    options.image_name = "registry.example/dra:1";
    options.feature_gates = "MPSSupport=true";
    options.control_files_root = dir_ / "plugin" / "mps";
    options.host_driver_root = "/run/nvidia/driver";
    options.container_driver_root = Root();
    options.template_text = *text;
    options.mount_shm = [this](const fs::path& path) {
      mounts_.push_back("mount " + path.filename().string());
      return common::OkStatus();
    };
    options.unmount_shm = [this](const fs::path& path) {
      mounts_.push_back("umount " + path.filename().string());
      return common::OkStatus();
    };
    mps_ = std::make_unique<MpsDaemons>(std::move(options), deployments_, policy_);
    // The fixture's inventory again, with compute capabilities.
    NodeInventory inventory = state_->inventory();
    inventory.gpus[0].cuda_compute_capability = "9.0";
    inventory.gpus[1].cuda_compute_capability = "8.0";
    state_ = std::make_unique<GpuDeviceState>(std::move(inventory), *cdi_, policy_,
                                              GpuDeviceStateOptions{.mps = mps_.get()});
  }

  // A group of `device` whose config asks for MPS with `mps_config`.
  static api::ConfiguredResults Mps(api::ConfigKind kind, const std::string& device,
                                    nlohmann::json mps_config = nullptr) {
    api::ConfiguredResults group = Group(kind, device);
    group.config.object["sharing"] = {{"strategy", "MPS"}};
    if (!mps_config.is_null()) group.config.object["sharing"]["mpsConfig"] = mps_config;
    return group;
  }

  static std::map<std::string, std::string> Env(const nlohmann::json& deployment) {
    std::map<std::string, std::string> env;
    for (const auto& item : deployment["spec"]["template"]["spec"]["containers"][0]["env"]) {
      env[item["name"]] = item.value("value", "");
    }
    return env;
  }

  FakeMpsDeployments deployments_;
  std::vector<std::string> mounts_;
  std::unique_ptr<MpsDaemons> mps_;
};

TEST_F(GpuDeviceStateMpsTest, PrepareStartsTheDaemonWaitsForItAndUnprepareStopsIt) {
  const kubeletplugin::ClaimView view{
      .ref = {.uid = "0b6e9a52-6f1e-4c0e-9a57-2f4f3b1f0c11", .name = "c", .ns = "ns"},
      .groups = {Mps(api::ConfigKind::kGpuConfig, "gpu-0",
                     {{"defaultActiveThreadPercentage", 50}, {"defaultPinnedDeviceMemoryLimit", "10Gi"}})}};
  const std::string id = MpsDaemons::DaemonId(view.ref.uid, {"GPU-0000"});
  EXPECT_EQ(id.size(), 36u + 1 + 5);
  const std::string name = "mps-control-daemon-" + id;

  // Not Ready yet: kUnavailable, with everything but the CDI spec in place.
  auto first = state_->PrepareDevices(view);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), common::StatusCode::kUnavailable);
  EXPECT_THAT(first.status().message(), HasSubstr(name));
  EXPECT_FALSE(fs::exists(SpecFile(view.ref.uid)));
  EXPECT_EQ(policy_.calls, std::vector<std::string>{"GPU-0000 -c EXCLUSIVE_PROCESS"});
  EXPECT_EQ(mounts_, std::vector<std::string>{"mount shm"});
  const fs::path root = dir_ / "plugin" / "mps" / id;
  for (const char* sub : {"pipe", "shm", "log"}) EXPECT_TRUE(fs::is_directory(root / sub)) << sub;

  // The Deployment as upstream's template makes it.
  ASSERT_TRUE(deployments_.objects.contains(name));
  const nlohmann::json& deployment = deployments_.objects[name];
  EXPECT_EQ(deployment["metadata"]["namespace"], "nvidia-dra-driver");
  EXPECT_EQ(deployment["metadata"]["labels"]["app"], name);
  EXPECT_EQ(deployment["spec"]["selector"]["matchLabels"]["app"], name);
  const nlohmann::json& pod = deployment["spec"]["template"]["spec"];
  EXPECT_EQ(pod["nodeName"], "node-a");
  EXPECT_EQ(pod["hostPID"], true);
  EXPECT_EQ(pod["containers"][0]["image"], "registry.example/dra:1");
  EXPECT_FALSE(pod.contains("serviceAccountName"));
  const auto env = Env(deployment);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "GPU-0000");
  EXPECT_EQ(env.at("MPS_DEFAULT_ACTIVE_THREAD_PERCENTAGE"), "50");
  EXPECT_EQ(env.at("MPS_DEFAULT_PINNED_DEVICE_MEMORY_LIMITS"), "GPU-0000=10240M");
  EXPECT_EQ(env.at("MPS_DAEMON_FLAGS"), "");
  EXPECT_EQ(env.at("FEATURE_GATES"), "MPSSupport=true");
  std::map<std::string, std::string> host_paths;
  for (const auto& volume : pod["volumes"]) host_paths[volume["name"]] = volume["hostPath"]["path"];
  EXPECT_EQ(host_paths.at("driver-root"), "/run/nvidia/driver");
  EXPECT_EQ(host_paths.at("mps-pipe-directory"), (root / "pipe").string());
  EXPECT_EQ(host_paths.at("mps-shm-directory"), (root / "shm").string());
  EXPECT_EQ(host_paths.at("mps-log-directory"), (root / "log").string());

  // The preparer waits outside the lock, then prepares again: nothing is
  // made twice, and the devices get the daemon's pipes.
  EXPECT_TRUE(state_->AwaitRetry(view, first.status(), std::chrono::steady_clock::now()));
  EXPECT_TRUE(state_->RollBackLeftover({.ref = view.ref, .entry = {}, .view = view}).ok());
  policy_.calls.clear();
  auto second = state_->PrepareDevices(view);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(deployments_.creates, 1);
  EXPECT_TRUE(policy_.calls.empty());
  EXPECT_EQ(std::get<kubeletplugin::GpuConfigState>((*second)[0].config_state).mps_control_daemon_id, id);
  auto spec = common::ReadWholeFile(SpecFile(view.ref.uid));
  ASSERT_TRUE(spec.ok());
  EXPECT_THAT(*spec, HasSubstr("CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"));
  EXPECT_THAT(*spec, HasSubstr((root / "pipe").string()));
  EXPECT_THAT(*spec, HasSubstr((root / "shm").string()));

  kubeletplugin::CheckpointedClaim entry;
  entry.state = kubeletplugin::ClaimCheckpointState::kPrepareCompleted;
  entry.prepared_devices = *second;
  ASSERT_TRUE(state_->UnprepareDevices({.ref = view.ref, .entry = entry, .view = view}).ok());
  EXPECT_EQ(deployments_.deleted, std::vector<std::string>{name});
  EXPECT_EQ(policy_.calls, std::vector<std::string>{"GPU-0000 -c DEFAULT"});
  EXPECT_EQ(mounts_.back(), "umount shm");
  EXPECT_FALSE(fs::exists(root));
  EXPECT_FALSE(fs::exists(SpecFile(view.ref.uid)));
}

TEST_F(GpuDeviceStateMpsTest, MigDevicesRunTheDaemonOnTheirUuidAndSetTheParentsMode) {
  const kubeletplugin::ClaimView view{
      .ref = {.uid = "1b6e9a52-6f1e-4c0e-9a57-2f4f3b1f0c11", .name = "c", .ns = "ns"},
      .groups = {Mps(api::ConfigKind::kMigDeviceConfig, mig_name_, {{"defaultPerDevicePinnedMemoryLimit", {{"0", "1Gi"}}}})}};
  ASSERT_EQ(state_->PrepareDevices(view).status().code(), common::StatusCode::kUnavailable);
  const std::string name = MpsDaemons::DeploymentName(MpsDaemons::DaemonId(view.ref.uid, {"MIG-0002-5"}));
  ASSERT_TRUE(deployments_.objects.contains(name));
  const auto env = Env(deployments_.objects[name]);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "MIG-0002-5");
  EXPECT_EQ(env.at("MPS_DEFAULT_PINNED_DEVICE_MEMORY_LIMITS"), "MIG-0002-5=1024M");
  EXPECT_EQ(policy_.calls, std::vector<std::string>{"GPU-0002 -c EXCLUSIVE_PROCESS"});

  // A crash before the checkpoint recorded the daemon: the PrepareStarted
  // leftover's allocation says which daemon to stop.
  const kubeletplugin::CheckpointedClaim started;
  ASSERT_TRUE(state_->UnprepareDevices({.ref = view.ref, .entry = started, .view = view}).ok());
  EXPECT_EQ(deployments_.deleted, std::vector<std::string>{name});
  EXPECT_TRUE(fs::is_empty(dir_ / "plugin" / "mps"));
}

TEST_F(GpuDeviceStateMpsTest, SettingsThatDoNotFitTheDevicesFailBeforeAnythingStarts) {
  // A per-device limit naming no device of the group.
  const kubeletplugin::ClaimView bad_key{
      .ref = {.uid = "2b6e9a52-6f1e-4c0e-9a57-2f4f3b1f0c11", .name = "c", .ns = "ns"},
      .groups = {Mps(api::ConfigKind::kGpuConfig, "gpu-0", {{"defaultPerDevicePinnedMemoryLimit", {{"3", "1Gi"}}}})}};
  auto failed = state_->PrepareDevices(bad_key);
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.status().message(), HasSubstr("defaultPerDevicePinnedMemoryLimit[3]: no such device"));
  EXPECT_TRUE(deployments_.objects.empty());
  EXPECT_TRUE(policy_.calls.empty());
}

TEST_F(GpuDeviceStateMpsTest, SweepRemovesDaemonsOfClaimsNotInTheCheckpoint) {
  const std::string kept_uid = "3b6e9a52-6f1e-4c0e-9a57-2f4f3b1f0c11";
  const std::string gone_uid = "4b6e9a52-6f1e-4c0e-9a57-2f4f3b1f0c11";
  for (const std::string& uid : {kept_uid, gone_uid}) {
    const kubeletplugin::ClaimView view{.ref = {.uid = uid, .name = "c", .ns = "ns"},
                                        .groups = {Mps(api::ConfigKind::kGpuConfig, "gpu-0")}};
    ASSERT_EQ(state_->PrepareDevices(view).status().code(), common::StatusCode::kUnavailable);
  }
  // A Deployment of another node is not this plugin's to remove.
  deployments_.objects["mps-control-daemon-5b6e9a52-6f1e-4c0e-9a57-2f4f3b1f0c11-abcde"] = {
      {"metadata", {{"name", "mps-control-daemon-5b6e9a52-6f1e-4c0e-9a57-2f4f3b1f0c11-abcde"}}},
      {"spec", {{"template", {{"spec", {{"nodeName", "node-b"}}}}}}}};
  policy_.calls.clear();
  kubeletplugin::Checkpoint checkpoint;
  checkpoint.claims[kept_uid].state = kubeletplugin::ClaimCheckpointState::kPrepareStarted;
  ASSERT_TRUE(state_->SweepLeftovers(checkpoint).ok());
  const std::string gone = MpsDaemons::DeploymentName(MpsDaemons::DaemonId(gone_uid, {"GPU-0000"}));
  EXPECT_EQ(deployments_.deleted, std::vector<std::string>{gone});
  EXPECT_EQ(policy_.calls, std::vector<std::string>{"GPU-0000 -c DEFAULT"});
  EXPECT_TRUE(fs::exists(dir_ / "plugin" / "mps" / MpsDaemons::DaemonId(kept_uid, {"GPU-0000"})));
  EXPECT_FALSE(fs::exists(dir_ / "plugin" / "mps" / MpsDaemons::DaemonId(gone_uid, {"GPU-0000"})));
  EXPECT_EQ(deployments_.objects.size(), 2u);
}

TEST_F(GpuDeviceStateMpsTest, MpsIsRefusedWithConsumableShares) {
  state_ = std::make_unique<GpuDeviceState>(state_->inventory(), *cdi_, policy_,
                                            GpuDeviceStateOptions{.shares_devices = true, .mps = mps_.get()});
  const kubeletplugin::ClaimView view{.ref = {.uid = "6b6e9a52-6f1e-4c0e-9a57-2f4f3b1f0c11", .name = "c", .ns = "ns"},
                                      .groups = {Mps(api::ConfigKind::kGpuConfig, "gpu-0")}};
  auto failed = state_->PrepareDevices(view);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), common::StatusCode::kFailedPrecondition);
  EXPECT_THAT(failed.status().message(), HasSubstr("consumable shares"));
  EXPECT_TRUE(deployments_.objects.empty());
}

TEST(MpsDaemonId, IsTheClaimUidAndAHashOfTheDevices) {
  // sha256("GPU-a,GPU-b") starts with these five hex digits (upstream's rule).
  EXPECT_EQ(MpsDaemons::DaemonId("uid", {"GPU-a", "GPU-b"}), "uid-95a93");
  EXPECT_NE(MpsDaemons::DaemonId("uid", {"GPU-a", "GPU-b"}), MpsDaemons::DaemonId("uid", {"GPU-b", "GPU-a"}));
  EXPECT_EQ(DefaultShmSize("/nonexistent"), "65536k");
}

// DynamicMIG over the fixture's a100-mig driver root (Ampere, MIG on; GPU 0
// holds static instances): every profile x placement is a device of its own,
// made at Prepare and destroyed at Unprepare or by the sweep.
class GpuDeviceStateDynamicMigTest : public GpuDeviceStateTest {
 protected:
  void SetUp() override {
    GpuDeviceStateTest::SetUp();
    nvml::LibraryOptions options;
    options.driver_root = Root();
    auto library = nvml::Library::Open(options);
    ASSERT_TRUE(library.ok()) << library.status();
    library_ = std::move(*library);
    DiscoveryOptions discovery;
    discovery.sysfs_root = dir_ / "no-sysfs";
    auto inventory = DiscoverDevices(*library_, discovery);
    ASSERT_TRUE(inventory.ok()) << inventory.status();
    mig_ = std::make_unique<DynamicMig>(*library_);
    gpu0_ = inventory->gpus[0].uuid;
    state_ = std::make_unique<GpuDeviceState>(std::move(*inventory), *cdi_, policy_,
                                              GpuDeviceStateOptions{.dynamic_mig = mig_.get()});
  }
  void TearDown() override {
    state_.reset();
    GpuDeviceStateTest::TearDown();
  }
  // The GPU instances of GPU 0, as "<profile id>@<start>".
  std::set<std::string> Instances() {
    std::set<std::string> out;
    auto device = library_->DeviceByUuid(gpu0_);
    for (std::uint32_t profile : {0u, 5u, 9u, 14u, 15u, 19u, 20u}) {
      auto instances = device->GpuInstances(profile);
      if (!instances.ok()) continue;
      for (const auto& instance : *instances) {
        auto info = instance.Info();
        out.insert(std::to_string(info->profileId) + "@" + std::to_string(info->placement.start));
      }
    }
    return out;
  }

  std::unique_ptr<nvml::Library> library_;
  std::unique_ptr<DynamicMig> mig_;
  std::string gpu0_;
};

TEST_F(GpuDeviceStateDynamicMigTest, SlotsAreDevicesMadeAtPrepareAndDestroyedAtUnprepare) {
  const std::string slot = MigDeviceName(0, "3g.20gb", 9, 0);
  EXPECT_EQ(*state_->ConfigKindOf(slot), api::ConfigKind::kMigDeviceConfig);
  EXPECT_EQ(*state_->ConfigKindOf(MigDeviceName(0, "1g.5gb", 19, 6)), api::ConfigKind::kMigDeviceConfig);
  // An Ampere GPU with MIG on offers no full GPU.
  EXPECT_FALSE(state_->ConfigKindOf("gpu-0").ok());

  // The sweep of an empty checkpoint removes the static instances.
  EXPECT_EQ(Instances().size(), 4u);
  ASSERT_TRUE(state_->SweepLeftovers(kubeletplugin::Checkpoint{}).ok());
  EXPECT_TRUE(Instances().empty());

  const kubeletplugin::ClaimView view{.ref = {.uid = "uid-dyn", .name = "c", .ns = "ns"},
                                      .groups = {Group(api::ConfigKind::kMigDeviceConfig, slot)}};
  auto groups = state_->PrepareDevices(view);
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_EQ(Instances(), std::set<std::string>{"9@0"});
  const auto& mig = std::get<kubeletplugin::PreparedMig>((*groups)[0].devices.at(0).kind);
  EXPECT_EQ(mig.parent_uuid, gpu0_);
  EXPECT_EQ(mig.parent_minor, 0);
  EXPECT_THAT(mig.mig_uuid, ::testing::StartsWith("MIG-"));
  auto spec = common::ReadWholeFile(SpecFile("uid-dyn"));
  ASSERT_TRUE(spec.ok());
  // The GI's access capability: minor 3 + gpu*135 + gi*9 (make-driver-root).
  EXPECT_THAT(*spec, HasSubstr("nvidia-cap" + std::to_string(3 + mig.gi_id * 9)));

  // A completed claim's instance survives the sweep.
  kubeletplugin::Checkpoint checkpoint;
  checkpoint.claims["uid-dyn"].state = kubeletplugin::ClaimCheckpointState::kPrepareCompleted;
  checkpoint.claims["uid-dyn"].prepared_devices = *groups;
  ASSERT_TRUE(state_->SweepLeftovers(checkpoint).ok());
  EXPECT_EQ(Instances(), std::set<std::string>{"9@0"});

  ASSERT_TRUE(state_->UnprepareDevices({.ref = view.ref, .entry = checkpoint.claims["uid-dyn"], .view = view}).ok());
  EXPECT_TRUE(Instances().empty());
  EXPECT_FALSE(fs::exists(SpecFile("uid-dyn")));
}

TEST_F(GpuDeviceStateDynamicMigTest, ALeftoverIsDestroyedBeforeTheRetryAndAForeignInstanceIsRefused) {
  ASSERT_TRUE(state_->SweepLeftovers(kubeletplugin::Checkpoint{}).ok());
  const std::string slot = MigDeviceName(0, "2g.10gb", 14, 2);
  const kubeletplugin::ClaimView view{.ref = {.uid = "uid-left", .name = "c", .ns = "ns"},
                                      .groups = {Group(api::ConfigKind::kMigDeviceConfig, slot)}};
  ASSERT_TRUE(state_->PrepareDevices(view).ok());
  // A crash before the checkpoint write: the retry rolls the leftover back
  // first, then makes the device again.
  const kubeletplugin::CheckpointedClaim started;
  ASSERT_TRUE(state_->RollBackLeftover({.ref = view.ref, .entry = started, .view = view}).ok());
  EXPECT_TRUE(Instances().empty());
  ASSERT_TRUE(state_->PrepareDevices(view).ok());
  EXPECT_EQ(Instances(), std::set<std::string>{"14@2"});

  // Another claim's device on the same slices fails with the holder named.
  const kubeletplugin::ClaimView other{
      .ref = {.uid = "uid-other", .name = "d", .ns = "ns"},
      .groups = {Group(api::ConfigKind::kMigDeviceConfig, MigDeviceName(0, "3g.20gb", 9, 0))}};
  auto refused = state_->PrepareDevices(other);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("held by GPU instance"));
  EXPECT_EQ(Instances(), std::set<std::string>{"14@2"});
}

// VFIO passthrough over an h100-sxm driver root whose sysfs the simulated
// driver core (test/simsysfs) serves: GPU 1 (0000:2a:00.0) was bound to
// vfio-pci before the plugin started (so NVML does not see it).
class GpuDeviceStateVfioTest : public GpuDeviceStateTest {
 protected:
  void SetUp() override {
    GpuDeviceStateTest::SetUp();
    host_ = dir_ / "h100";
    const std::string command = "NVDRA_MOCK_VFIO_BOUND=0000:2a:00.0 " + std::string(NVDRA_MOCKNVML_MAKE_DRIVER_ROOT) +
                                " '" + host_.string() + "' '" NVDRA_MOCKNVML_PROFILES_DIR "/h100-sxm.json' '"
                                NVDRA_MOCKNVML_PATH "' >/dev/null";
    ASSERT_EQ(std::system(command.c_str()), 0);
    kernel_ = ::fork();
    ASSERT_GE(kernel_, 0);
    if (kernel_ == 0) {
      ::execl(NVDRA_SIMSYSFS, NVDRA_SIMSYSFS, host_.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ASSERT_TRUE(simsysfs::AwaitReady(host_, kernel_, -1, std::chrono::seconds(20)).ok());
    nvml::LibraryOptions options;
    options.driver_root = host_;
    auto library = nvml::Library::Open(options);
    ASSERT_TRUE(library.ok()) << library.status();
    library_ = std::move(*library);
    DiscoveryOptions discovery;
    discovery.sysfs_root = host_ / "sys";
    auto inventory = DiscoverDevices(*library_, discovery);
    ASSERT_TRUE(inventory.ok()) << inventory.status();
    ASSERT_EQ(inventory->gpus.size(), 7u) << "the GPU on vfio-pci is not NVML's";
    auto vfio = VfioPassthrough::Open({.host_root = host_, .record_file = dir_ / "vfio-bindings.json", .boot_id = "b1"});
    ASSERT_TRUE(vfio.ok()) << vfio.status();
    vfio_ = std::make_unique<VfioPassthrough>(std::move(*vfio));
    MakeState(std::move(*inventory));
  }
  void MakeState(NodeInventory inventory) {
    state_ = std::make_unique<GpuDeviceState>(
        std::move(inventory), *cdi_, policy_,
        GpuDeviceStateOptions{.vfio = vfio_.get(),
                              .on_withdrawn_changed = [this](const std::set<std::string>& w) { published_ = w; }});
  }
  void TearDown() override {
    state_.reset();
    if (kernel_ > 0) {
      ::kill(kernel_, SIGTERM);
      ::waitpid(kernel_, nullptr, 0);
    }
    GpuDeviceStateTest::TearDown();
  }
  std::string DriverOf(const std::string& bus_id) const {
    std::error_code ec;
    return fs::read_symlink(host_ / "sys/bus/pci/devices" / bus_id / "driver", ec).filename().string();
  }
  static kubeletplugin::ClaimView View(const std::string& uid, std::vector<api::ConfiguredResults> groups) {
    return {.ref = {.uid = uid, .name = "c-" + uid, .ns = "ns"}, .groups = std::move(groups)};
  }
  kubeletplugin::Checkpoint Completed(const std::string& uid, const std::vector<kubeletplugin::PreparedDeviceGroup>& g) {
    kubeletplugin::Checkpoint checkpoint;
    checkpoint.claims[uid].state = kubeletplugin::ClaimCheckpointState::kPrepareCompleted;
    checkpoint.claims[uid].prepared_devices = g;
    return checkpoint;
  }

  fs::path host_;
  pid_t kernel_ = -1;
  std::unique_ptr<nvml::Library> library_;
  std::unique_ptr<VfioPassthrough> vfio_;
  std::set<std::string> published_{"unset"};
};

TEST_F(GpuDeviceStateVfioTest, PrepareBindsToVfioWithdrawsTheSiblingAndUnprepareGivesItBack) {
  EXPECT_EQ(*state_->ConfigKindOf("gpu-vfio-0"), api::ConfigKind::kVfioDeviceConfig);
  EXPECT_EQ(*state_->ConfigKindOf("gpu-vfio-7"), api::ConfigKind::kVfioDeviceConfig);
  EXPECT_THAT(state_->DefaultConfigKinds(), ::testing::Contains(api::ConfigKind::kVfioDeviceConfig));
  ASSERT_TRUE(state_->SweepLeftovers(kubeletplugin::Checkpoint{}).ok());
  EXPECT_TRUE(published_.empty());

  const auto view = View("uid-vm", {Group(api::ConfigKind::kVfioDeviceConfig, "gpu-vfio-0")});
  auto groups = state_->PrepareDevices(view);
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_EQ(DriverOf("0000:18:00.0"), "vfio-pci");
  EXPECT_TRUE(fs::exists(host_ / "dev/vfio/20"));
  const auto& vfio = std::get<kubeletplugin::PreparedVfio>((*groups)[0].devices.at(0).kind);
  EXPECT_EQ(vfio.pci_bus_id, "0000:18:00.0");
  EXPECT_EQ(vfio.uuid, VfioDeviceUuid("0000:18:00.0"));
  // The container gets the group's node and nothing of the NVIDIA driver.
  auto spec = common::ReadWholeFile(SpecFile("uid-vm"));
  ASSERT_TRUE(spec.ok());
  EXPECT_THAT(*spec, HasSubstr("/dev/vfio/20"));
  EXPECT_THAT(*spec, HasSubstr("NVIDIA_VISIBLE_DEVICES=void"));
  EXPECT_THAT(*spec, ::testing::Not(HasSubstr("/dev/nvidia")));
  EXPECT_THAT(*spec, ::testing::Not(HasSubstr("libnvidia-ml")));
  // The full GPU leaves the slice and is refused to another claim.
  EXPECT_EQ(published_, std::set<std::string>{"gpu-0"});
  EXPECT_EQ(state_->Withdrawn(), std::set<std::string>{"gpu-0"});
  auto refused = state_->PrepareDevices(View("uid-gpu", {Group(api::ConfigKind::kGpuConfig, "gpu-0")}));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), common::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("gpu-0 and gpu-vfio-0 are the same GPU (0000:18:00.0), which "
                                                    "claim uid-vm holds as gpu-vfio-0"));

  const kubeletplugin::Checkpoint checkpoint = Completed("uid-vm", *groups);
  ASSERT_TRUE(state_->UnprepareDevices({.ref = view.ref, .entry = checkpoint.claims.at("uid-vm"), .view = view}).ok());
  EXPECT_EQ(DriverOf("0000:18:00.0"), "nvidia");
  EXPECT_FALSE(fs::exists(host_ / "dev/vfio/20"));
  EXPECT_TRUE(published_.empty());
  EXPECT_FALSE(fs::exists(SpecFile("uid-vm")));

  // And the other way round: a prepared full GPU withdraws its twin.
  auto gpu = state_->PrepareDevices(View("uid-gpu", {Group(api::ConfigKind::kGpuConfig, "gpu-0")}));
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(published_, std::set<std::string>{"gpu-vfio-0"});
  EXPECT_FALSE(state_->PrepareDevices(view).ok());
  EXPECT_EQ(DriverOf("0000:18:00.0"), "nvidia");
}

// upstream #1089: a GPU on vfio-pci before the plugin started is only a
// twin, and stays on vfio-pci after its claim.
TEST_F(GpuDeviceStateVfioTest, AGpuBoundBeforeThePluginStaysBound) {
  ASSERT_TRUE(state_->SweepLeftovers(kubeletplugin::Checkpoint{}).ok());
  EXPECT_EQ(DriverOf("0000:2a:00.0"), "vfio-pci");
  const auto view = View("uid-pre", {Group(api::ConfigKind::kVfioDeviceConfig, "gpu-vfio-1")});
  auto groups = state_->PrepareDevices(view);
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_TRUE(published_.empty()) << "no full GPU to withdraw: NVML does not see it";
  const kubeletplugin::Checkpoint checkpoint = Completed("uid-pre", *groups);
  ASSERT_TRUE(state_->UnprepareDevices({.ref = view.ref, .entry = checkpoint.claims.at("uid-pre"), .view = view}).ok());
  EXPECT_EQ(DriverOf("0000:2a:00.0"), "vfio-pci");
  EXPECT_TRUE(fs::exists(host_ / "dev/vfio/21"));
}

TEST_F(GpuDeviceStateVfioTest, IommufdAndTheApiDeviceAndOneVfioGroupPerClaim) {
  api::ConfiguredResults group = Group(api::ConfigKind::kVfioDeviceConfig, "gpu-vfio-2");
  group.config.object["iommu"] = {{"backendPolicy", "PreferIommuFD"}, {"enableAPIDevice", true}};
  auto groups = state_->PrepareDevices(View("uid-fd", {group}));
  ASSERT_TRUE(groups.ok()) << groups.status();
  auto spec = common::ReadWholeFile(SpecFile("uid-fd"));
  ASSERT_TRUE(spec.ok());
  EXPECT_THAT(*spec, ::testing::ContainsRegex("/dev/vfio/devices/vfio[0-9]+"));
  EXPECT_THAT(*spec, HasSubstr("/dev/iommu"));

  api::ConfiguredResults second = Group(api::ConfigKind::kVfioDeviceConfig, "gpu-vfio-3");
  second.source = "claim config[1].opaque.parameters";
  auto two = state_->PrepareDevices(View("uid-two", {Group(api::ConfigKind::kVfioDeviceConfig, "gpu-vfio-4"), second}));
  ASSERT_FALSE(two.ok());
  EXPECT_THAT(two.status().message(), HasSubstr("has 2 VFIO device groups"));
  EXPECT_EQ(DriverOf("0000:5d:00.0"), "nvidia") << "nothing bound for a refused claim";
}

// A bind whose claim never completed (a crash before the checkpoint) is
// given back by the sweep; a record of another boot is not acted on.
TEST_F(GpuDeviceStateVfioTest, TheSweepGivesBackWhatNoPreparedClaimHolds) {
  ASSERT_TRUE(state_->PrepareDevices(View("uid-crash", {Group(api::ConfigKind::kVfioDeviceConfig, "gpu-vfio-0")})).ok());
  EXPECT_EQ(DriverOf("0000:18:00.0"), "vfio-pci");
  // The plugin restarts: a fresh state over the same record.
  state_.reset();
  DiscoveryOptions discovery;
  discovery.sysfs_root = host_ / "sys";
  auto inventory = DiscoverDevices(*library_, discovery);
  ASSERT_TRUE(inventory.ok());
  MakeState(std::move(*inventory));
  ASSERT_TRUE(state_->SweepLeftovers(kubeletplugin::Checkpoint{}).ok());
  EXPECT_EQ(DriverOf("0000:18:00.0"), "nvidia");
}

// A Fabric Manager partition of GPUs with these module ids.
// Each GPU with 18 NVLink4 links in the partition (one without a peer: none),
// as the hgx-h100 profile's Fabric Manager gives them.
fabricmanager::Partition Partition(std::uint32_t id, const std::vector<std::uint32_t>& modules) {
  fabricmanager::Partition p;
  p.id = id;
  for (std::uint32_t module : modules) {
    fabricmanager::PartitionGpu gpu;
    gpu.physical_id = module;
    gpu.num_nvlinks_available = modules.size() > 1 ? 18 : 0;
    gpu.max_num_nvlinks = 18;
    gpu.nvlink_line_rate_mbps = 26562;
    p.gpus.push_back(gpu);
  }
  return p;
}

// FabricManagerPartitioning: Prepare activates the Fabric Manager partition
// made of exactly the claim's GPUs (by module id) before touching them;
// Unprepare deactivates it unless another prepared claim holds one of them.
class FakeFabricPartitions final : public FabricPartitions {
 public:
  FakeFabricPartitions() {
    table_ = *PartitionTable::From({Partition(0, {1, 2, 3, 4}), Partition(1, {1, 2}), Partition(2, {3, 4}),
                                    Partition(3, {1}), Partition(4, {2})});
  }
  const PartitionTable& table() const override { return table_; }
  common::Status Activate(std::uint32_t id) override {
    calls.push_back("activate " + std::to_string(id));
    if (failure.ok()) active.insert(id);
    return failure;
  }
  common::Status Deactivate(std::uint32_t id) override {
    calls.push_back("deactivate " + std::to_string(id));
    if (failure.ok()) active.erase(id);
    return failure;
  }
  common::StatusOr<std::vector<fabricmanager::Partition>> ListNow() override {
    std::vector<fabricmanager::Partition> partitions = table_.partitions();
    for (fabricmanager::Partition& partition : partitions) {
      partition.is_active = active.contains(partition.id);
      for (fabricmanager::PartitionGpu& gpu : partition.gpus) {
        if (auto failed = failed_links.find(gpu.physical_id); failed != failed_links.end()) {
          gpu.num_nvlinks_available -= std::min(gpu.num_nvlinks_available, failed->second);
        }
      }
    }
    return partitions;
  }
  std::set<std::uint32_t> active;
  std::map<std::uint32_t, std::uint32_t> failed_links;  // module id -> NVLinks down
  std::vector<std::string> calls;
  common::Status failure;

 private:
  PartitionTable table_;
};

class GpuDeviceStateFabricTest : public GpuDeviceStateTest {
 protected:
  void SetUp() override {
    GpuDeviceStateTest::SetUp();
    NodeInventory inventory;
    inventory.driver_version = kVersion;
    for (std::uint32_t minor = 0; minor < 4; ++minor) {
      GpuInfo gpu = Gpu(minor, "GPU-000" + std::to_string(minor));
      gpu.module_id = minor + 1;
      inventory.gpus.push_back(gpu);
    }
    state_ = std::make_unique<GpuDeviceState>(std::move(inventory), *cdi_, policy_,
                                              GpuDeviceStateOptions{.fabric = &fabric_, .exact_set_partitions = true});
  }
  static kubeletplugin::ClaimView Claim(const std::string& uid, std::vector<std::string> devices) {
    api::ConfiguredResults group = Group(api::ConfigKind::kGpuConfig, devices.front());
    group.results.clear();
    for (const std::string& device : devices) {
      group.results.push_back({.request = "r", .pool = "node-a", .device = device, .admin_access = false,
                               .share_id = std::nullopt});
    }
    return {.ref = {.uid = uid, .name = "c", .ns = "ns"}, .groups = {group}};
  }
  FakeFabricPartitions fabric_;
};

TEST_F(GpuDeviceStateFabricTest, PrepareActivatesThePartitionOfExactlyTheClaimsGpusAndUnprepareDeactivatesIt) {
  const kubeletplugin::ClaimView view = Claim("uid-fm", {"gpu-2", "gpu-3"});
  auto groups = state_->PrepareDevices(view);
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_EQ(fabric_.calls, std::vector<std::string>{"activate 2"});

  fabric_.calls.clear();
  kubeletplugin::CheckpointedClaim entry;
  entry.state = kubeletplugin::ClaimCheckpointState::kPrepareCompleted;
  entry.prepared_devices = *groups;
  ASSERT_TRUE(state_->UnprepareDevices({.ref = view.ref, .entry = entry, .view = view}).ok());
  EXPECT_EQ(fabric_.calls, std::vector<std::string>{"deactivate 2"});
}

TEST_F(GpuDeviceStateFabricTest, GpusThatAreNoPartitionAreRefusedNamingTheAttributeToMatch) {
  auto groups = state_->PrepareDevices(Claim("uid-odd", {"gpu-0", "gpu-2"}));
  ASSERT_FALSE(groups.ok());
  EXPECT_EQ(groups.status().code(), common::StatusCode::kFailedPrecondition);
  EXPECT_THAT(groups.status().message(), HasSubstr("module ids 1,3"));
  EXPECT_THAT(groups.status().message(), HasSubstr("matchAttribute: gpu.nvidia.com/partition2"));
  EXPECT_TRUE(fabric_.calls.empty()) << "nothing activated";
  EXPECT_FALSE(fs::exists(SpecFile("uid-odd")));
}

TEST_F(GpuDeviceStateFabricTest, AFailedActivationFailsPrepareAndAPrepareStartedLeftoverIsDeactivated) {
  fabric_.failure = common::FailedPreconditionError("fmActivateFabricPartition(1): FM_ST_NVLINK_ERROR");
  const kubeletplugin::ClaimView view = Claim("uid-nvlink", {"gpu-0", "gpu-1"});
  auto groups = state_->PrepareDevices(view);
  ASSERT_FALSE(groups.ok());
  EXPECT_THAT(groups.status().message(), HasSubstr("FM_ST_NVLINK_ERROR"));
  EXPECT_FALSE(fs::exists(SpecFile("uid-nvlink")));

  // A crash after the activation: the leftover has only its allocation.
  fabric_.failure = common::OkStatus();
  fabric_.calls.clear();
  kubeletplugin::CheckpointedClaim entry;
  entry.state = kubeletplugin::ClaimCheckpointState::kPrepareStarted;
  ASSERT_TRUE(state_->UnprepareDevices({.ref = view.ref, .entry = entry, .view = view}).ok());
  EXPECT_EQ(fabric_.calls, std::vector<std::string>{"deactivate 1"});
}

TEST_F(GpuDeviceStateFabricTest, APartitionStaysWhileAnotherClaimHoldsItsGpus) {
  const kubeletplugin::ClaimView view = Claim("uid-shared", {"gpu-0"});
  auto groups = state_->PrepareDevices(view);
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_EQ(fabric_.calls, std::vector<std::string>{"activate 3"});
  fabric_.calls.clear();
  kubeletplugin::CheckpointedClaim entry;
  entry.state = kubeletplugin::ClaimCheckpointState::kPrepareCompleted;
  entry.prepared_devices = *groups;
  ASSERT_TRUE(state_->UnprepareDevices(
                        {.ref = view.ref, .entry = entry, .view = view, .held_by_other_claims = {"gpu-0"}})
                  .ok());
  EXPECT_TRUE(fabric_.calls.empty());
}

// The sweep: a partition no completed claim holds (a Prepare that crashed
// after activating it) goes; a completed claim's partition that FM lost (a
// restart) comes back.
TEST_F(GpuDeviceStateFabricTest, TheSweepMakesFabricManagersActiveSetThatOfTheCompletedClaims) {
  const kubeletplugin::ClaimView done = Claim("uid-done", {"gpu-0", "gpu-1"});
  auto groups = state_->PrepareDevices(done);
  ASSERT_TRUE(groups.ok()) << groups.status();
  kubeletplugin::Checkpoint checkpoint;
  kubeletplugin::CheckpointedClaim& completed = checkpoint.claims["uid-done"];
  completed.state = kubeletplugin::ClaimCheckpointState::kPrepareCompleted;
  completed.prepared_devices = *groups;
  checkpoint.claims["uid-crashed"].state = kubeletplugin::ClaimCheckpointState::kPrepareStarted;
  fabric_.active = {2};  // the crashed Prepare's partition; FM forgot partition 1
  fabric_.calls.clear();
  ASSERT_TRUE(state_->SweepLeftovers(checkpoint).ok());
  EXPECT_EQ(fabric_.calls, (std::vector<std::string>{"deactivate 2", "activate 1"}));
  EXPECT_EQ(fabric_.active, std::set<std::uint32_t>{1});
  fabric_.calls.clear();
  ASSERT_TRUE(state_->SweepLeftovers(checkpoint).ok());
  EXPECT_TRUE(fabric_.calls.empty()) << "nothing to do once in step";
}

// Seed 002's fabricTopologyConfig (FabricTopologySupport) on the same
// 4-GPU node: partitions 0 {1,2,3,4}, 1 {1,2}, 2 {3,4}, 3 {1}, 4 {2}; each
// GPU with 18 NVLinks of 26562 MB/s in a multi-GPU partition (956.2 GB/s).
class GpuDeviceStateFabricTopologyTest : public GpuDeviceStateFabricTest {
 protected:
  void SetUp() override {
    GpuDeviceStateFabricTest::SetUp();
    Remake(&fabric_, /*exact_set=*/false);
  }
  void Remake(FabricPartitions* fabric, bool exact_set) {
    NodeInventory inventory = state_->inventory();
    state_ = std::make_unique<GpuDeviceState>(
        std::move(inventory), *cdi_, policy_,
        GpuDeviceStateOptions{.fabric = fabric,
                              .exact_set_partitions = exact_set,
                              .on_fabric_note = [this](const kubeletplugin::ClaimRef& claim, const std::string& note) {
                                notes.push_back(claim.uid + ": " + note);
                              }});
  }
  static kubeletplugin::ClaimView Topology(const std::string& uid, std::vector<std::string> devices,
                                           nlohmann::json topology) {
    kubeletplugin::ClaimView view = Claim(uid, std::move(devices));
    view.groups[0].source = "claim config[0].opaque.parameters";
    view.groups[0].config.object["fabricTopologyConfig"] = std::move(topology);
    return view;
  }
  // Prepare, then the checkpoint entry a completed Prepare leaves.
  kubeletplugin::CheckpointedClaim Prepared(const kubeletplugin::ClaimView& view) {
    auto groups = state_->PrepareDevices(view);
    EXPECT_TRUE(groups.ok()) << groups.status();
    kubeletplugin::CheckpointedClaim entry;
    entry.state = kubeletplugin::ClaimCheckpointState::kPrepareCompleted;
    if (groups.ok()) entry.prepared_devices = *groups;
    return entry;
  }
  std::vector<std::string> notes;
};

TEST_F(GpuDeviceStateFabricTopologyTest, AutoActivatesThePartitionTheGpusFormAndRecordsItForUnprepare) {
  const kubeletplugin::ClaimView view =
      Topology("uid-auto", {"gpu-2", "gpu-3"}, {{"strategy", "Auto"}, {"partitionSize", 2}, {"minBandwidth", 600.0},
                                               {"maxLatency", 0.1}});
  const kubeletplugin::CheckpointedClaim entry = Prepared(view);
  EXPECT_EQ(fabric_.calls, std::vector<std::string>{"activate 2"});
  ASSERT_EQ(entry.prepared_devices.size(), 1U);
  EXPECT_EQ(std::get<kubeletplugin::GpuConfigState>(entry.prepared_devices[0].config_state).fabric_partition_ids,
            std::vector<std::uint32_t>{2});
  EXPECT_TRUE(notes.empty());
  fabric_.calls.clear();
  ASSERT_TRUE(state_->UnprepareDevices({.ref = view.ref, .entry = entry, .view = view}).ok());
  EXPECT_EQ(fabric_.calls, std::vector<std::string>{"deactivate 2"});
}

TEST_F(GpuDeviceStateFabricTopologyTest, AutoRefusesGpusOfNoPartitionTheWrongCountAndUnmeetableBounds) {
  auto odd = state_->PrepareDevices(Topology("uid-odd", {"gpu-0", "gpu-2"}, {{"partitionSize", 2}}));
  EXPECT_THAT(odd.status().message(),
              HasSubstr("claim config[0].opaque.parameters.fabricTopologyConfig: the allocated GPUs (modules 1,3) are "
                        "not one Fabric Manager partition of 2"));
  auto count = state_->PrepareDevices(Topology("uid-count", {"gpu-0", "gpu-1"}, {{"partitionSize", 4}}));
  EXPECT_THAT(count.status().message(), HasSubstr("partitionSize: 4 GPUs, but 2 GPU(s) were allocated"));
  auto one = state_->PrepareDevices(Topology("uid-one", {"gpu-0"}, nlohmann::json::object()));
  EXPECT_THAT(one.status().message(), HasSubstr("1 GPU(s) were allocated, which is no fabric partition size"));

  auto fast = state_->PrepareDevices(Topology("uid-fast", {"gpu-0", "gpu-1"}, {{"minBandwidth", 1000}}));
  ASSERT_FALSE(fast.ok());
  EXPECT_EQ(fast.status().code(), common::StatusCode::kFailedPrecondition);
  EXPECT_THAT(fast.status().message(),
              HasSubstr("fabricTopologyConfig.minBandwidth: 1000 GB/s cannot be met: partition 1 (GPU modules 1,2) "
                        "gives 956.2 GB/s (18 NVLinks x 26562 MB/s x 2 directions on its weakest GPU)"));
  auto quick = state_->PrepareDevices(Topology("uid-quick", {"gpu-0", "gpu-1"}, {{"maxLatency", 0.0005}}));
  EXPECT_THAT(quick.status().message(), HasSubstr("maxLatency: 0.0005 ms cannot be met"));
  // Half of module 1's NVLinks failed since start-up: FM's live figures count.
  fabric_.failed_links[1] = 9;
  auto degraded = state_->PrepareDevices(Topology("uid-degraded", {"gpu-0", "gpu-1"}, {{"minBandwidth", 600}}));
  EXPECT_THAT(degraded.status().message(), HasSubstr("gives 478.1 GB/s (9 NVLinks x 26562 MB/s"));
  EXPECT_TRUE(fabric_.calls.empty()) << "nothing activated for a refused claim";
}

TEST_F(GpuDeviceStateFabricTopologyTest, ManualActivatesTheNamedPartitionsWhichMustCoverExactlyTheGpus) {
  const kubeletplugin::ClaimView both =
      Topology("uid-manual", {"gpu-0", "gpu-1", "gpu-2", "gpu-3"}, {{"strategy", "Manual"}, {"partitionIDs", {"1", "partition-2"}}});
  const kubeletplugin::CheckpointedClaim entry = Prepared(both);
  EXPECT_EQ(fabric_.calls, (std::vector<std::string>{"activate 1", "activate 2"}));
  fabric_.calls.clear();
  ASSERT_TRUE(state_->UnprepareDevices({.ref = both.ref, .entry = entry, .view = both}).ok());
  EXPECT_EQ(fabric_.calls, (std::vector<std::string>{"deactivate 1", "deactivate 2"}));
  fabric_.calls.clear();

  auto short_of = state_->PrepareDevices(
      Topology("uid-short", {"gpu-0", "gpu-1", "gpu-2", "gpu-3"}, {{"strategy", "Manual"}, {"partitionIDs", {"1"}}}));
  EXPECT_THAT(short_of.status().message(),
              HasSubstr("partitions 1 hold GPU modules 1,2, but the allocated GPUs are modules 1,2,3,4"));
  auto missing = state_->PrepareDevices(
      Topology("uid-missing", {"gpu-0", "gpu-1"}, {{"strategy", "Manual"}, {"partitionIDs", {"9"}}}));
  EXPECT_THAT(missing.status().message(), HasSubstr("Fabric Manager has no partition 9 on this node (its partitions: 0,1,2,3,4)"));
  auto overlap = state_->PrepareDevices(
      Topology("uid-overlap", {"gpu-0", "gpu-1"}, {{"strategy", "Manual"}, {"partitionIDs", {"1", "3"}}}));
  EXPECT_THAT(overlap.status().message(), HasSubstr("partitions 1,3 overlap on GPU module 1"));
  auto sized = state_->PrepareDevices(Topology(
      "uid-sized", {"gpu-0", "gpu-1"}, {{"strategy", "Manual"}, {"partitionIDs", {"1"}}, {"partitionSize", 4}}));
  EXPECT_THAT(sized.status().message(), HasSubstr("partition 1 has 2 GPUs, not partitionSize 4"));
  EXPECT_TRUE(fabric_.calls.empty());

  // fabricPartitionID: N is Manual of one partition.
  kubeletplugin::ClaimView legacy = Claim("uid-legacy", {"gpu-2", "gpu-3"});
  legacy.groups[0].config.object["fabricPartitionID"] = "2";
  Prepared(legacy);
  EXPECT_EQ(fabric_.calls, std::vector<std::string>{"activate 2"});
}

TEST_F(GpuDeviceStateFabricTopologyTest, DisabledVgpuAndFullPassthroughActivateNothingAndSaySo) {
  Remake(&fabric_, /*exact_set=*/true);  // even with FabricManagerPartitioning's rule on
  const kubeletplugin::CheckpointedClaim disabled =
      Prepared(Topology("uid-disabled", {"gpu-0", "gpu-1"}, {{"strategy", "Disabled"}}));
  Prepared(Topology("uid-vgpu", {"gpu-2", "gpu-3"}, {{"virtualizationModel", "VGPU"}}));
  EXPECT_TRUE(fabric_.calls.empty()) << fabric_.calls.front();
  EXPECT_EQ(std::get<kubeletplugin::GpuConfigState>(disabled.prepared_devices[0].config_state).fabric_partition_ids,
            std::vector<std::uint32_t>{}) << "recorded: needs none";
  ASSERT_EQ(notes.size(), 2U);
  EXPECT_THAT(notes[0], HasSubstr("uid-disabled: claim config[0].opaque.parameters.fabricTopologyConfig: strategy "
                                  "Disabled, no Fabric Manager action for GPU modules 1,2"));
  EXPECT_THAT(notes[1], HasSubstr("uid-vgpu: claim config[0].opaque.parameters.fabricTopologyConfig: "
                                  "virtualizationModel VGPU, no fabric constraint applied to GPU modules 3,4"));

  // FullPassthrough: the GPUs must still be the partition; nothing activated.
  api::FabricTopology full;
  full.model = api::VirtualizationModel::kFullPassthrough;
  full.field = "f";
  auto listed = fabric_.ListNow();
  ASSERT_TRUE(listed.ok());
  auto plan = PlanFabricTopology(full, {1, 2, 3, 4}, *listed);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->activate.empty());
  EXPECT_THAT(plan->note, HasSubstr("FullPassthrough, the guest manages partition(s) 0"));
  EXPECT_FALSE(PlanFabricTopology(full, {1, 3}, *listed).ok());
}

TEST_F(GpuDeviceStateFabricTopologyTest, TwoClaimsGetDisjointPartitionsBothActive) {
  Prepared(Topology("uid-a", {"gpu-0", "gpu-1"}, {{"partitionSize", 2}}));
  Prepared(Topology("uid-b", {"gpu-2", "gpu-3"}, {{"partitionSize", 2}}));
  EXPECT_EQ(fabric_.active, (std::set<std::uint32_t>{1, 2}));
}

// A crash between activation and the checkpoint write leaves a
// PrepareStarted entry: its Unprepare deactivates what the plan names. The
// sweep keeps what completed claims recorded and restores it after an FM
// restart.
TEST_F(GpuDeviceStateFabricTopologyTest, CrashLeftoversAndTheSweepConvergeOnTheRecordedPartitions) {
  const kubeletplugin::ClaimView crashed =
      Topology("uid-crash", {"gpu-0", "gpu-1", "gpu-2", "gpu-3"}, {{"strategy", "Manual"}, {"partitionIDs", {"0"}}});
  ASSERT_TRUE(state_->PrepareDevices(crashed).ok());
  kubeletplugin::CheckpointedClaim started;
  started.state = kubeletplugin::ClaimCheckpointState::kPrepareStarted;
  fabric_.calls.clear();
  ASSERT_TRUE(state_->UnprepareDevices({.ref = crashed.ref, .entry = started, .view = crashed}).ok());
  EXPECT_EQ(fabric_.calls, std::vector<std::string>{"deactivate 0"});

  kubeletplugin::Checkpoint checkpoint;
  checkpoint.claims["uid-a"] = Prepared(Topology("uid-a", {"gpu-0", "gpu-1"}, {{"partitionSize", 2}}));
  checkpoint.claims["uid-off"] = Prepared(Topology("uid-off", {"gpu-2", "gpu-3"}, {{"strategy", "Disabled"}}));
  fabric_.active = {2};  // FM restarted and someone activated 2 by hand
  fabric_.calls.clear();
  ASSERT_TRUE(state_->SweepLeftovers(checkpoint).ok());
  EXPECT_EQ(fabric_.calls, (std::vector<std::string>{"deactivate 2", "activate 1"}));
}

TEST_F(GpuDeviceStateFabricTopologyTest, ANodeWithoutAFabricRefusesAutoButTakesDisabled) {
  Remake(nullptr, false);
  auto groups = state_->PrepareDevices(Topology("uid-nofabric", {"gpu-0", "gpu-1"}, {{"strategy", "Auto"}}));
  EXPECT_THAT(groups.status().message(),
              HasSubstr("fabricTopologyConfig: this node has no NVSwitch fabric that Fabric Manager manages"));
  auto disabled = state_->PrepareDevices(Topology("uid-plain", {"gpu-0", "gpu-1"}, {{"strategy", "Disabled"}}));
  ASSERT_TRUE(disabled.ok()) << disabled.status();
  EXPECT_EQ(std::get<kubeletplugin::GpuConfigState>((*disabled)[0].config_state).fabric_partition_ids, std::nullopt);
}

TEST(PartitionTableTest, BySizeAndExactlyAndWhatFabricManagerMustNotSay) {
  auto table = PartitionTable::From({Partition(0, {1, 2, 3, 4}), Partition(1, {1, 2}), Partition(3, {1})});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(*table->BySize(1), (std::map<std::size_t, std::uint32_t>{{1, 3}, {2, 1}, {4, 0}}));
  EXPECT_EQ(*table->BySize(9), (std::map<std::size_t, std::uint32_t>{}));
  EXPECT_EQ(table->Exactly({2, 1}), std::optional<std::uint32_t>(1));
  EXPECT_EQ(table->Exactly({1, 3}), std::nullopt);

  EXPECT_FALSE(PartitionTable::From({Partition(1, {1}), Partition(1, {2})}).ok()) << "an id twice";
  EXPECT_FALSE(PartitionTable::From({Partition(1, {})}).ok()) << "no GPU";
  EXPECT_FALSE(PartitionTable::From({Partition(1, {2, 2})}).ok()) << "a module twice";
  auto ambiguous = PartitionTable::From({Partition(1, {1, 2}), Partition(2, {1, 3})});
  ASSERT_TRUE(ambiguous.ok());
  EXPECT_THAT(ambiguous->BySize(1).status().message(), HasSubstr("partition2 would be ambiguous"));
}

TEST(FabricManagerAttributesTest, FullGpusCarryTheirModuleAndPartitionsBySize) {
  NodeInventory inventory;
  inventory.driver_version = kVersion;
  inventory.cuda_driver_version = "13.0";
  GpuInfo gpu = Gpu(0, "GPU-0000");
  gpu.cuda_compute_capability = "9.0";
  gpu.module_id = 1;
  inventory.gpus.push_back(gpu);
  PublishOptions options;
  options.fabric_manager_partitioning = true;
  options.fabric_partitions[1] = {{1, 7}, {2, 3}, {4, 1}, {8, 0}};
  auto published = BuildPublishedResources(inventory, options);
  ASSERT_TRUE(published.ok()) << published.status();
  const nlohmann::json device = DeviceToJson(published->devices.at(0));
  EXPECT_EQ(device["attributes"]["gpuModuleID"], nlohmann::json({{"int", 1}}));
  EXPECT_EQ(device["attributes"]["partition1"], nlohmann::json({{"int", 7}}));
  EXPECT_EQ(device["attributes"]["partition2"], nlohmann::json({{"int", 3}}));
  EXPECT_EQ(device["attributes"]["partition8"], nlohmann::json({{"int", 0}}));
}

}  // namespace
}  // namespace nvdra::gpu
