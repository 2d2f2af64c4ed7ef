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
    state_ = std::make_unique<GpuDeviceState>(std::move(inventory), *cdi_);
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

  fs::path dir_;
  std::string mig_name_;
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

}  // namespace
}  // namespace nvdra::gpu
