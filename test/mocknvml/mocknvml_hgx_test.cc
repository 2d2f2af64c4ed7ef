// The hgx-h100 profile through the mock NVML, and the Fabric Manager pieces
// make-driver-root lays out for it (the FM library itself is tested through
// our loader, test/unit/fabricmanager).

#include <set>

#include "mocknvml_test_util.h"

namespace nvdra::mocknvml::testing {
namespace {

namespace fs = std::filesystem;

class HgxProfileTest : public MockNvmlTest {};

TEST_F(HgxProfileTest, LoadsEightH100sWithModuleIdsOneToEight) {
  UseProfile("hgx-h100.json");
  InitOrFail();
  unsigned count = 0;
  ASSERT_EQ(nvml_->nvmlDeviceGetCount_v2(&count), abi::NVML_SUCCESS);
  ASSERT_EQ(count, 8U);
  std::set<std::string> uuids;
  for (unsigned i = 0; i < count; ++i) {
    abi::nvmlDevice_t gpu = nvml_->Gpu(i);
    EXPECT_EQ(nvml_->Name(gpu), "NVIDIA H100 80GB HBM3");
    unsigned module_id = 0;
    ASSERT_EQ(nvml_->nvmlDeviceGetModuleId(gpu, &module_id), abi::NVML_SUCCESS);
    EXPECT_EQ(module_id, i + 1);
    uuids.insert(nvml_->Uuid(gpu));
  }
  EXPECT_EQ(uuids.size(), 8U);
}

TEST_F(HgxProfileTest, FabricIsCompletedWithoutAClusterUuid) {
  UseProfile("hgx-h100.json");
  InitOrFail();
  abi::nvmlGpuFabricInfo_t info{};
  ASSERT_EQ(nvml_->nvmlDeviceGetGpuFabricInfo(nvml_->Gpu(0), &info), abi::NVML_SUCCESS);
  EXPECT_EQ(info.state, abi::NVML_GPU_FABRIC_STATE_COMPLETED);
  for (unsigned char byte : info.clusterUuid) EXPECT_EQ(byte, 0);
}

std::string LayOut(const fs::path& root, const std::string& profile) {
  const std::string command = std::string(NVDRA_MOCKNVML_MAKE_DRIVER_ROOT) + " '" + root.string() + "' '" +
                              NVDRA_MOCKNVML_PROFILES_DIR + "/" + profile + "' '" NVDRA_MOCKNVML_PATH "'";
  return std::system(command.c_str()) == 0 ? "" : "failed: " + command;
}

TEST(MakeDriverRoot, FabricManagerNodeGetsLibnvfmAndNvswitchDevices) {
  TempDir dir;
  const fs::path root = dir.path() / "root";
  ScopedEnv no_path("NVDRA_MOCKNVFM_PATH", nullptr);
  ASSERT_EQ(LayOut(root, "hgx-h100.json"), "");
  EXPECT_TRUE(fs::is_regular_file(root / "usr/lib64/libnvfm.so.580.159.04"));
  EXPECT_EQ(fs::read_symlink(root / "usr/lib64/libnvfm.so.1"), "libnvfm.so.580.159.04");
  EXPECT_EQ(fs::read_symlink(root / "usr/lib64/libnvfm.so"), "libnvfm.so.1");
  std::set<std::string> switches;
  for (const auto& entry : fs::directory_iterator(root / "proc/driver/nvidia-nvswitch/devices")) {
    switches.insert(entry.path().filename().string());
  }
  EXPECT_EQ(switches, (std::set<std::string>{"0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"}));
}

TEST(MakeDriverRoot, NodeWithoutFabricManagerGetsNeither) {
  TempDir dir;
  const fs::path root = dir.path() / "root";
  ASSERT_EQ(LayOut(root, "h100-sxm.json"), "");
  EXPECT_FALSE(fs::exists(root / "usr/lib64/libnvfm.so.1"));
  EXPECT_FALSE(fs::exists(root / "proc/driver/nvidia-nvswitch"));
}

}  // namespace
}  // namespace nvdra::mocknvml::testing
