// Mock NVML: MIG profiles, placement rules, GPU/compute instances, MIG device
// handles, and MIG state shared between processes.

#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "mocknvml_test_util.h"

namespace nvdra::mocknvml::testing {
namespace {

constexpr unsigned kProfile1g5gb = 19;
constexpr unsigned kProfile1g5gbMe = 20;
constexpr unsigned kProfile2g10gb = 14;
constexpr unsigned kProfile3g20gb = 9;
constexpr unsigned kProfile7g40gb = 0;

class MockNvmlMig : public MockNvmlTest {
 protected:
  // The GI id of `gi`.
  unsigned GiId(abi::nvmlGpuInstance_t gi) {
    abi::nvmlGpuInstanceInfo_t info{};
    EXPECT_EQ(nvml_->nvmlGpuInstanceGetInfo(gi, &info), abi::NVML_SUCCESS);
    return info.id;
  }
  abi::nvmlReturn_t CreateGi(abi::nvmlDevice_t gpu, unsigned profile, unsigned start,
                             unsigned size, abi::nvmlGpuInstance_t* gi) {
    const abi::nvmlGpuInstancePlacement_t placement{start, size};
    return nvml_->nvmlDeviceCreateGpuInstanceWithPlacement(gpu, profile, &placement, gi);
  }
  std::vector<abi::nvmlGpuInstance_t> ListGis(abi::nvmlDevice_t gpu, unsigned profile) {
    std::vector<abi::nvmlGpuInstance_t> gis(8);
    unsigned count = 0;
    EXPECT_EQ(nvml_->nvmlDeviceGetGpuInstances(gpu, profile, gis.data(), &count),
              abi::NVML_SUCCESS);
    gis.resize(count);
    return gis;
  }
};

TEST_F(MockNvmlMig, H100AnswersProfilesWithMigOffButCreatesNothing) {
  UseProfile("h100-sxm.json");
  InitOrFail();
  abi::nvmlDevice_t gpu = nvml_->Gpu(0);
  unsigned current = 9;
  unsigned pending = 9;
  ASSERT_EQ(nvml_->nvmlDeviceGetMigMode(gpu, &current, &pending), abi::NVML_SUCCESS);
  EXPECT_EQ(current, abi::NVML_DEVICE_MIG_DISABLE);
  EXPECT_EQ(pending, abi::NVML_DEVICE_MIG_DISABLE);
  unsigned max = 9;
  ASSERT_EQ(nvml_->nvmlDeviceGetMaxMigDeviceCount(gpu, &max), abi::NVML_SUCCESS);
  EXPECT_EQ(max, 0U);

  abi::nvmlGpuInstanceProfileInfo_v2_t info{};
  EXPECT_EQ(nvml_->nvmlDeviceGetGpuInstanceProfileInfoV(gpu, 0, &info),
            abi::NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  info.version = abi::nvmlGpuInstanceProfileInfo_v2;
  ASSERT_EQ(nvml_->nvmlDeviceGetGpuInstanceProfileInfoV(
                gpu, abi::NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, &info),
            abi::NVML_SUCCESS);
  EXPECT_EQ(info.id, 15U);
  EXPECT_STREQ(info.name, "MIG 1g.20gb");
  EXPECT_EQ(info.multiprocessorCount, 26U);
  EXPECT_EQ(info.memorySizeMB, 20096ULL);
  EXPECT_EQ(nvml_->nvmlDeviceGetGpuInstanceProfileInfoV(
                gpu, abi::NVML_GPU_INSTANCE_PROFILE_8_SLICE, &info),
            abi::NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(nvml_->nvmlDeviceGetGpuInstanceProfileInfoV(
                gpu, abi::NVML_GPU_INSTANCE_PROFILE_COUNT, &info),
            abi::NVML_ERROR_INVALID_ARGUMENT);

  abi::nvmlGpuInstancePlacement_t placements[8] = {};
  unsigned count = 1;
  EXPECT_EQ(nvml_->nvmlDeviceGetGpuInstancePossiblePlacements_v2(gpu, 9, placements, &count),
            abi::NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 2U);
  count = 8;
  ASSERT_EQ(nvml_->nvmlDeviceGetGpuInstancePossiblePlacements_v2(gpu, 9, placements, &count),
            abi::NVML_SUCCESS);
  ASSERT_EQ(count, 2U);
  EXPECT_EQ(placements[1].start, 4U);
  EXPECT_EQ(placements[1].size, 4U);

  abi::nvmlGpuInstance_t gi = nullptr;
  EXPECT_EQ(CreateGi(gpu, 9, 0, 4, &gi), abi::NVML_ERROR_NOT_SUPPORTED);
  unsigned remaining = 0;
  EXPECT_EQ(nvml_->nvmlDeviceGetGpuInstanceRemainingCapacity(gpu, 9, &remaining),
            abi::NVML_ERROR_NOT_SUPPORTED);
}

TEST_F(MockNvmlMig, A100StaticMigDevicesHaveDriverIdsAndHandles) {
  UseProfile("a100-mig.json");
  InitOrFail();
  abi::nvmlDevice_t gpu = nvml_->Gpu(0);
  unsigned max = 0;
  ASSERT_EQ(nvml_->nvmlDeviceGetMaxMigDeviceCount(gpu, &max), abi::NVML_SUCCESS);
  ASSERT_EQ(max, 7U);
  // 3g.20gb at 4:4 is GI 2, 2g.10gb at 0:2 GI 3, 1g.5gb at 2:1 and 3:1 GIs 9 and 10.
  std::vector<std::pair<unsigned, unsigned>> ids;
  std::set<std::string> uuids;
  for (unsigned i = 0; i < max; ++i) {
    abi::nvmlDevice_t mig = nullptr;
    const abi::nvmlReturn_t rc = nvml_->nvmlDeviceGetMigDeviceHandleByIndex(gpu, i, &mig);
    if (i >= 4) {
      EXPECT_EQ(rc, abi::NVML_ERROR_NOT_FOUND);
      continue;
    }
    ASSERT_EQ(rc, abi::NVML_SUCCESS);
    EXPECT_NE(mig, gpu);
    unsigned is_mig = 0;
    ASSERT_EQ(nvml_->nvmlDeviceIsMigDeviceHandle(mig, &is_mig), abi::NVML_SUCCESS);
    EXPECT_EQ(is_mig, 1U);
    abi::nvmlDevice_t parent = nullptr;
    ASSERT_EQ(nvml_->nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig, &parent),
              abi::NVML_SUCCESS);
    EXPECT_EQ(parent, gpu);
    unsigned gi_id = 0;
    unsigned ci_id = 0;
    ASSERT_EQ(nvml_->nvmlDeviceGetGpuInstanceId(mig, &gi_id), abi::NVML_SUCCESS);
    ASSERT_EQ(nvml_->nvmlDeviceGetComputeInstanceId(mig, &ci_id), abi::NVML_SUCCESS);
    ids.emplace_back(gi_id, ci_id);
    const std::string uuid = nvml_->Uuid(mig);
    EXPECT_EQ(uuid.size(), 40U) << uuid;
    EXPECT_EQ(uuid.rfind("MIG-", 0), 0U) << uuid;
    uuids.insert(uuid);
    abi::nvmlDevice_t by_uuid = nullptr;
    ASSERT_EQ(nvml_->nvmlDeviceGetHandleByUUID(uuid.c_str(), &by_uuid), abi::NVML_SUCCESS);
    EXPECT_EQ(by_uuid, mig);
  }
  const std::vector<std::pair<unsigned, unsigned>> expected = {{2, 0}, {3, 0}, {9, 0}, {10, 0}};
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(uuids.size(), 4U);
  EXPECT_EQ(nvml_->nvmlDeviceGetMigDeviceHandleByIndex(gpu, max, nullptr),
            abi::NVML_ERROR_INVALID_ARGUMENT);

  abi::nvmlDevice_t mig = nullptr;
  ASSERT_EQ(nvml_->nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0, &mig), abi::NVML_SUCCESS);
  EXPECT_EQ(nvml_->Name(mig), "NVIDIA A100-SXM4-40GB MIG 3g.20gb");
  abi::nvmlMemory_t memory{};
  ASSERT_EQ(nvml_->nvmlDeviceGetMemoryInfo(mig, &memory), abi::NVML_SUCCESS);
  EXPECT_EQ(memory.total, 19968ULL * 1024 * 1024);
  unsigned gi_id = 0;
  EXPECT_EQ(nvml_->nvmlDeviceGetGpuInstanceId(gpu, &gi_id), abi::NVML_ERROR_NOT_SUPPORTED);

  // GPU 1 is one 7g.40gb: GI 0.
  ASSERT_EQ(nvml_->nvmlDeviceGetMigDeviceHandleByIndex(nvml_->Gpu(1), 0, &mig), abi::NVML_SUCCESS);
  ASSERT_EQ(nvml_->nvmlDeviceGetGpuInstanceId(mig, &gi_id), abi::NVML_SUCCESS);
  EXPECT_EQ(gi_id, 0U);
}

TEST_F(MockNvmlMig, GpuInstancePlacementRulesAndCodes) {
  UseProfile("a100-mig.json");
  InitOrFail();
  abi::nvmlDevice_t gpu = nvml_->Gpu(2);  // MIG on, empty
  abi::nvmlGpuInstance_t upper = nullptr;
  ASSERT_EQ(CreateGi(gpu, kProfile3g20gb, 4, 4, &upper), abi::NVML_SUCCESS);
  EXPECT_EQ(GiId(upper), 2U);
  abi::nvmlGpuInstance_t gi = nullptr;
  EXPECT_EQ(CreateGi(gpu, kProfile3g20gb, 1, 4, &gi), abi::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(CreateGi(gpu, 99, 0, 4, &gi), abi::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(CreateGi(gpu, kProfile1g5gb, 5, 1, &gi), abi::NVML_ERROR_INSUFFICIENT_RESOURCES);
  EXPECT_EQ(CreateGi(gpu, kProfile7g40gb, 0, 8, &gi), abi::NVML_ERROR_INSUFFICIENT_RESOURCES);
  unsigned remaining = 0;
  ASSERT_EQ(nvml_->nvmlDeviceGetGpuInstanceRemainingCapacity(gpu, kProfile3g20gb, &remaining),
            abi::NVML_SUCCESS);
  EXPECT_EQ(remaining, 1U);
  ASSERT_EQ(nvml_->nvmlDeviceGetGpuInstanceRemainingCapacity(gpu, kProfile1g5gb, &remaining),
            abi::NVML_SUCCESS);
  EXPECT_EQ(remaining, 4U);  // slices 0-3
  ASSERT_EQ(nvml_->nvmlDeviceGetGpuInstanceRemainingCapacity(gpu, kProfile7g40gb, &remaining),
            abi::NVML_SUCCESS);
  EXPECT_EQ(remaining, 0U);

  // The +me profile allows one instance.
  abi::nvmlGpuInstance_t me = nullptr;
  ASSERT_EQ(CreateGi(gpu, kProfile1g5gbMe, 0, 1, &me), abi::NVML_SUCCESS);
  EXPECT_EQ(GiId(me), 7U);
  EXPECT_EQ(CreateGi(gpu, kProfile1g5gbMe, 1, 1, &gi), abi::NVML_ERROR_INSUFFICIENT_RESOURCES);
  ASSERT_EQ(CreateGi(gpu, kProfile2g10gb, 2, 2, &gi), abi::NVML_SUCCESS);
  EXPECT_EQ(GiId(gi), 4U);

  std::vector<abi::nvmlGpuInstance_t> listed = ListGis(gpu, kProfile3g20gb);
  ASSERT_EQ(listed.size(), 1U);
  EXPECT_EQ(listed[0], upper);
  abi::nvmlGpuInstance_t by_id = nullptr;
  ASSERT_EQ(nvml_->nvmlDeviceGetGpuInstanceById(gpu, 2, &by_id), abi::NVML_SUCCESS);
  EXPECT_EQ(by_id, upper);
  EXPECT_EQ(nvml_->nvmlDeviceGetGpuInstanceById(gpu, 1, &by_id), abi::NVML_ERROR_NOT_FOUND);

  // A compute instance keeps its GI in use.
  abi::nvmlComputeInstanceProfileInfo_v2_t ci_info{};
  ci_info.version = abi::nvmlComputeInstanceProfileInfo_v2;
  ASSERT_EQ(nvml_->nvmlGpuInstanceGetComputeInstanceProfileInfoV(
                upper, 2, abi::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_info),
            abi::NVML_SUCCESS);
  EXPECT_EQ(ci_info.sliceCount, 3U);
  EXPECT_EQ(ci_info.multiprocessorCount, 42U);
  EXPECT_STREQ(ci_info.name, "3g.20gb");
  EXPECT_EQ(nvml_->nvmlGpuInstanceGetComputeInstanceProfileInfoV(
                upper, 3, abi::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_info),
            abi::NVML_ERROR_NOT_SUPPORTED);  // 4 slices do not fit a 3g
  abi::nvmlComputeInstance_t ci = nullptr;
  ASSERT_EQ(nvml_->nvmlGpuInstanceCreateComputeInstance(upper, 0, &ci), abi::NVML_SUCCESS);
  abi::nvmlComputeInstance_t ci2 = nullptr;
  ASSERT_EQ(nvml_->nvmlGpuInstanceCreateComputeInstance(upper, 1, &ci2), abi::NVML_SUCCESS);
  abi::nvmlComputeInstanceInfo_t info{};
  ASSERT_EQ(nvml_->nvmlComputeInstanceGetInfo_v2(ci2, &info), abi::NVML_SUCCESS);
  EXPECT_EQ(info.id, 1U);
  EXPECT_EQ(info.placement.start, 1U);  // the lowest free range, after the 1c at slice 0
  EXPECT_EQ(info.device, gpu);
  EXPECT_EQ(info.gpuInstance, upper);
  EXPECT_EQ(nvml_->nvmlGpuInstanceCreateComputeInstance(upper, 2, &ci2),
            abi::NVML_ERROR_INSUFFICIENT_RESOURCES);
  EXPECT_EQ(nvml_->nvmlGpuInstanceDestroy(upper), abi::NVML_ERROR_IN_USE);
  abi::nvmlComputeInstance_t cis[8] = {};
  unsigned count = 0;
  ASSERT_EQ(nvml_->nvmlGpuInstanceGetComputeInstances(upper, 0, cis, &count), abi::NVML_SUCCESS);
  ASSERT_EQ(count, 1U);
  EXPECT_EQ(cis[0], ci);
  EXPECT_EQ(nvml_->nvmlComputeInstanceDestroy(ci), abi::NVML_SUCCESS);
  EXPECT_EQ(nvml_->nvmlComputeInstanceDestroy(ci2), abi::NVML_SUCCESS);
  EXPECT_EQ(nvml_->nvmlComputeInstanceDestroy(ci2), abi::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml_->nvmlGpuInstanceDestroy(upper), abi::NVML_SUCCESS);
  EXPECT_EQ(nvml_->nvmlGpuInstanceDestroy(upper), abi::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(ListGis(gpu, kProfile3g20gb).empty());
}

TEST_F(MockNvmlMig, StateIsSharedWithAnotherProcess) {
  UseProfile("a100-mig.json");
  InitOrFail();
  abi::nvmlDevice_t gpu = nvml_->Gpu(3);
  ASSERT_TRUE(ListGis(gpu, kProfile3g20gb).empty());
  // Another process (a fork: its own copy of the library's memory) creates a GI...
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    abi::nvmlGpuInstance_t gi = nullptr;
    const abi::nvmlGpuInstancePlacement_t placement{0, 4};
    const abi::nvmlReturn_t rc =
        nvml_->nvmlDeviceCreateGpuInstanceWithPlacement(gpu, kProfile3g20gb, &placement, &gi);
    ::_exit(rc == abi::NVML_SUCCESS ? 0 : 10 + rc);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  // ...which this process sees, and cannot place again.
  std::vector<abi::nvmlGpuInstance_t> gis = ListGis(gpu, kProfile3g20gb);
  ASSERT_EQ(gis.size(), 1U);
  EXPECT_EQ(GiId(gis[0]), 1U);
  abi::nvmlGpuInstance_t gi = nullptr;
  EXPECT_EQ(CreateGi(gpu, kProfile3g20gb, 0, 4, &gi), abi::NVML_ERROR_INSUFFICIENT_RESOURCES);
  // And the other way round: this process destroys it; a new process sees none.
  ASSERT_EQ(nvml_->nvmlGpuInstanceDestroy(gis[0]), abi::NVML_SUCCESS);
  const pid_t second = ::fork();
  ASSERT_GE(second, 0);
  if (second == 0) {
    abi::nvmlGpuInstance_t list[8] = {};
    unsigned count = 99;
    const abi::nvmlReturn_t rc =
        nvml_->nvmlDeviceGetGpuInstances(gpu, kProfile3g20gb, list, &count);
    ::_exit(rc == abi::NVML_SUCCESS && count == 0 ? 0 : 1);
  }
  ASSERT_EQ(::waitpid(second, &status, 0), second);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// The compute mode is node state in the state file's computePolicy map: NVML
// changes and reads it, and so does another writer (the simulated
// nvidia-smi -c) that replaces the file as the library does. The MIG state in
// the same file is kept.
TEST_F(MockNvmlMig, ComputeModeIsSharedNodeState) {
  UseProfile("a100-mig.json");
  InitOrFail();
  abi::nvmlDevice_t gpu = nvml_->Gpu(0);
  abi::nvmlComputeMode_t mode = -1;
  ASSERT_EQ(nvml_->nvmlDeviceGetComputeMode(gpu, &mode), abi::NVML_SUCCESS);
  EXPECT_EQ(mode, abi::NVML_COMPUTEMODE_DEFAULT);
  ASSERT_EQ(nvml_->nvmlDeviceSetComputeMode(gpu, abi::NVML_COMPUTEMODE_EXCLUSIVE_PROCESS), abi::NVML_SUCCESS);
  ASSERT_EQ(nvml_->nvmlDeviceGetComputeMode(gpu, &mode), abi::NVML_SUCCESS);
  EXPECT_EQ(mode, abi::NVML_COMPUTEMODE_EXCLUSIVE_PROCESS);
  EXPECT_EQ(nvml_->nvmlDeviceSetComputeMode(gpu, 7), abi::NVML_ERROR_INVALID_ARGUMENT);

  nlohmann::json state = nlohmann::json::parse(ReadFile(state_file()));
  char uuid[96] = {};
  ASSERT_EQ(nvml_->nvmlDeviceGetUUID(gpu, uuid, sizeof(uuid)), abi::NVML_SUCCESS);
  EXPECT_EQ(state["computePolicy"][uuid]["computeMode"], 3);
  EXPECT_FALSE(state["gpus"].empty());  // the MIG state is still there
  state["computePolicy"][uuid] = {{"computeMode", 0}, {"timeSlice", 3}};
  WriteFile(state_file(), state.dump());
  ASSERT_EQ(nvml_->nvmlDeviceGetComputeMode(gpu, &mode), abi::NVML_SUCCESS);
  EXPECT_EQ(mode, abi::NVML_COMPUTEMODE_DEFAULT);
  // The time slice a writer recorded survives the library's next write.
  ASSERT_EQ(nvml_->nvmlDeviceSetComputeMode(gpu, abi::NVML_COMPUTEMODE_PROHIBITED), abi::NVML_SUCCESS);
  state = nlohmann::json::parse(ReadFile(state_file()));
  EXPECT_EQ(state["computePolicy"][uuid]["timeSlice"], 3);
  EXPECT_EQ(state["computePolicy"][uuid]["computeMode"], 2);
}

TEST_F(MockNvmlMig, StateFileOutsideTheProfileFolder) {
  TempDir elsewhere;
  const std::string state = (elsewhere.path() / "mig.json").string();
  ScopedEnv env("MOCK_NVML_STATE", state.c_str());
  UseProfile("a100-mig.json");
  InitOrFail();
  EXPECT_TRUE(std::filesystem::exists(state));
  EXPECT_FALSE(std::filesystem::exists(state_file()));
  EXPECT_NE(ReadFile(state).find("\"gpuInstances\""), std::string::npos);
}

}  // namespace
}  // namespace nvdra::mocknvml::testing
