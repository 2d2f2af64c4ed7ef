// The hgx-h100 profile through the mock NVML.

#include <set>

#include "mocknvml_test_util.h"

namespace nvdra::mocknvml::testing {
namespace {

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

}  // namespace
}  // namespace nvdra::mocknvml::testing
