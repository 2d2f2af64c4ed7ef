// The hgx-h100 profile through the mock NVML, and the Fabric Manager pieces
// make-driver-root lays out for it (the FM library itself is tested through
// our loader, test/unit/fabricmanager).

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

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

// The character majors of a /proc/devices file, by name.
std::map<std::string, unsigned> CharMajors(const fs::path& file) {
  std::ifstream in(file);
  std::map<std::string, unsigned> out;
  std::string line;
  bool chars = false;
  while (std::getline(in, line)) {
    if (line == "Character devices:") chars = true;
    if (line == "Block devices:") chars = false;
    std::istringstream fields(line);
    unsigned major = 0;
    std::string name;
    if (chars && fields >> major >> name) out[name] = major;
  }
  return out;
}

// "c <major>:<minor> <mode>" of a character device, else what it is.
std::string Node(const fs::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return "missing";
  if (!S_ISCHR(st.st_mode)) return "not a character device";
  std::ostringstream out;
  out << "c " << major(st.st_rdev) << ":" << minor(st.st_rdev) << " " << std::oct << (st.st_mode & 07777);
  return out.str();
}

// Issue #28 point 2: the device nodes are real character devices with the
// real driver's numbers, their majors those the root's proc/devices
// declares; laying the root out again (over its own nodes) keeps them.
TEST(MakeDriverRoot, DeviceNodesAreCharacterDevicesWithTheProcDevicesMajors) {
  if (::geteuid() != 0) GTEST_SKIP() << "make-driver-root makes device nodes with mknod: run as root";
  TempDir dir;
  const fs::path root = dir.path() / "root";
  for (int run = 0; run < 2; ++run) {
    ASSERT_EQ(LayOut(root, "h100-sxm.json"), "");
    const auto majors = CharMajors(root / "proc/devices");
    ASSERT_EQ(majors.count("nvidia-frontend"), 1U);
    ASSERT_EQ(majors.count("nvidia-uvm"), 1U);
    ASSERT_EQ(majors.count("nvidia-caps"), 1U);
    const unsigned frontend = majors.at("nvidia-frontend");
    const unsigned uvm = majors.at("nvidia-uvm");
    const unsigned caps = majors.at("nvidia-caps");
    EXPECT_EQ(frontend, 195U);  // the real driver's fixed major
    auto c = [](unsigned major, unsigned minor, const char* mode) {
      return "c " + std::to_string(major) + ":" + std::to_string(minor) + " " + mode;
    };
    for (unsigned minor = 0; minor < 8; ++minor) {
      EXPECT_EQ(Node(root / ("dev/nvidia" + std::to_string(minor))), c(frontend, minor, "666")) << minor;
    }
    EXPECT_EQ(Node(root / "dev/nvidiactl"), c(frontend, 255, "666"));
    EXPECT_EQ(Node(root / "dev/nvidia-modeset"), c(frontend, 254, "666"));
    EXPECT_EQ(Node(root / "dev/nvidia-uvm"), c(uvm, 0, "666"));
    EXPECT_EQ(Node(root / "dev/nvidia-uvm-tools"), c(uvm, 1, "666"));
    EXPECT_EQ(Node(root / "dev/nvidia-caps/nvidia-cap1"), c(caps, 1, "400"));
    EXPECT_EQ(Node(root / "dev/nvidia-caps/nvidia-cap2"), c(caps, 2, "444"));
    EXPECT_EQ(Node(root / "dev/nvidia8"), "missing");
    // No mock node may carry a major this machine's kernel registers.
    const auto host = CharMajors("/proc/devices");
    for (const auto& [name, major] : majors) {
      if (name.starts_with("nvidia")) {
        for (const auto& [host_name, host_major] : host) EXPECT_NE(major, host_major) << name << " vs " << host_name;
      }
    }
  }
}

// A chosen major that this machine registers stops the layout with a clear
// message: a node with it would open that real driver.
TEST(MakeDriverRoot, RefusesAMajorThisMachineRegisters) {
  TempDir dir;
  const fs::path fake = dir.path() / "host-devices";
  std::ofstream(fake) << "Character devices:\n  1 mem\n508 some-real-driver\n\nBlock devices:\n195 blk\n";
  const fs::path err = dir.path() / "stderr";
  const std::string command = "NVDRA_MOCK_HOST_PROC_DEVICES='" + fake.string() + "' " + NVDRA_MOCKNVML_MAKE_DRIVER_ROOT +
                              " '" + (dir.path() / "root").string() + "' '" + NVDRA_MOCKNVML_PROFILES_DIR +
                              "/h100-sxm.json' '" NVDRA_MOCKNVML_PATH "' 2>'" + err.string() + "'";
  EXPECT_NE(std::system(command.c_str()), 0);
  std::stringstream message;
  message << std::ifstream(err).rdbuf();
  EXPECT_NE(message.str().find("character major 508 is registered on this machine"), std::string::npos) << message.str();
  EXPECT_NE(message.str().find("some-real-driver"), std::string::npos) << message.str();
  EXPECT_FALSE(fs::exists(dir.path() / "root/dev/nvidia0"));
}

}  // namespace
}  // namespace nvdra::mocknvml::testing
