// Mock NVML and the simulated nvidia-smi against a driver root's mock sysfs
// (make-sysfs.py): a GPU not on the nvidia driver (vfio-pci passthrough) is
// not NVML's, as with the real library; MIG state stays keyed by UUID.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "mocknvml_test_util.h"

namespace nvdra::mocknvml::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// h100-sxm GPU 1 (bus 2a) and its UUID; GPU 2's UUID.
constexpr char kBusGpu1[] = "0000:2a:00.0";
constexpr char kUuidGpu1[] = "GPU-a4f87852-c040-2818-e88b-bf8725dc5f71";
constexpr char kUuidGpu2[] = "GPU-a4f87852-c040-2818-e88b-bf8725dc5f72";

std::string RunCommand(const std::string& command) {
  std::string out;
  if (FILE* pipe = ::popen(command.c_str(), "r")) {
    char buffer[4096];
    std::size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
    ::pclose(pipe);
  }
  return out;
}

// A driver root of h100-sxm laid out by make-driver-root with
// NVDRA_MOCK_VFIO_BOUND=`vfio_bound`, and the mock loaded from it.
class MockNvmlSysfs : public ::testing::Test {
 protected:
  void LayOut(const std::string& vfio_bound) {
    root_ = dir_.path() / "root";
    const std::string command = "NVDRA_MOCK_VFIO_BOUND='" + vfio_bound + "' " NVDRA_MOCKNVML_MAKE_DRIVER_ROOT " '" +
                                root_.string() + "' '" NVDRA_MOCKNVML_PROFILES_DIR "/h100-sxm.json' '" NVDRA_MOCKNVML_PATH
                                "'";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    nvml_ = std::make_unique<NvmlLibrary>((root_ / "usr/lib64/libnvidia-ml.so.1").string());
    ASSERT_TRUE(nvml_->loaded());
  }
  // Lays the sysfs tree out again (the library in the root stays: copying
  // over a loaded library would corrupt it).
  void LayOutSysfs(const std::string& vfio_bound) {
    const std::string command = "NVDRA_MOCK_VFIO_BOUND='" + vfio_bound + "' python3 '" +
                                (fs::path(NVDRA_MOCKNVML_MAKE_DRIVER_ROOT).parent_path() / "make-sysfs.py").string() +
                                "' '" + root_.string() + "' '" + (root_ / "mock-nvml/profile.json").string() + "'";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  unsigned Count() {
    unsigned count = 0;
    EXPECT_EQ(nvml_->nvmlDeviceGetCount_v2(&count), abi::NVML_SUCCESS);
    return count;
  }

  TempDir dir_;
  fs::path root_;
  ScopedEnv no_profile_{"MOCK_NVML_PROFILE", nullptr};
  ScopedEnv no_state_{"MOCK_NVML_STATE", nullptr};
  ScopedEnv no_events_{"MOCK_NVML_EVENTS", nullptr};
  std::unique_ptr<NvmlLibrary> nvml_;  // last: shut down before the folder goes
};

TEST_F(MockNvmlSysfs, GpuOnVfioPciIsNotCountedAndIndexesCloseUp) {
  LayOut(kBusGpu1);
  ASSERT_EQ(nvml_->nvmlInit_v2(), abi::NVML_SUCCESS);
  EXPECT_EQ(Count(), 7U);
  EXPECT_EQ(nvml_->Uuid(nvml_->Gpu(0)), "GPU-a4f87852-c040-2818-e88b-bf8725dc5f6c");
  EXPECT_EQ(nvml_->Uuid(nvml_->Gpu(1)), kUuidGpu2);
  abi::nvmlDevice_t device = nullptr;
  EXPECT_EQ(nvml_->nvmlDeviceGetHandleByIndex_v2(7, &device), abi::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml_->nvmlDeviceGetHandleByUUID(kUuidGpu1, &device), abi::NVML_ERROR_NOT_FOUND);
  ASSERT_EQ(nvml_->nvmlDeviceGetHandleByUUID(kUuidGpu2, &device), abi::NVML_SUCCESS);
  unsigned index = 99;
  ASSERT_EQ(nvml_->nvmlDeviceGetIndex(device, &index), abi::NVML_SUCCESS);
  EXPECT_EQ(index, 1U);
  abi::nvmlPciInfo_t pci{};
  ASSERT_EQ(nvml_->nvmlDeviceGetPciInfo_v3(device, &pci), abi::NVML_SUCCESS);
  EXPECT_STREQ(pci.busId, "00000000:3A:00.0");
}

TEST_F(MockNvmlSysfs, MigStateStaysKeyedByUuidWithAGpuAway) {
  LayOut(kBusGpu1);
  ASSERT_EQ(nvml_->nvmlInit_v2(), abi::NVML_SUCCESS);
  // Index 1 is GPU 2 now: its MIG mode change lands on GPU 2's UUID.
  abi::nvmlReturn_t activation = abi::NVML_SUCCESS;
  ASSERT_EQ(nvml_->nvmlDeviceSetMigMode(nvml_->Gpu(1), abi::NVML_DEVICE_MIG_ENABLE, &activation),
            abi::NVML_SUCCESS);
  const nlohmann::json state = nlohmann::json::parse(ReadFile(root_ / "mock-nvml/state.json"));
  EXPECT_EQ(state["gpus"].size(), 8U);  // the GPU away keeps its entry
  EXPECT_EQ(state["gpus"][kUuidGpu2]["migMode"]["current"], 1);
  EXPECT_EQ(state["gpus"][kUuidGpu1]["migMode"]["current"], 0);
}

TEST_F(MockNvmlSysfs, RebindIsSeenAtTheNextInit) {
  LayOut(kBusGpu1);
  ASSERT_EQ(nvml_->nvmlInit_v2(), abi::NVML_SUCCESS);
  ASSERT_EQ(Count(), 7U);
  LayOutSysfs("");  // back on nvidia
  EXPECT_EQ(Count(), 7U);  // enumerated at init
  ASSERT_EQ(nvml_->nvmlShutdown(), abi::NVML_SUCCESS);
  ASSERT_EQ(nvml_->nvmlInit_v2(), abi::NVML_SUCCESS);
  EXPECT_EQ(Count(), 8U);
  EXPECT_EQ(nvml_->Uuid(nvml_->Gpu(1)), kUuidGpu1);

  // Unbound from every driver (between an unbind and a bind): not NVML's.
  ASSERT_EQ(nvml_->nvmlShutdown(), abi::NVML_SUCCESS);
  fs::remove(root_ / "sys/bus/pci/devices" / kBusGpu1 / "driver");
  ASSERT_EQ(nvml_->nvmlInit_v2(), abi::NVML_SUCCESS);
  EXPECT_EQ(Count(), 7U);
}

TEST_F(MockNvmlSysfs, RootWithoutDriverTreeKeepsEveryGpu) {
  LayOut(kBusGpu1);
  // A tree without sys/bus/pci/drivers (a test's own partial sysfs, or a
  // root from before the tree existed) says nothing about drivers.
  fs::remove_all(root_ / "sys/bus/pci/drivers");
  ASSERT_EQ(nvml_->nvmlInit_v2(), abi::NVML_SUCCESS);
  EXPECT_EQ(Count(), 8U);
}

TEST_F(MockNvmlSysfs, SimulatedNvidiaSmiLeavesOutGpusOnVfioPci) {
  LayOut(kBusGpu1);
  const std::string list = RunCommand("'" + (root_ / "usr/bin/nvidia-smi").string() + "' -L");
  EXPECT_THAT(list, Not(HasSubstr(kUuidGpu1)));
  EXPECT_THAT(list, HasSubstr("GPU 1: NVIDIA H100 80GB HBM3 (UUID: " + std::string(kUuidGpu2) + ")"));
  EXPECT_THAT(list, HasSubstr("GPU 6: "));
  EXPECT_THAT(list, Not(HasSubstr("GPU 7: ")));
}

}  // namespace
}  // namespace nvdra::mocknvml::testing
