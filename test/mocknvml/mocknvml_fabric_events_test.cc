// Mock NVML: GPU fabric info and its overrides; injected events and waits.

#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "mocknvml_test_util.h"

namespace nvdra::mocknvml::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

class MockNvmlFabric : public MockNvmlTest {
 protected:
  abi::nvmlGpuFabricInfoV_t FabricV3(unsigned gpu_index) {
    abi::nvmlGpuFabricInfoV_t info{};
    info.version = abi::nvmlGpuFabricInfo_v3;
    EXPECT_EQ(nvml_->nvmlDeviceGetGpuFabricInfoV(nvml_->Gpu(gpu_index), &info),
              abi::NVML_SUCCESS);
    return info;
  }
};

TEST_F(MockNvmlFabric, Gb200TrayIsAttachedToOneClique) {
  UseProfile("gb200-tray.json");
  InitOrFail();
  unsigned count = 0;
  ASSERT_EQ(nvml_->nvmlDeviceGetCount_v2(&count), abi::NVML_SUCCESS);
  ASSERT_EQ(count, 4U);
  abi::nvmlDeviceArchitecture_t arch = 0;
  ASSERT_EQ(nvml_->nvmlDeviceGetArchitecture(nvml_->Gpu(0), &arch), abi::NVML_SUCCESS);
  EXPECT_EQ(arch, abi::NVML_DEVICE_ARCH_BLACKWELL);
  EXPECT_EQ(nvml_->Name(nvml_->Gpu(0)), "NVIDIA GB200");
  for (unsigned i = 0; i < count; ++i) {
    abi::nvmlGpuFabricInfo_t v1{};
    ASSERT_EQ(nvml_->nvmlDeviceGetGpuFabricInfo(nvml_->Gpu(i), &v1), abi::NVML_SUCCESS);
    EXPECT_EQ(v1.state, abi::NVML_GPU_FABRIC_STATE_COMPLETED);
    EXPECT_EQ(v1.status, abi::NVML_SUCCESS);
    EXPECT_EQ(v1.cliqueId, 32766U);
    EXPECT_EQ(v1.clusterUuid[0], 0x9f);
    EXPECT_EQ(v1.clusterUuid[15], 0x94);
    const abi::nvmlGpuFabricInfoV_t v3 = FabricV3(i);
    EXPECT_EQ(v3.cliqueId, 32766U);
    EXPECT_EQ(v3.healthSummary, 1);
  }
  // v2 leaves healthSummary (beyond its size) alone; unknown versions are refused.
  abi::nvmlGpuFabricInfoV_t v2{};
  v2.version = abi::nvmlGpuFabricInfo_v2;
  v2.healthSummary = 0xEE;
  ASSERT_EQ(nvml_->nvmlDeviceGetGpuFabricInfoV(nvml_->Gpu(0), &v2), abi::NVML_SUCCESS);
  EXPECT_EQ(v2.state, abi::NVML_GPU_FABRIC_STATE_COMPLETED);
  EXPECT_EQ(v2.healthSummary, 0xEE);
  v2.version = abi::StructVersion(40, 1);
  EXPECT_EQ(nvml_->nvmlDeviceGetGpuFabricInfoV(nvml_->Gpu(0), &v2),
            abi::NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
}

TEST_F(MockNvmlFabric, EnvironmentSelectsStateAndStatusForAllGpus) {
  ScopedEnv state("MOCK_NVML_FABRIC_STATE", "in_progress");
  ScopedEnv status("MOCK_NVML_FABRIC_STATUS", "999");
  UseProfile("gb200-tray.json");
  InitOrFail();
  for (unsigned i = 0; i < 4; ++i) {
    const abi::nvmlGpuFabricInfoV_t info = FabricV3(i);
    EXPECT_EQ(info.state, abi::NVML_GPU_FABRIC_STATE_IN_PROGRESS);
    EXPECT_EQ(info.status, abi::NVML_ERROR_UNKNOWN);
  }
}

TEST_F(MockNvmlFabric, BadEnvironmentValueFailsInit) {
  ScopedEnv state("MOCK_NVML_FABRIC_STATE", "done");
  UseProfile("gb200-tray.json");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(nvml_->nvmlInit_v2(), abi::NVML_ERROR_UNKNOWN);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("MOCK_NVML_FABRIC_STATE"),
            std::string::npos);
}

