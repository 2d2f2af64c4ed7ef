// Mock NVML: profile selection, init counting, strings, error texts and the
// device values of each shipped profile.

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "mocknvml_test_util.h"

namespace nvdra::mocknvml::testing {
namespace {

using ::testing::HasSubstr;

TEST(MockNvmlProfileSelection, NoProfileGivesDriverNotLoaded) {
  ScopedEnv no_profile("MOCK_NVML_PROFILE", nullptr);
  NvmlLibrary nvml(NVDRA_MOCKNVML_PATH);  // the build folder is no driver root
  ASSERT_TRUE(nvml.loaded());
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(nvml.nvmlInit_v2(), abi::NVML_ERROR_DRIVER_NOT_LOADED);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("MOCK_NVML_PROFILE unset"));
  unsigned count = 0;
  EXPECT_EQ(nvml.nvmlDeviceGetCount_v2(&count), abi::NVML_ERROR_UNINITIALIZED);
}

TEST(MockNvmlProfileSelection, FindsProfileUnderDriverRoot) {
  TempDir root;
  const std::string command = std::string(NVDRA_MOCKNVML_MAKE_DRIVER_ROOT) + " '" +
                              root.path().string() + "' '" NVDRA_MOCKNVML_PROFILES_DIR
                              "/l40s.json' '" NVDRA_MOCKNVML_PATH "'";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  ScopedEnv no_profile("MOCK_NVML_PROFILE", nullptr);
  ScopedEnv no_state("MOCK_NVML_STATE", nullptr);
  NvmlLibrary nvml((root.path() / "usr/lib64/libnvidia-ml.so.1").string());
  ASSERT_TRUE(nvml.loaded());
  ASSERT_EQ(nvml.nvmlInit_v2(), abi::NVML_SUCCESS);
  unsigned count = 0;
  ASSERT_EQ(nvml.nvmlDeviceGetCount_v2(&count), abi::NVML_SUCCESS);
  EXPECT_EQ(count, 4U);
  EXPECT_EQ(nvml.Name(nvml.Gpu(0)), "NVIDIA L40S");
  EXPECT_TRUE(std::filesystem::exists(root.path() / "mock-nvml/state.json"));
}

TEST(MockNvmlProfileSelection, EnvironmentPathThatIsNoFileGivesDriverNotLoaded) {
  ScopedEnv profile("MOCK_NVML_PROFILE", "/nonexistent/profile.json");
  NvmlLibrary nvml(NVDRA_MOCKNVML_PATH);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(nvml.nvmlInit_v2(), abi::NVML_ERROR_DRIVER_NOT_LOADED);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("/nonexistent/profile.json"));
}

TEST(MockNvmlProfileSelection, MalformedProfileNamesTheField) {
  TempDir dir;
  std::string text = ReadFile(NVDRA_MOCKNVML_PROFILES_DIR "/l40s.json");
  const std::string good = "\"total\": 51539607552";
  ASSERT_NE(text.find(good), std::string::npos);
  text.replace(text.find(good), good.size(), "\"total\": \"48GiB\"");
  WriteFile(dir.path() / "profile.json", text);
  ScopedEnv profile("MOCK_NVML_PROFILE", (dir.path() / "profile.json").c_str());
  NvmlLibrary nvml(NVDRA_MOCKNVML_PATH);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(nvml.nvmlInit_v2(), abi::NVML_ERROR_UNKNOWN);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("devices[0].memory.total"));
}

class MockNvmlDevice : public MockNvmlTest {};

