// Mock NVML: the functions beyond nvml_abi.h (api_compat.cc, the generated
// api_stubs.cc): the plain v1 names write no more than their old
// structures, the empty lists, and the stubs' answers (UNINITIALIZED,
// INVALID_ARGUMENT for bad handles and NULL, else NOT_SUPPORTED, nothing
// written).

#include <dlfcn.h>

#include <array>
#include <cctype>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "mocknvml_test_util.h"

namespace nvdra::mocknvml::testing {
namespace {

// dlsym on the mock the fixture loaded (RTLD_NOLOAD: the same copy).
class Symbols {
 public:
  Symbols() : handle_(::dlopen(NVDRA_MOCKNVML_PATH, RTLD_NOW | RTLD_NOLOAD)) {}
  ~Symbols() {
    if (handle_ != nullptr) ::dlclose(handle_);
  }
  Symbols(const Symbols&) = delete;
  Symbols& operator=(const Symbols&) = delete;
  template <typename Fn>
  Fn Get(const char* name) {
    void* symbol = handle_ != nullptr ? ::dlsym(handle_, name) : nullptr;
    if (symbol == nullptr) ADD_FAILURE() << "dlsym " << name;
    return reinterpret_cast<Fn>(symbol);
  }

 private:
  void* handle_;
};

using Fn1 = abi::nvmlReturn_t (*)(unsigned int*);
using DeviceBufferFn = abi::nvmlReturn_t (*)(abi::nvmlDevice_t, void*);
using DeviceStringFn = abi::nvmlReturn_t (*)(abi::nvmlDevice_t, char*, unsigned int);
using DeviceEnumUintFn = abi::nvmlReturn_t (*)(abi::nvmlDevice_t, int, unsigned int*);
using ProcessesFn = abi::nvmlReturn_t (*)(abi::nvmlDevice_t, unsigned int*, void*);

constexpr unsigned char kFill = 0xAB;

class MockNvmlCompatTest : public MockNvmlTest {};

TEST_F(MockNvmlCompatTest, StubsAnswerAsAGpuWithoutTheFeature) {
  UseProfile("h100-sxm.json");
  Symbols sym;
  auto get_serial = sym.Get<DeviceStringFn>("nvmlDeviceGetSerial");
  auto get_temperature = sym.Get<DeviceEnumUintFn>("nvmlDeviceGetTemperature");
  ASSERT_NE(get_serial, nullptr);
  ASSERT_NE(get_temperature, nullptr);
  char serial[64];
  EXPECT_EQ(get_serial(nullptr, serial, sizeof(serial)), abi::NVML_ERROR_UNINITIALIZED);
  InitOrFail();
  abi::nvmlDevice_t gpu = nvml_->Gpu(0);
  std::memset(serial, kFill, sizeof(serial));
  EXPECT_EQ(get_serial(gpu, serial, sizeof(serial)), abi::NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(static_cast<unsigned char>(serial[0]), kFill);  // nothing written
  EXPECT_EQ(get_serial(gpu, nullptr, sizeof(serial)), abi::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(get_serial(nullptr, serial, sizeof(serial)), abi::NVML_ERROR_INVALID_ARGUMENT);
  auto* bogus = reinterpret_cast<abi::nvmlDevice_t>(serial);  // not a handle the mock gave out
  EXPECT_EQ(get_serial(bogus, serial, sizeof(serial)), abi::NVML_ERROR_INVALID_ARGUMENT);
  unsigned temperature = 12345;
  EXPECT_EQ(get_temperature(gpu, 0, &temperature), abi::NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(temperature, 12345U);
  EXPECT_EQ(get_temperature(gpu, 0, nullptr), abi::NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(MockNvmlCompatTest, PlainNamesForwardToTheVersionedOnes) {
  UseProfile("h100-sxm.json");
  Symbols sym;
  auto init = sym.Get<abi::nvmlReturn_t (*)()>("nvmlInit");
  auto count_v1 = sym.Get<Fn1>("nvmlDeviceGetCount");
  auto by_index_v1 = sym.Get<abi::nvmlReturn_t (*)(unsigned, abi::nvmlDevice_t*)>(
      "nvmlDeviceGetHandleByIndex");
  auto cuda_v1 = sym.Get<abi::nvmlReturn_t (*)(int*)>("nvmlSystemGetCudaDriverVersion");
  ASSERT_NE(init, nullptr);
  unsigned count = 0;
  EXPECT_EQ(count_v1(&count), abi::NVML_ERROR_UNINITIALIZED);
  ASSERT_EQ(init(), abi::NVML_SUCCESS);
  ASSERT_EQ(count_v1(&count), abi::NVML_SUCCESS);
  EXPECT_EQ(count, 8U);
  abi::nvmlDevice_t device = nullptr;
  ASSERT_EQ(by_index_v1(3, &device), abi::NVML_SUCCESS);
  EXPECT_EQ(device, nvml_->Gpu(3));
  int v1 = 0;
  int v2 = 0;
  ASSERT_EQ(cuda_v1(&v1), abi::NVML_SUCCESS);
  ASSERT_EQ(nvml_->nvmlSystemGetCudaDriverVersion_v2(&v2), abi::NVML_SUCCESS);
  EXPECT_EQ(v1, v2);
}

// nvmlDeviceGetPciInfo and _v2 fill the old 52-byte nvmlPciInfo_t: the
// first 36 bytes as v3's, the reserved words and nothing past them touched.
TEST_F(MockNvmlCompatTest, PciInfoV1WritesOnlyTheOldStructure) {
  UseProfile("h100-sxm.json");
  InitOrFail();
  Symbols sym;
  abi::nvmlPciInfo_t v3{};
  ASSERT_EQ(nvml_->nvmlDeviceGetPciInfo_v3(nvml_->Gpu(1), &v3), abi::NVML_SUCCESS);
  for (const char* name : {"nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v2"}) {
    SCOPED_TRACE(name);
    auto fn = sym.Get<DeviceBufferFn>(name);
    ASSERT_NE(fn, nullptr);
    std::array<unsigned char, 68> buffer{};
    buffer.fill(kFill);
    ASSERT_EQ(fn(nvml_->Gpu(1), buffer.data()), abi::NVML_SUCCESS);
    EXPECT_EQ(std::memcmp(buffer.data(), &v3, 36), 0);
    for (std::size_t i = 36; i < buffer.size(); ++i) EXPECT_EQ(buffer[i], kFill) << i;
    EXPECT_EQ(fn(nvml_->Gpu(1), nullptr), abi::NVML_ERROR_INVALID_ARGUMENT);
  }
}

// The v1 MIG structures: GPU instance profile info without version and
// name (48 bytes), compute instance info without placement (24 bytes).
TEST_F(MockNvmlCompatTest, MigV1StructuresWriteOnlyTheirFields) {
  UseProfile("a100-mig.json");
  InitOrFail();
  Symbols sym;
  abi::nvmlDevice_t gpu = nvml_->Gpu(1);  // one 7g instance
  auto gi_info_v1 = sym.Get<abi::nvmlReturn_t (*)(abi::nvmlDevice_t, unsigned, void*)>(
      "nvmlDeviceGetGpuInstanceProfileInfo");
  ASSERT_NE(gi_info_v1, nullptr);
  abi::nvmlGpuInstanceProfileInfo_v2_t v2{};
  v2.version = abi::nvmlGpuInstanceProfileInfo_v2;
  ASSERT_EQ(nvml_->nvmlDeviceGetGpuInstanceProfileInfoV(
                gpu, abi::NVML_GPU_INSTANCE_PROFILE_7_SLICE, &v2),
            abi::NVML_SUCCESS);
  std::array<unsigned char, 64> buffer{};
  buffer.fill(kFill);
  ASSERT_EQ(gi_info_v1(gpu, abi::NVML_GPU_INSTANCE_PROFILE_7_SLICE, buffer.data()),
            abi::NVML_SUCCESS);
  unsigned id = 0;
  unsigned long long memory_mb = 0;
  std::memcpy(&id, buffer.data(), sizeof(id));
  std::memcpy(&memory_mb, buffer.data() + 40, sizeof(memory_mb));
  EXPECT_EQ(id, v2.id);
  EXPECT_EQ(memory_mb, v2.memorySizeMB);
  for (std::size_t i = 48; i < buffer.size(); ++i) EXPECT_EQ(buffer[i], kFill) << i;

  std::array<abi::nvmlGpuInstance_t, 8> gis{};
  unsigned gi_count = 0;
  ASSERT_EQ(nvml_->nvmlDeviceGetGpuInstances(gpu, v2.id, gis.data(), &gi_count),
            abi::NVML_SUCCESS);
  ASSERT_EQ(gi_count, 1U);
  auto ci_profile_v1 =
      sym.Get<abi::nvmlReturn_t (*)(abi::nvmlGpuInstance_t, unsigned, unsigned, void*)>(
          "nvmlGpuInstanceGetComputeInstanceProfileInfo");
  std::array<unsigned char, 48> ci_profile{};
  ci_profile.fill(kFill);
  // The 7g instance's 7-slice compute instance profile (index 4).
  ASSERT_EQ(ci_profile_v1(gis[0], 4, abi::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                          ci_profile.data()),
            abi::NVML_SUCCESS);
  for (std::size_t i = 36; i < ci_profile.size(); ++i) EXPECT_EQ(ci_profile[i], kFill) << i;
  unsigned ci_profile_id = 0;
  std::memcpy(&ci_profile_id, ci_profile.data(), sizeof(ci_profile_id));

  std::array<abi::nvmlComputeInstance_t, 8> cis{};
  unsigned ci_count = 0;
  ASSERT_EQ(nvml_->nvmlGpuInstanceGetComputeInstances(gis[0], ci_profile_id, cis.data(),
                                                      &ci_count),
            abi::NVML_SUCCESS);
  ASSERT_EQ(ci_count, 1U);
  abi::nvmlComputeInstanceInfo_t full{};
  ASSERT_EQ(nvml_->nvmlComputeInstanceGetInfo_v2(cis[0], &full), abi::NVML_SUCCESS);
  auto ci_info_v1 = sym.Get<abi::nvmlReturn_t (*)(abi::nvmlComputeInstance_t, void*)>(
      "nvmlComputeInstanceGetInfo");
  std::array<unsigned char, 40> info{};
  info.fill(kFill);
  ASSERT_EQ(ci_info_v1(cis[0], info.data()), abi::NVML_SUCCESS);
  EXPECT_EQ(std::memcmp(info.data(), &full, 24), 0);
  for (std::size_t i = 24; i < info.size(); ++i) EXPECT_EQ(info[i], kFill) << i;
}

TEST_F(MockNvmlCompatTest, EventSetWaitV1WritesNothingOnTimeout) {
  UseProfile("h100-sxm.json");
  InitOrFail();
  Symbols sym;
  auto wait_v1 = sym.Get<abi::nvmlReturn_t (*)(abi::nvmlEventSet_t, void*, unsigned)>(
      "nvmlEventSetWait");
  abi::nvmlEventSet_t set = nullptr;
  ASSERT_EQ(nvml_->nvmlEventSetCreate(&set), abi::NVML_SUCCESS);
  std::array<unsigned char, 40> data{};
  data.fill(kFill);
  EXPECT_EQ(wait_v1(set, data.data(), 0), abi::NVML_ERROR_TIMEOUT);
  for (unsigned char byte : data) EXPECT_EQ(byte, kFill);
  EXPECT_EQ(wait_v1(set, nullptr, 0), abi::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml_->nvmlEventSetFree(set), abi::NVML_SUCCESS);
}

TEST_F(MockNvmlCompatTest, ListsAreEmpty) {
  UseProfile("a100-mig.json");
  InitOrFail();
  Symbols sym;
  for (const char* name :
       {"nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "nvmlDeviceGetMPSComputeRunningProcesses_v3"}) {
    SCOPED_TRACE(name);
    auto fn = sym.Get<ProcessesFn>(name);
    ASSERT_NE(fn, nullptr);
    unsigned count = 5;
    EXPECT_EQ(fn(nvml_->Gpu(0), &count, nullptr), abi::NVML_SUCCESS);
    EXPECT_EQ(count, 0U);
    EXPECT_EQ(fn(nvml_->Gpu(0), nullptr, nullptr), abi::NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(fn(nullptr, &count, nullptr), abi::NVML_ERROR_INVALID_ARGUMENT);
  }
  for (const char* name :
       {"nvmlUnitGetCount", "nvmlGetExcludedDeviceCount", "nvmlGetBlacklistDeviceCount"}) {
    SCOPED_TRACE(name);
    unsigned count = 5;
    EXPECT_EQ(sym.Get<Fn1>(name)(&count), abi::NVML_SUCCESS);
    EXPECT_EQ(count, 0U);
  }
}

TEST_F(MockNvmlCompatTest, HandleByPciBusIdTakesNvmlsForms) {
  UseProfile("h100-sxm.json");
  Symbols sym;
  using ByBusIdFn = abi::nvmlReturn_t (*)(const char*, abi::nvmlDevice_t*);
  auto by_bus_id = sym.Get<ByBusIdFn>("nvmlDeviceGetHandleByPciBusId_v2");
  auto by_bus_id_v1 = sym.Get<ByBusIdFn>("nvmlDeviceGetHandleByPciBusId");
  ASSERT_NE(by_bus_id, nullptr);
  abi::nvmlDevice_t device = nullptr;
  EXPECT_EQ(by_bus_id("00000000:18:00.0", &device), abi::NVML_ERROR_UNINITIALIZED);
  EXPECT_EQ(by_bus_id_v1("00000000:18:00.0", &device), abi::NVML_ERROR_UNINITIALIZED);
  InitOrFail();
  abi::nvmlPciInfo_t pci{};
  ASSERT_EQ(nvml_->nvmlDeviceGetPciInfo_v3(nvml_->Gpu(2), &pci), abi::NVML_SUCCESS);
  std::string lower = pci.busIdLegacy;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string short_form = std::string(pci.busId).substr(9);  // bus:device.function
  for (const std::string& form : {std::string(pci.busId), std::string(pci.busIdLegacy), lower,
                                  short_form}) {
    SCOPED_TRACE(form);
    device = nullptr;
    EXPECT_EQ(by_bus_id(form.c_str(), &device), abi::NVML_SUCCESS);
    EXPECT_EQ(device, nvml_->Gpu(2));
    device = nullptr;
    EXPECT_EQ(by_bus_id_v1(form.c_str(), &device), abi::NVML_SUCCESS);
    EXPECT_EQ(device, nvml_->Gpu(2));
  }
  EXPECT_EQ(by_bus_id("00000000:FE:00.0", &device), abi::NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(by_bus_id("not a bus id", &device), abi::NVML_ERROR_INVALID_ARGUMENT);
  for (const char* suffix : {"x", "g", " "}) {
    EXPECT_EQ(by_bus_id((std::string(pci.busId) + suffix).c_str(), &device),
              abi::NVML_ERROR_INVALID_ARGUMENT)
        << suffix;
  }
  EXPECT_EQ(by_bus_id(nullptr, &device), abi::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(by_bus_id(pci.busId, nullptr), abi::NVML_ERROR_INVALID_ARGUMENT);
}

// nvmlDeviceCreateGpuInstance: the first free possible placement.
TEST_F(MockNvmlCompatTest, CreateGpuInstanceWithoutPlacementTakesTheFirstFree) {
  UseProfile("h100-sxm.json");
  InitOrFail();
  Symbols sym;
  using CreateFn = abi::nvmlReturn_t (*)(abi::nvmlDevice_t, unsigned, abi::nvmlGpuInstance_t*);
  auto create = sym.Get<CreateFn>("nvmlDeviceCreateGpuInstance");
  ASSERT_NE(create, nullptr);
  abi::nvmlDevice_t gpu = nvml_->Gpu(0);
  auto profile_id = [&](unsigned index) {
    abi::nvmlGpuInstanceProfileInfo_v2_t info{};
    info.version = abi::nvmlGpuInstanceProfileInfo_v2;
    EXPECT_EQ(nvml_->nvmlDeviceGetGpuInstanceProfileInfoV(gpu, index, &info), abi::NVML_SUCCESS);
    return info.id;
  };
  const unsigned one_slice = profile_id(abi::NVML_GPU_INSTANCE_PROFILE_1_SLICE);
  const unsigned seven_slice = profile_id(abi::NVML_GPU_INSTANCE_PROFILE_7_SLICE);
  abi::nvmlGpuInstance_t gi = nullptr;
  EXPECT_EQ(create(gpu, one_slice, &gi), abi::NVML_ERROR_NOT_SUPPORTED);  // MIG off
  abi::nvmlReturn_t activation = abi::NVML_SUCCESS;
  ASSERT_EQ(nvml_->nvmlDeviceSetMigMode(gpu, abi::NVML_DEVICE_MIG_ENABLE, &activation),
            abi::NVML_SUCCESS);
  EXPECT_EQ(create(gpu, 0xdead, &gi), abi::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(create(gpu, one_slice, nullptr), abi::NVML_ERROR_INVALID_ARGUMENT);
  abi::nvmlGpuInstance_t first = nullptr;
  abi::nvmlGpuInstance_t second = nullptr;
  ASSERT_EQ(create(gpu, one_slice, &first), abi::NVML_SUCCESS);
  ASSERT_EQ(create(gpu, one_slice, &second), abi::NVML_SUCCESS);
  abi::nvmlGpuInstanceInfo_t a{};
  abi::nvmlGpuInstanceInfo_t b{};
  ASSERT_EQ(nvml_->nvmlGpuInstanceGetInfo(first, &a), abi::NVML_SUCCESS);
  ASSERT_EQ(nvml_->nvmlGpuInstanceGetInfo(second, &b), abi::NVML_SUCCESS);
  EXPECT_NE(a.placement.start, b.placement.start);
  EXPECT_EQ(create(gpu, seven_slice, &gi), abi::NVML_ERROR_INSUFFICIENT_RESOURCES);
  EXPECT_EQ(nvml_->nvmlGpuInstanceDestroy(first), abi::NVML_SUCCESS);
  EXPECT_EQ(nvml_->nvmlGpuInstanceDestroy(second), abi::NVML_SUCCESS);
  ASSERT_EQ(create(gpu, seven_slice, &gi), abi::NVML_SUCCESS);
  EXPECT_EQ(nvml_->nvmlGpuInstanceDestroy(gi), abi::NVML_SUCCESS);
}

}  // namespace
}  // namespace nvdra::mocknvml::testing
