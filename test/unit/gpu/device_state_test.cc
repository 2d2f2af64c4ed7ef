// The GPU plugin's device state at unit tier: which config kind each device
// takes, the typed groups PrepareDevices returns, and the claim CDI spec it
// writes and UnprepareDevices removes. The node is a hand-made inventory
// over a mock driver root (test/mocknvml/make-driver-root with a100-mig.json,
// whose capability files give GPU 2's GI 5 / CI 0 their device minors).
#include "gpu/device_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gpu/claim_cdi.h"
#include "gpu/mig_profile.h"
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

}  // namespace
}  // namespace nvdra::gpu