TEST_F(MockNvmlDevice, InitIsReferenceCounted) {
  UseProfile("h100-sxm.json");
  unsigned count = 0;
  EXPECT_EQ(nvml_->nvmlDeviceGetCount_v2(&count), abi::NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(nvml_->nvmlShutdown(), abi::NVML_ERROR_UNINITIALIZED);
  ASSERT_EQ(nvml_->nvmlInit_v2(), abi::NVML_SUCCESS);
  ASSERT_EQ(nvml_->nvmlInitWithFlags(abi::NVML_INIT_FLAG_NO_GPUS), abi::NVML_SUCCESS);
  EXPECT_EQ(nvml_->nvmlShutdown(), abi::NVML_SUCCESS);
  EXPECT_EQ(nvml_->nvmlDeviceGetCount_v2(&count), abi::NVML_SUCCESS);
  EXPECT_EQ(nvml_->nvmlShutdown(), abi::NVML_SUCCESS);
  EXPECT_EQ(nvml_->nvmlDeviceGetCount_v2(&count), abi::NVML_ERROR_UNINITIALIZED);
  abi::nvmlDevice_t device = nullptr;
  EXPECT_EQ(nvml_->nvmlDeviceGetHandleByIndex_v2(0, &device), abi::NVML_ERROR_UNINITIALIZED);
}

TEST_F(MockNvmlDevice, HandlesStayTheSameAcrossReinit) {
  UseProfile("h100-sxm.json");
  InitOrFail();
  abi::nvmlDevice_t first = nvml_->Gpu(3);
  ASSERT_EQ(nvml_->nvmlShutdown(), abi::NVML_SUCCESS);
  InitOrFail();
  EXPECT_EQ(nvml_->Gpu(3), first);
}

TEST_F(MockNvmlDevice, StringBuffersCheckSizeAndNull) {
  UseProfile("h100-sxm.json");
  InitOrFail();
  abi::nvmlDevice_t gpu = nvml_->Gpu(0);
  const std::string uuid = "GPU-a4f87852-c040-2818-e88b-bf8725dc5f6c";  // the probed GPU
  char buffer[abi::kDeviceUuidBufferSize] = {};
  EXPECT_EQ(nvml_->nvmlDeviceGetUUID(gpu, buffer, static_cast<unsigned>(uuid.size())),
            abi::NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_EQ(nvml_->nvmlDeviceGetUUID(gpu, buffer, static_cast<unsigned>(uuid.size() + 1)),
            abi::NVML_SUCCESS);
  EXPECT_EQ(buffer, uuid);
  EXPECT_EQ(nvml_->nvmlDeviceGetUUID(gpu, nullptr, 96), abi::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml_->nvmlDeviceGetUUID(nullptr, buffer, 96), abi::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml_->nvmlDeviceGetName(gpu, buffer, 5), abi::NVML_ERROR_INSUFFICIENT_SIZE);
  char version[abi::kSystemDriverVersionBufferSize] = {};
  EXPECT_EQ(nvml_->nvmlSystemGetDriverVersion(version, 3), abi::NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_EQ(nvml_->nvmlSystemGetDriverVersion(version, sizeof(version)), abi::NVML_SUCCESS);
  EXPECT_STREQ(version, "580.159.04");
  ASSERT_EQ(nvml_->nvmlSystemGetNVMLVersion(version, sizeof(version)), abi::NVML_SUCCESS);
  EXPECT_STREQ(version, "13.580.159.04");
  unsigned count = 0;
  EXPECT_EQ(nvml_->nvmlDeviceGetCount_v2(nullptr), abi::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml_->nvmlDeviceGetCount_v2(&count), abi::NVML_SUCCESS);
  abi::nvmlDevice_t device = nullptr;
  EXPECT_EQ(nvml_->nvmlDeviceGetHandleByIndex_v2(count, &device),
            abi::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml_->nvmlDeviceGetHandleByUUID("GPU-nope", &device), abi::NVML_ERROR_NOT_FOUND);
  ASSERT_EQ(nvml_->nvmlDeviceGetHandleByUUID(uuid.c_str(), &device), abi::NVML_SUCCESS);
  EXPECT_EQ(device, gpu);
}

TEST_F(MockNvmlDevice, ErrorStringsAreTheRealLibrarys) {
  UseProfile("h100-sxm.json");
  // Works without init, as in NVML.
  EXPECT_STREQ(nvml_->nvmlErrorString(abi::NVML_SUCCESS), "Success");
  EXPECT_STREQ(nvml_->nvmlErrorString(abi::NVML_ERROR_INVALID_ARGUMENT), "Invalid Argument");
  EXPECT_STREQ(nvml_->nvmlErrorString(abi::NVML_ERROR_NOT_SUPPORTED), "Not Supported");
  EXPECT_STREQ(nvml_->nvmlErrorString(abi::NVML_ERROR_NOT_FOUND), "Not Found");
  EXPECT_STREQ(nvml_->nvmlErrorString(abi::NVML_ERROR_FUNCTION_NOT_FOUND), "Function Not Found");
  EXPECT_STREQ(nvml_->nvmlErrorString(abi::NVML_ERROR_IN_USE), "In use by another client");
  EXPECT_STREQ(nvml_->nvmlErrorString(abi::NVML_ERROR_INSUFFICIENT_RESOURCES),
               "Insufficient Resources");
  EXPECT_STREQ(nvml_->nvmlErrorString(abi::NVML_ERROR_UNKNOWN), "Unknown Error");
  EXPECT_STREQ(nvml_->nvmlErrorString(12345), "Unknown Error");
}

TEST_F(MockNvmlDevice, MissingFunctionsAnswerFunctionNotFound) {
  UseProfile("gb200-tray.json");
  std::string text = ReadFile(profile_);
  text.insert(text.find('{') + 1, "\"missingFunctions\": [\"nvmlDeviceGetGpuFabricInfo\"],");
  WriteFile(profile_, text);
  InitOrFail();
  abi::nvmlGpuFabricInfo_t info{};
  EXPECT_EQ(nvml_->nvmlDeviceGetGpuFabricInfo(nvml_->Gpu(0), &info),
            abi::NVML_ERROR_FUNCTION_NOT_FOUND);
  abi::nvmlGpuFabricInfoV_t info_v{};
  info_v.version = abi::nvmlGpuFabricInfo_v3;
  EXPECT_EQ(nvml_->nvmlDeviceGetGpuFabricInfoV(nvml_->Gpu(0), &info_v), abi::NVML_SUCCESS);
}

TEST_F(MockNvmlDevice, H100ProfileHasTheProbedValues) {
  UseProfile("h100-sxm.json");
  InitOrFail();
  unsigned count = 0;
  ASSERT_EQ(nvml_->nvmlDeviceGetCount_v2(&count), abi::NVML_SUCCESS);
  ASSERT_EQ(count, 8U);
  int cuda = 0;
  ASSERT_EQ(nvml_->nvmlSystemGetCudaDriverVersion_v2(&cuda), abi::NVML_SUCCESS);
  EXPECT_EQ(cuda, 13000);
  const char* bus_ids[] = {"00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0",
                           "00000000:5D:00.0", "00000000:9A:00.0", "00000000:AB:00.0",
                           "00000000:BA:00.0", "00000000:DB:00.0"};
  for (unsigned i = 0; i < count; ++i) {
    SCOPED_TRACE(i);
    abi::nvmlDevice_t gpu = nvml_->Gpu(i);
    EXPECT_EQ(nvml_->Name(gpu), "NVIDIA H100 80GB HBM3");
    unsigned value = 0;
    ASSERT_EQ(nvml_->nvmlDeviceGetIndex(gpu, &value), abi::NVML_SUCCESS);
    EXPECT_EQ(value, i);
    ASSERT_EQ(nvml_->nvmlDeviceGetMinorNumber(gpu, &value), abi::NVML_SUCCESS);
    EXPECT_EQ(value, i);
    ASSERT_EQ(nvml_->nvmlDeviceGetModuleId(gpu, &value), abi::NVML_SUCCESS);
    EXPECT_EQ(value, i + 1);
    ASSERT_EQ(nvml_->nvmlDeviceGetNumaNodeId(gpu, &value), abi::NVML_SUCCESS);
    EXPECT_EQ(value, i < 4 ? 0U : 1U);
    abi::nvmlPciInfo_t pci{};
    ASSERT_EQ(nvml_->nvmlDeviceGetPciInfo_v3(gpu, &pci), abi::NVML_SUCCESS);
    EXPECT_STREQ(pci.busId, bus_ids[i]);
    EXPECT_EQ(pci.pciDeviceId, 0x233010DEU);
    EXPECT_EQ(pci.pciSubSystemId, 0x16C110DEU);
  }
  abi::nvmlDevice_t gpu = nvml_->Gpu(0);
  EXPECT_NE(nvml_->Uuid(gpu), nvml_->Uuid(nvml_->Gpu(1)));
  abi::nvmlBrandType_t brand = 0;
  ASSERT_EQ(nvml_->nvmlDeviceGetBrand(gpu, &brand), abi::NVML_SUCCESS);
  EXPECT_EQ(brand, 14);
  abi::nvmlDeviceArchitecture_t arch = 0;
  ASSERT_EQ(nvml_->nvmlDeviceGetArchitecture(gpu, &arch), abi::NVML_SUCCESS);
  EXPECT_EQ(arch, abi::NVML_DEVICE_ARCH_HOPPER);
  int major = 0;
  int minor = 0;
  ASSERT_EQ(nvml_->nvmlDeviceGetCudaComputeCapability(gpu, &major, &minor), abi::NVML_SUCCESS);
  EXPECT_EQ(major, 9);
  EXPECT_EQ(minor, 0);
  abi::nvmlMemory_t memory{};
  ASSERT_EQ(nvml_->nvmlDeviceGetMemoryInfo(gpu, &memory), abi::NVML_SUCCESS);
  EXPECT_EQ(memory.total, 85520809984ULL);
  abi::nvmlDeviceAddressingMode_t mode{};
  EXPECT_EQ(nvml_->nvmlDeviceGetAddressingMode(gpu, &mode),
            abi::NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  mode.version = abi::nvmlDeviceAddressingMode_v1;
  ASSERT_EQ(nvml_->nvmlDeviceGetAddressingMode(gpu, &mode), abi::NVML_SUCCESS);
  EXPECT_EQ(mode.value, abi::NVML_DEVICE_ADDRESSING_MODE_NONE);
  // Fabric: the call succeeds with state NOT_SUPPORTED and a zero UUID, as probed.
  abi::nvmlGpuFabricInfo_t fabric{};
  fabric.state = 99;
  ASSERT_EQ(nvml_->nvmlDeviceGetGpuFabricInfo(gpu, &fabric), abi::NVML_SUCCESS);
  EXPECT_EQ(fabric.state, abi::NVML_GPU_FABRIC_STATE_NOT_SUPPORTED);
  for (unsigned char byte : fabric.clusterUuid) EXPECT_EQ(byte, 0);
}

TEST_F(MockNvmlDevice, L40sHasNoMigAndNoFabric) {
  UseProfile("l40s.json");
  InitOrFail();
  abi::nvmlDevice_t gpu = nvml_->Gpu(0);
  unsigned current = 0;
  unsigned pending = 0;
  EXPECT_EQ(nvml_->nvmlDeviceGetMigMode(gpu, &current, &pending), abi::NVML_ERROR_NOT_SUPPORTED);
  abi::nvmlGpuFabricInfo_t fabric{};
  EXPECT_EQ(nvml_->nvmlDeviceGetGpuFabricInfo(gpu, &fabric), abi::NVML_ERROR_NOT_SUPPORTED);
  abi::nvmlGpuFabricInfoV_t fabric_v{};
  fabric_v.version = abi::nvmlGpuFabricInfo_v3;
  EXPECT_EQ(nvml_->nvmlDeviceGetGpuFabricInfoV(gpu, &fabric_v), abi::NVML_ERROR_NOT_SUPPORTED);
  abi::nvmlGpuInstanceProfileInfo_v2_t info{};
  info.version = abi::nvmlGpuInstanceProfileInfo_v2;
  EXPECT_EQ(nvml_->nvmlDeviceGetGpuInstanceProfileInfoV(gpu, 0, &info),
            abi::NVML_ERROR_NOT_SUPPORTED);
  unsigned module = 0;
  EXPECT_EQ(nvml_->nvmlDeviceGetModuleId(gpu, &module), abi::NVML_ERROR_NOT_SUPPORTED);
  abi::nvmlDeviceArchitecture_t arch = 0;
  ASSERT_EQ(nvml_->nvmlDeviceGetArchitecture(gpu, &arch), abi::NVML_SUCCESS);
  EXPECT_EQ(arch, abi::NVML_DEVICE_ARCH_ADA);
}

}  // namespace
}  // namespace nvdra::mocknvml::testing