TEST_F(MockNvmlFabric, MixedCliquesProfileSplitsTheTray) {
  UseProfile("gb200-tray-mixed-cliques.json");
  InitOrFail();
  EXPECT_EQ(FabricV3(0).cliqueId, 32766U);
  EXPECT_EQ(FabricV3(1).cliqueId, 32766U);
  EXPECT_EQ(FabricV3(2).cliqueId, 32767U);
  EXPECT_EQ(FabricV3(3).cliqueId, 32767U);
  EXPECT_EQ(FabricV3(3).state, abi::NVML_GPU_FABRIC_STATE_COMPLETED);
}

TEST_F(MockNvmlFabric, StateFileChangesARunningProcess) {
  UseProfile("gb200-tray.json");
  InitOrFail();
  const std::string uuid = nvml_->Uuid(nvml_->Gpu(1));
  nlohmann::json state = nlohmann::json::parse(ReadFile(state_file()));
  state["fabric"][uuid] = {{"state", "not_started"}, {"status", 3}};
  WriteFile(state_file(), state.dump());
  EXPECT_EQ(FabricV3(0).state, abi::NVML_GPU_FABRIC_STATE_COMPLETED);
  const abi::nvmlGpuFabricInfoV_t changed = FabricV3(1);
  EXPECT_EQ(changed.state, abi::NVML_GPU_FABRIC_STATE_NOT_STARTED);
  EXPECT_EQ(changed.status, abi::NVML_ERROR_NOT_SUPPORTED);
}

// The state file's fabric map also carries health (nvmlGpuFabricInfo_v3):
// a test makes one GPU's fabric unhealthy and healthy again; the override
// survives the mock's own rewrites of the file.
TEST_F(MockNvmlFabric, StateFileSetsFabricHealth) {
  UseProfile("gb200-tray.json");
  InitOrFail();
  const std::string uuid = nvml_->Uuid(nvml_->Gpu(2));
  nlohmann::json state = nlohmann::json::parse(ReadFile(state_file()));
  state["fabric"][uuid] = {{"healthSummary", "unhealthy"}, {"healthMask", 0x10}};
  WriteFile(state_file(), state.dump());
  abi::nvmlGpuFabricInfoV_t info = FabricV3(2);
  EXPECT_EQ(info.healthSummary, 2);  // NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY
  EXPECT_EQ(info.healthMask, 0x10U);
  EXPECT_EQ(info.state, abi::NVML_GPU_FABRIC_STATE_COMPLETED);  // the profile's
  EXPECT_EQ(FabricV3(1).healthSummary, 1);

  // A mutation (compute mode) rewrites the state file: the health stays.
  ASSERT_EQ(nvml_->nvmlDeviceSetComputeMode(nvml_->Gpu(0), abi::NVML_COMPUTEMODE_PROHIBITED),
            abi::NVML_SUCCESS);
  const nlohmann::json rewritten = nlohmann::json::parse(ReadFile(state_file()));
  EXPECT_EQ(rewritten["fabric"][uuid]["healthSummary"], 2);
  EXPECT_EQ(FabricV3(2).healthSummary, 2);

  // Healthy again, given as a number.
  state = rewritten;
  state["fabric"][uuid] = {{"healthSummary", 1}, {"healthMask", 0}};
  WriteFile(state_file(), state.dump());
  info = FabricV3(2);
  EXPECT_EQ(info.healthSummary, 1);
  EXPECT_EQ(info.healthMask, 0U);

  // An unknown summary makes the state file malformed.
  state["fabric"][uuid] = {{"healthSummary", "sick"}};
  WriteFile(state_file(), state.dump());
  ::testing::internal::CaptureStderr();
  abi::nvmlGpuFabricInfoV_t bad{};
  bad.version = abi::nvmlGpuFabricInfo_v3;
  EXPECT_EQ(nvml_->nvmlDeviceGetGpuFabricInfoV(nvml_->Gpu(2), &bad), abi::NVML_ERROR_UNKNOWN);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("healthSummary"), std::string::npos);
}

class MockNvmlEvents : public MockNvmlTest {
 protected:
  void SetUp() override {
    UseProfile("h100-sxm.json");
    InitOrFail();
    ASSERT_EQ(nvml_->nvmlEventSetCreate(&set_), abi::NVML_SUCCESS);
  }
  void TearDown() override {
    if (set_ != nullptr) {
      EXPECT_EQ(nvml_->nvmlEventSetFree(set_), abi::NVML_SUCCESS);
    }
  }
  std::string Line(unsigned gpu, const std::string& type, unsigned data) {
    return nlohmann::json{{"uuid", nvml_->Uuid(nvml_->Gpu(gpu))}, {"type", type}, {"data", data}}
        .dump();
  }
  abi::nvmlEventSet_t set_ = nullptr;
};

