// Mock NVML: GPU fabric info and its overrides; injected events and waits.

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

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
    return Line(nvml_->Uuid(nvml_->Gpu(gpu)), type, data);
  }
  static std::string Line(const std::string& uuid, const std::string& type, unsigned data) {
    return nlohmann::json{{"uuid", uuid}, {"type", type}, {"data", data}}.dump();
  }
  static std::string Lost(const std::string& uuid, const std::string& type = "gpu_lost") {
    return nlohmann::json{{"uuid", uuid}, {"type", type}}.dump();
  }
  void RegisterXid(abi::nvmlEventSet_t set, unsigned gpu) {
    ASSERT_EQ(nvml_->nvmlDeviceRegisterEvents(nvml_->Gpu(gpu),
                                              abi::nvmlEventTypeXidCriticalError, set),
              abi::NVML_SUCCESS);
  }
  // The XID of the next event, or ~0 with the failure's code in `rc`.
  unsigned long long NextXid(abi::nvmlEventSet_t set, unsigned timeout_ms = 1000,
                             abi::nvmlReturn_t* rc = nullptr) {
    abi::nvmlEventData_t data{};
    const abi::nvmlReturn_t got = nvml_->nvmlEventSetWait_v2(set, &data, timeout_ms);
    if (rc != nullptr) *rc = got;
    return got == abi::NVML_SUCCESS ? data.eventData : ~0ULL;
  }
  std::filesystem::path registrations_file() const {
    return dir_.path() / "event-registrations.jsonl";
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
  // Written after the set was made, before anyone waits: delivered. GPU 1 and
  // the ECC event are not registered and are skipped.
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

// Read syscalls of the calling thread so far (/proc/thread-self/io syscr,
// which counts read and pread); nullopt without I/O accounting.
std::optional<unsigned long long> ThreadReadSyscalls() {
  std::ifstream io("/proc/thread-self/io");
  std::string key;
  unsigned long long value = 0;
  while (io >> key >> value) {
    if (key == "syscr:") return value;
  }
  return std::nullopt;
}

// Real NVML delivers only what happens after the set exists: a restarted
// monitor must not see the events of its previous life again.
TEST_F(MockNvmlEvents, NewSetDoesNotReplayOldEvents) {
  RegisterXid(set_, 0);
  AppendLine(events_file(), Line(0, "xid", 13));
  EXPECT_EQ(NextXid(set_), 13ULL);
  // A second set, as a restarted process makes: the line above is history.
  // An unfinished line at its creation is delivered once complete.
  {
    std::ofstream out(events_file(), std::ios::app);
    out << Line(0, "xid", 31).substr(0, 10);
  }
  abi::nvmlEventSet_t later = nullptr;
  ASSERT_EQ(nvml_->nvmlEventSetCreate(&later), abi::NVML_SUCCESS);
  RegisterXid(later, 0);
  abi::nvmlReturn_t rc = abi::NVML_SUCCESS;
  EXPECT_EQ(NextXid(later, 0, &rc), ~0ULL);
  EXPECT_EQ(rc, abi::NVML_ERROR_TIMEOUT);
  AppendLine(events_file(), Line(0, "xid", 31).substr(10));
  AppendLine(events_file(), Line(0, "xid", 43));
  EXPECT_EQ(NextXid(later), 31ULL);
  EXPECT_EQ(NextXid(later), 43ULL);
  // The first set sees them too.
  EXPECT_EQ(NextXid(set_), 31ULL);
  EXPECT_EQ(NextXid(set_), 43ULL);
  EXPECT_EQ(nvml_->nvmlEventSetFree(later), abi::NVML_SUCCESS);
}

// A set made before the file exists sees all of it; a replaced file is new
// from its first line, a truncated one too.
TEST_F(MockNvmlEvents, ReplacedOrTruncatedFileIsReadFromItsStart) {
  RegisterXid(set_, 0);
  AppendLine(events_file(), Line(0, "xid", 1));
  EXPECT_EQ(NextXid(set_), 1ULL);
  WriteFile(events_file(), Line(0, "xid", 2) + "\n" + Line(0, "xid", 3) + "\n");
  EXPECT_EQ(NextXid(set_), 2ULL);
  EXPECT_EQ(NextXid(set_), 3ULL);
  std::filesystem::resize_file(events_file(), 0);
  AppendLine(events_file(), Line(0, "xid", 4));
  EXPECT_EQ(NextXid(set_), 4ULL);
}

// Each successful registration is a line a test can wait for before it
// injects; a refused one is not.
TEST_F(MockNvmlEvents, RegistrationsAreRecordedInTheStateFolder) {
  EXPECT_FALSE(std::filesystem::exists(registrations_file()));
  EXPECT_EQ(nvml_->nvmlDeviceRegisterEvents(nvml_->Gpu(0), 1ULL << 40, set_),
            abi::NVML_ERROR_NOT_SUPPORTED);
  EXPECT_FALSE(std::filesystem::exists(registrations_file()));
  RegisterXid(set_, 3);
  ASSERT_EQ(nvml_->nvmlDeviceRegisterEvents(
                nvml_->Gpu(5),
                abi::nvmlEventTypeXidCriticalError | abi::nvmlEventTypeDoubleBitEccError, set_),
            abi::NVML_SUCCESS);
  std::istringstream lines(ReadFile(registrations_file()));
  std::string line;
  std::vector<nlohmann::json> records;
  while (std::getline(lines, line)) records.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(records.size(), 2U);
  EXPECT_EQ(records[0], (nlohmann::json{{"pid", ::getpid()},
                                        {"uuid", nvml_->Uuid(nvml_->Gpu(3))},
                                        {"types", abi::nvmlEventTypeXidCriticalError}}));
  EXPECT_EQ(records[1]["uuid"], nvml_->Uuid(nvml_->Gpu(5)));
  EXPECT_EQ(records[1]["types"], 0xAULL);
}

// gpu_lost: the waiting set hears of it once, and every query on the GPU
// answers GPU_IS_LOST until gpu_recovered, in every process of the node (a
// second copy of the library stands for another process).
TEST_F(MockNvmlEvents, LostGpuAnswersGpuIsLostUntilRecovered) {
  RegisterXid(set_, 0);
  RegisterXid(set_, 1);
  const std::string lost = nvml_->Uuid(nvml_->Gpu(1));
  const std::string other = nvml_->Uuid(nvml_->Gpu(0));
  abi::nvmlDevice_t handle = nvml_->Gpu(1);

  abi::nvmlReturn_t rc = abi::NVML_SUCCESS;
  std::thread waiter([&] { NextXid(set_, 10000, &rc); });
  AppendLine(events_file(), Lost(lost));
  waiter.join();
  EXPECT_EQ(rc, abi::NVML_ERROR_GPU_IS_LOST);
  EXPECT_EQ(NextXid(set_, 0, &rc), ~0ULL);  // once per line
  EXPECT_EQ(rc, abi::NVML_ERROR_TIMEOUT);

  abi::nvmlDevice_t device = nullptr;
  EXPECT_EQ(nvml_->nvmlDeviceGetHandleByUUID(lost.c_str(), &device),
            abi::NVML_ERROR_GPU_IS_LOST);
  EXPECT_EQ(nvml_->nvmlDeviceGetHandleByIndex_v2(1, &device), abi::NVML_ERROR_GPU_IS_LOST);
  char text[abi::kDeviceUuidBufferSize] = {};
  EXPECT_EQ(nvml_->nvmlDeviceGetUUID(handle, text, sizeof(text)), abi::NVML_ERROR_GPU_IS_LOST);
  EXPECT_EQ(nvml_->nvmlDeviceGetName(handle, text, sizeof(text)), abi::NVML_ERROR_GPU_IS_LOST);
  abi::nvmlMemory_t memory{};
  EXPECT_EQ(nvml_->nvmlDeviceGetMemoryInfo(handle, &memory), abi::NVML_ERROR_GPU_IS_LOST);
  abi::nvmlPciInfo_t pci{};
  EXPECT_EQ(nvml_->nvmlDeviceGetPciInfo_v3(handle, &pci), abi::NVML_ERROR_GPU_IS_LOST);
  abi::nvmlGpuFabricInfo_t fabric{};
  EXPECT_EQ(nvml_->nvmlDeviceGetGpuFabricInfo(handle, &fabric), abi::NVML_ERROR_GPU_IS_LOST);
  EXPECT_EQ(nvml_->nvmlDeviceRegisterEvents(handle, abi::nvmlEventTypeXidCriticalError, set_),
            abi::NVML_ERROR_GPU_IS_LOST);
  unsigned count = 0;
  EXPECT_EQ(nvml_->nvmlDeviceGetCount_v2(&count), abi::NVML_SUCCESS);
  EXPECT_EQ(count, 8U);
  EXPECT_EQ(nvml_->nvmlDeviceGetHandleByUUID(other.c_str(), &device), abi::NVML_SUCCESS);
  // Events of the other GPU still flow.
  AppendLine(events_file(), Line(0, "xid", 48));
  EXPECT_EQ(NextXid(set_), 48ULL);

  // Another process, started now, sees the GPU lost too.
  const std::filesystem::path copy = dir_.path() / "copy" / "libnvidia-ml.so.1";
  std::filesystem::create_directories(copy.parent_path());
  std::filesystem::copy_file(NVDRA_MOCKNVML_PATH, copy);
  NvmlLibrary second(copy.string());
  ASSERT_TRUE(second.loaded());
  ASSERT_EQ(second.nvmlInit_v2(), abi::NVML_SUCCESS);
  EXPECT_EQ(second.nvmlDeviceGetHandleByUUID(lost.c_str(), &device),
            abi::NVML_ERROR_GPU_IS_LOST);

  // Recovered: no event, and both processes see the GPU again.
  AppendLine(events_file(), Lost(lost, "gpu_recovered"));
  EXPECT_EQ(NextXid(set_, 0, &rc), ~0ULL);
  EXPECT_EQ(rc, abi::NVML_ERROR_TIMEOUT);
  EXPECT_EQ(second.nvmlDeviceGetHandleByUUID(lost.c_str(), &device), abi::NVML_SUCCESS);
  EXPECT_EQ(nvml_->nvmlDeviceGetUUID(handle, text, sizeof(text)), abi::NVML_SUCCESS);
  EXPECT_EQ(text, lost);
  // A line per loss: lost again, heard again.
  AppendLine(events_file(), Lost(lost));
  EXPECT_EQ(NextXid(set_, 1000, &rc), ~0ULL);
  EXPECT_EQ(rc, abi::NVML_ERROR_GPU_IS_LOST);
}

// A GPU that is lost stays so across nvmlShutdown/nvmlInit: the state is the
// events file's, not the process's memory.
TEST_F(MockNvmlEvents, LostGpuStaysLostAfterReinit) {
  const std::string lost = nvml_->Uuid(nvml_->Gpu(4));
  AppendLine(events_file(), Lost(lost));
  ASSERT_EQ(nvml_->nvmlEventSetFree(set_), abi::NVML_SUCCESS);
  set_ = nullptr;
  ASSERT_EQ(nvml_->nvmlShutdown(), abi::NVML_SUCCESS);
  ASSERT_EQ(nvml_->nvmlInit_v2(), abi::NVML_SUCCESS);
  abi::nvmlDevice_t device = nullptr;
  EXPECT_EQ(nvml_->nvmlDeviceGetHandleByIndex_v2(4, &device), abi::NVML_ERROR_GPU_IS_LOST);
  EXPECT_EQ(nvml_->nvmlDeviceGetHandleByIndex_v2(3, &device), abi::NVML_SUCCESS);
}

// A MIG device of a lost GPU is lost too.
using MockNvmlLostMig = MockNvmlTest;
TEST_F(MockNvmlLostMig, MigDevicesOfALostGpuAreLost) {
  UseProfile("a100-mig.json");
  InitOrFail();
  abi::nvmlDevice_t mig = nullptr;
  ASSERT_EQ(nvml_->nvmlDeviceGetMigDeviceHandleByIndex(nvml_->Gpu(1), 0, &mig),
            abi::NVML_SUCCESS);
  const std::string mig_uuid = nvml_->Uuid(mig);
  AppendLine(events_file(),
             nlohmann::json{{"uuid", nvml_->Uuid(nvml_->Gpu(1))}, {"type", "gpu_lost"}}.dump());
  char text[abi::kDeviceUuidBufferSize] = {};
  EXPECT_EQ(nvml_->nvmlDeviceGetUUID(mig, text, sizeof(text)), abi::NVML_ERROR_GPU_IS_LOST);
  abi::nvmlDevice_t found = nullptr;
  EXPECT_EQ(nvml_->nvmlDeviceGetHandleByUUID(mig_uuid.c_str(), &found),
            abi::NVML_ERROR_GPU_IS_LOST);
  // GPU 0's MIG devices are not.
  ASSERT_EQ(nvml_->nvmlDeviceGetMigDeviceHandleByIndex(nvml_->Gpu(0), 0, &mig),
            abi::NVML_SUCCESS);
  EXPECT_EQ(nvml_->nvmlDeviceGetUUID(mig, text, sizeof(text)), abi::NVML_SUCCESS);
}

// 1,000 lines appended within a second, while the set waits: every one
// arrives, in order, and fast (the file is read in chunks).
TEST_F(MockNvmlEvents, AThousandEventsArriveInOrder) {
  constexpr unsigned kEvents = 1000;
  RegisterXid(set_, 6);
  const std::string uuid = nvml_->Uuid(nvml_->Gpu(6));
  const auto start = steady_clock::now();
  std::thread writer([&] {
    for (unsigned i = 0; i < kEvents; ++i) AppendLine(events_file(), Line(uuid, "xid", i));
  });
  std::vector<unsigned long long> got;
  for (unsigned i = 0; i < kEvents; ++i) {
    const unsigned long long xid = NextXid(set_, 5000);
    if (xid == ~0ULL) break;
    got.push_back(xid);
  }
  writer.join();
  const auto took = steady_clock::now() - start;
  ASSERT_EQ(got.size(), kEvents);
  for (unsigned i = 0; i < kEvents; ++i) ASSERT_EQ(got[i], i) << "event " << i;
  EXPECT_LT(took, milliseconds(5000));
  abi::nvmlReturn_t rc = abi::NVML_SUCCESS;
  EXPECT_EQ(NextXid(set_, 0, &rc), ~0ULL);
  EXPECT_EQ(rc, abi::NVML_ERROR_TIMEOUT);

  // A burst already written when the waits come: read in chunks, so the
  // thousand waits take a few read syscalls (this thread's count), not one
  // per event or byte.
  std::string burst;
  for (unsigned i = 0; i < kEvents; ++i) burst += Line(uuid, "xid", kEvents + i) + "\n";
  {
    std::ofstream out(events_file(), std::ios::app);
    out << burst;
  }
  const std::optional<unsigned long long> reads_before = ThreadReadSyscalls();
  for (unsigned i = 0; i < kEvents; ++i) ASSERT_EQ(NextXid(set_, 1000), kEvents + i);
  const std::optional<unsigned long long> reads_after = ThreadReadSyscalls();
  if (reads_before && reads_after) {
    EXPECT_LT(*reads_after - *reads_before, 50U);
  }
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