TEST_F(MockNvmlEvents, DeliversRegisteredEventsInOrder) {
  unsigned long long supported = 0;
  ASSERT_EQ(nvml_->nvmlDeviceGetSupportedEventTypes(nvml_->Gpu(0), &supported),
            abi::NVML_SUCCESS);
  EXPECT_EQ(supported & abi::nvmlEventTypeXidCriticalError, abi::nvmlEventTypeXidCriticalError);
  EXPECT_EQ(nvml_->nvmlDeviceRegisterEvents(nvml_->Gpu(0), 1ULL << 40, set_),
            abi::NVML_ERROR_NOT_SUPPORTED);
  ASSERT_EQ(nvml_->nvmlDeviceRegisterEvents(nvml_->Gpu(0), abi::nvmlEventTypeXidCriticalError,
                                            set_),
            abi::NVML_SUCCESS);
  // Written before anyone waits: still delivered. GPU 1 and the ECC event are
  // not registered and are skipped.
  AppendLine(events_file(), Line(1, "xid", 13));
  AppendLine(events_file(), Line(0, "double_bit_ecc", 0));
  AppendLine(events_file(), Line(0, "xid", 79));
  AppendLine(events_file(), "not json");
  AppendLine(events_file(), Line(0, "xid", 48));
  abi::nvmlEventData_t data{};
  ASSERT_EQ(nvml_->nvmlEventSetWait_v2(set_, &data, 1000), abi::NVML_SUCCESS);
  EXPECT_EQ(data.device, nvml_->Gpu(0));
  EXPECT_EQ(data.eventType, abi::nvmlEventTypeXidCriticalError);
  EXPECT_EQ(data.eventData, 79ULL);
  EXPECT_EQ(data.gpuInstanceId, 0xFFFFFFFFU);
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(nvml_->nvmlEventSetWait_v2(set_, &data, 1000), abi::NVML_SUCCESS);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("malformed"), std::string::npos);
  EXPECT_EQ(data.eventData, 48ULL);
}

TEST_F(MockNvmlEvents, WaitTimesOutWithinItsTimeout) {
  ASSERT_EQ(nvml_->nvmlDeviceRegisterEvents(nvml_->Gpu(0), abi::nvmlEventTypeXidCriticalError,
                                            set_),
            abi::NVML_SUCCESS);
  abi::nvmlEventData_t data{};
  EXPECT_EQ(nvml_->nvmlEventSetWait_v2(set_, &data, 0), abi::NVML_ERROR_TIMEOUT);
  const auto start = steady_clock::now();
  EXPECT_EQ(nvml_->nvmlEventSetWait_v2(set_, &data, 100), abi::NVML_ERROR_TIMEOUT);
  const auto waited = steady_clock::now() - start;
  EXPECT_GE(waited, milliseconds(100));
  EXPECT_LT(waited, milliseconds(2000));
}

TEST_F(MockNvmlEvents, WaitWakesWhenALineArrives) {
  ASSERT_EQ(nvml_->nvmlDeviceRegisterEvents(nvml_->Gpu(2), abi::nvmlEventTypeXidCriticalError,
                                            set_),
            abi::NVML_SUCCESS);
  abi::nvmlEventData_t data{};
  abi::nvmlReturn_t rc = abi::NVML_ERROR_UNKNOWN;
  // The waiter may start before or after the write; either way it must return
  // the event, long before its 10 s timeout.
  const auto start = steady_clock::now();
  std::thread waiter([&] { rc = nvml_->nvmlEventSetWait_v2(set_, &data, 10000); });
  // Other calls go on while a wait sleeps.
  unsigned count = 0;
  EXPECT_EQ(nvml_->nvmlDeviceGetCount_v2(&count), abi::NVML_SUCCESS);
  AppendLine(events_file(), Line(2, "xid", 94));
  waiter.join();
  EXPECT_LT(steady_clock::now() - start, milliseconds(5000));
  ASSERT_EQ(rc, abi::NVML_SUCCESS);
  EXPECT_EQ(data.device, nvml_->Gpu(2));
  EXPECT_EQ(data.eventData, 94ULL);
}

TEST_F(MockNvmlEvents, BadArgumentsAreRefused) {
  abi::nvmlEventData_t data{};
  EXPECT_EQ(nvml_->nvmlEventSetWait_v2(set_, nullptr, 0), abi::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml_->nvmlEventSetWait_v2(nullptr, &data, 0), abi::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml_->nvmlDeviceRegisterEvents(nvml_->Gpu(0), abi::nvmlEventTypeXidCriticalError,
                                            nullptr),
            abi::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml_->nvmlEventSetCreate(nullptr), abi::NVML_ERROR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace nvdra::mocknvml::testing
