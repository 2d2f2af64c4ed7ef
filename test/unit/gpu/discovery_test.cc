// Discovery and published devices against the mock NVML's profiles: the names,
// attribute types and values, capacities and counters upstream publishes
// (../shared/reference/upstream-inventory.md section 3.1), and the clique id
// rules of dra-wire-facts.md section 7.5.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpu/discovery.h"
#include "mock_node.h"
#include "gpu/inspect.h"
#include "gpu/published_devices.h"
#include "nvml/fabric.h"
#include "nvml/library.h"

namespace nvdra::gpu {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;


json DeviceNamed(const json& report, const std::string& name) {
  for (const json& device : report["resourceSlice"]["devices"]) {
    if (device["name"] == name) return device;
  }
  ADD_FAILURE() << "no published device " << name;
  return json::object();
}

std::vector<std::string> DeviceNames(const json& report) {
  std::vector<std::string> names;
  for (const json& device : report["resourceSlice"]["devices"]) names.push_back(device["name"]);
  return names;
}

TEST(DiscoveryH100, PublishesEveryGpuWithUpstreamAttributes) {
  MockNode node("h100-sxm.json");
  json report = node.Inspect();
  EXPECT_EQ(DeviceNames(report), (std::vector<std::string>{"gpu-0", "gpu-1", "gpu-2", "gpu-3",
                                                           "gpu-4", "gpu-5", "gpu-6", "gpu-7"}));
  json gpu0 = DeviceNamed(report, "gpu-0");
  // Attribute types matter: CEL compares versions as semver, not strings.
  EXPECT_EQ(gpu0["attributes"], json::parse(R"({
    "type": {"string": "gpu"},
    "uuid": {"string": "GPU-a4f87852-c040-2818-e88b-bf8725dc5f6c"},
    "productName": {"string": "NVIDIA H100 80GB HBM3"},
    "brand": {"string": "Nvidia"},
    "architecture": {"string": "Hopper"},
    "cudaComputeCapability": {"version": "9.0.0"},
    "driverVersion": {"version": "580.159.4"},
    "cudaDriverVersion": {"version": "13.0.0"},
    "addressingMode": {"string": "None"},
    "resource.kubernetes.io/pciBusID": {"string": "0000:18:00.0"},
    "resource.kubernetes.io/pcieRoot": {"string": "pci0000:18"},
    "resource.kubernetes.io/numaNode": {"int": 0}
  })"));
  EXPECT_EQ(gpu0["capacity"], json::parse(R"({"memory": {"value": "81559Mi"}})"));
  EXPECT_FALSE(gpu0.contains("consumesCounters"));
  EXPECT_EQ(DeviceNamed(report, "gpu-5")["attributes"]["resource.kubernetes.io/numaNode"]["int"], 1);
  EXPECT_EQ(report["cliqueId"], "");  // H100 SXM: NVLink, but no multi-node fabric
}

TEST(DiscoveryH100, InventoryHasTheRealMigProfilesAndPlacements) {
  MockNode node("h100-sxm.json");
  NodeInventory inventory = node.Discover();
  ASSERT_EQ(inventory.gpus.size(), 8U);
  const GpuInfo& gpu = inventory.gpus[0];
  EXPECT_TRUE(gpu.mig_capable);
  EXPECT_FALSE(gpu.mig_enabled);
  EXPECT_EQ(gpu.MemorySliceCount(), 8U);
  std::map<std::string, std::vector<std::pair<unsigned, unsigned>>> by_name;
  for (const auto& profile : gpu.mig_profiles) {
    auto& placements = by_name[profile.name.ToString() + "/" + std::to_string(profile.gi.id)];
    placements.clear();
    for (const auto& p : profile.placements) placements.emplace_back(p.start, p.size);
  }
  // As `nvidia-smi mig -lgipp` printed them on a real H100 (test/data/h100/).
  using P = std::vector<std::pair<unsigned, unsigned>>;
  EXPECT_EQ(by_name["1g.10gb/19"], (P{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}));
  EXPECT_EQ(by_name["1g.10gb+me/20"], (P{{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}}));
  EXPECT_EQ(by_name["1g.20gb/15"], (P{{0, 2}, {2, 2}, {4, 2}, {6, 2}}));
  EXPECT_EQ(by_name["2g.20gb/14"], (P{{0, 2}, {2, 2}, {4, 2}}));
  EXPECT_EQ(by_name["3g.40gb/9"], (P{{0, 4}, {4, 4}}));
  EXPECT_EQ(by_name["4g.40gb/5"], (P{{0, 4}}));
  EXPECT_EQ(by_name["7g.80gb/0"], (P{{0, 8}}));
  EXPECT_EQ(by_name.size(), 7U);
}

TEST(DiscoveryH100, DynamicMigPublishesEveryPlacementWithCounters) {
  MockNode node("h100-sxm.json");
  json report = node.Inspect({.dynamic_mig = true});
  std::vector<std::string> names = DeviceNames(report);
  // Per GPU: the full GPU plus 7+7+4+3+2+1+1 placements.
  EXPECT_EQ(names.size(), 8U * 26U);
  std::set<std::string> gpu0;
  for (const auto& name : names) {
    if (name == "gpu-0" || name.rfind("gpu-0-mig-", 0) == 0) gpu0.insert(name);
  }
  EXPECT_EQ(gpu0.size(), 26U);
  for (const char* name : {"gpu-0-mig-1g10gb-19-6", "gpu-0-mig-1g10gb-me-20-0", "gpu-0-mig-1g20gb-15-6",
                           "gpu-0-mig-2g20gb-14-4", "gpu-0-mig-3g40gb-9-4", "gpu-0-mig-4g40gb-5-0",
                           "gpu-0-mig-7g80gb-0-0"}) {
    EXPECT_TRUE(gpu0.count(name)) << name;
  }
  json mig = DeviceNamed(report, "gpu-0-mig-3g40gb-9-4");
  EXPECT_FALSE(mig["attributes"].contains("uuid"));  // dynamic MIG devices do not exist yet
  EXPECT_EQ(mig["attributes"]["type"]["string"], "mig");
  EXPECT_EQ(mig["attributes"]["profile"]["string"], "3g.40gb");
  EXPECT_EQ(mig["attributes"]["parentUUID"]["string"], "GPU-a4f87852-c040-2818-e88b-bf8725dc5f6c");
  EXPECT_EQ(mig["capacity"], json::parse(R"({
    "multiprocessors": {"value": "60"}, "copyEngines": {"value": "3"}, "decoders": {"value": "3"},
    "encoders": {"value": "0"}, "jpegEngines": {"value": "3"}, "ofaEngines": {"value": "0"},
    "memory": {"value": "40448Mi"}})"));
  EXPECT_EQ(mig["consumesCounters"], json::parse(R"([{"counterSet": "gpu-0-counter-set", "counters": {
    "multiprocessors": {"value": "60"}, "copy-engines": {"value": "3"}, "decoders": {"value": "3"},
    "encoders": {"value": "0"}, "jpeg-engines": {"value": "3"}, "ofa-engines": {"value": "0"},
    "memory": {"value": "40448Mi"}, "memory-slice-4": {"value": "1"}, "memory-slice-5": {"value": "1"},
    "memory-slice-6": {"value": "1"}, "memory-slice-7": {"value": "1"}}}])"));
  // The full GPU offers the largest of each dimension and consumes it all.
  json full = DeviceNamed(report, "gpu-0");
  EXPECT_EQ(full["capacity"]["multiprocessors"]["value"], "132");
  EXPECT_EQ(full["capacity"]["copyEngines"]["value"], "8");
  EXPECT_EQ(full["capacity"]["ofaEngines"]["value"], "1");
  EXPECT_EQ(full["capacity"]["memory"]["value"], "81152Mi");
  EXPECT_EQ(full["consumesCounters"][0]["counters"].size(), 7U + 8U);
  ASSERT_EQ(report["resourceSlice"]["sharedCounters"].size(), 8U);
  EXPECT_EQ(report["resourceSlice"]["sharedCounters"][0]["name"], "gpu-0-counter-set");
  EXPECT_EQ(report["resourceSlice"]["sharedCounters"][0]["counters"], full["consumesCounters"][0]["counters"]);
}

// The mock's H100 against what our tool printed on a real H100 with DynamicMIG
// (test/data/h100/check/): the same devices, capacities and counters; only the
// identity and PCI placement of the GPU differ.
TEST(DiscoveryH100, MockPublishesWhatTheRealH100Published) {
  json real = json::parse(std::ifstream(fs::path(NVDRA_TEST_DATA_DIR) / "h100/check/inspect-dynamic-mig.json"));
  MockNode node("h100-sxm.json");
  json mock = node.Inspect({.dynamic_mig = true});
  const std::set<std::string> per_machine = {"uuid", "parentUUID", "resource.kubernetes.io/pciBusID",
                                             "resource.kubernetes.io/pcieRoot", "resource.kubernetes.io/numaNode"};
  auto comparable = [&](json device) {
    for (const auto& name : per_machine) device["attributes"].erase(name);
    return device;
  };
  ASSERT_EQ(real["resourceSlice"]["devices"].size(), 26U);
  for (const json& device : real["resourceSlice"]["devices"]) {
    EXPECT_EQ(comparable(DeviceNamed(mock, device["name"])), comparable(device)) << device["name"];
  }
  EXPECT_EQ(mock["resourceSlice"]["sharedCounters"][0], real["resourceSlice"]["sharedCounters"][0]);
}

TEST(DiscoveryA100, StaticMigDevicesReplaceTheirGpu) {
  MockNode node("a100-mig.json");
  json report = node.Inspect();
  // GPU 0 has 3g+2g+2x1g, GPU 1 one 7g; GPUs 2-7 have MIG on and no devices:
  // nothing is published for them (upstream warns of stranded capacity).
  EXPECT_EQ(DeviceNames(report), (std::vector<std::string>{
                                     "gpu-0-mig-1g5gb-19-2", "gpu-0-mig-1g5gb-19-3", "gpu-0-mig-2g10gb-14-0",
                                     "gpu-0-mig-3g20gb-9-4", "gpu-1-mig-7g40gb-0-0"}));
  json mig = DeviceNamed(report, "gpu-0-mig-3g20gb-9-4");
  EXPECT_TRUE(mig["attributes"]["uuid"]["string"].get<std::string>().rfind("MIG-", 0) == 0);
  EXPECT_EQ(mig["attributes"]["profile"]["string"], "3g.20gb");
  EXPECT_EQ(mig["attributes"]["architecture"]["string"], "Ampere");
  EXPECT_EQ(mig["attributes"]["cudaComputeCapability"]["version"], "8.0.0");
  EXPECT_FALSE(mig["attributes"].contains("addressingMode"));  // not supported on this platform
  for (const char* slice : {"memorySlice4", "memorySlice5", "memorySlice6", "memorySlice7"}) {
    EXPECT_EQ(mig["capacity"][slice]["value"], "1") << slice;
  }
  EXPECT_FALSE(mig["capacity"].contains("memorySlice3"));
  EXPECT_EQ(mig["capacity"]["memory"]["value"], "19968Mi");
  EXPECT_EQ(mig["capacity"]["multiprocessors"]["value"], "42");

  NodeInventory inventory = node.Discover();
  ASSERT_EQ(inventory.gpus[0].mig_devices.size(), 4U);
  for (const auto& device : inventory.gpus[0].mig_devices) EXPECT_NE(device.uuid, inventory.gpus[0].uuid);
}

TEST(DiscoveryA100, DynamicMigKeepsAmpereWithMigOnPartitionedOnly) {
  MockNode node("a100-mig.json");
  json report = node.Inspect({.dynamic_mig = true});
  std::vector<std::string> names = DeviceNames(report);
  // Ampere with MIG on: no full GPU (leaving MIG mode needs a reset).
  for (const auto& name : names) EXPECT_NE(name, "gpu-0");
  EXPECT_TRUE(std::find(names.begin(), names.end(), "gpu-0-mig-7g40gb-0-0") != names.end());
}

TEST(DiscoveryGb200, CliqueIdFromFabricAndBlackwellAttributes) {
  MockNode node("gb200-tray.json");
  json report = node.Inspect();
  EXPECT_EQ(report["cliqueId"], "9f2c41e7-58a3-4b6d-8e0a-3c5d7f1b2a94.32766");
  json gpu = DeviceNamed(report, "gpu-0");
  EXPECT_EQ(gpu["attributes"]["architecture"]["string"], "Blackwell");
  EXPECT_EQ(gpu["attributes"]["cudaComputeCapability"]["version"], "10.0.0");
  EXPECT_EQ(gpu["attributes"]["addressingMode"]["string"], "ATS");
  EXPECT_EQ(gpu["attributes"]["resource.kubernetes.io/pciBusID"]["string"], "0008:01:00.0");
}

TEST(DiscoveryGb200, MixedCliquesOnOneNodeAreAnError) {
  MockNode node("gb200-tray-mixed-cliques.json");
  auto library = node.Open();
  auto clique = nvml::NodeCliqueId(*library, {});
  EXPECT_EQ(clique.status().code(), common::StatusCode::kFailedPrecondition);
  EXPECT_NE(clique.status().message().find("32766"), std::string::npos);
  EXPECT_NE(clique.status().message().find("32767"), std::string::npos);
}

TEST(DiscoveryGb200, FabricInProgressIsNoCliqueOrFatalInStrictMode) {
  MockNode node("gb200-tray.json",
                json::parse(R"({"deviceDefaults": {"fabric": {"state": "in_progress"}}})"));
  auto library = node.Open();
  EXPECT_EQ(nvml::NodeCliqueId(*library, {}).value(), "");
  auto strict = nvml::NodeCliqueId(*library, {.strict = true});
  EXPECT_EQ(strict.status().code(), common::StatusCode::kFailedPrecondition);
  EXPECT_NE(strict.status().message().find("IN_PROGRESS"), std::string::npos);
}

TEST(DiscoveryGb200, FailedRegistrationAndZeroClusterUuid) {
  MockNode failed("gb200-tray.json",
                  json::parse(R"({"deviceDefaults": {"fabric": {"status": 999}}})"));
  auto library = failed.Open();
  EXPECT_EQ(nvml::NodeCliqueId(*library, {}).value(), "");
  EXPECT_FALSE(nvml::NodeCliqueId(*library, {.strict = true}).ok());
  MockNode zero("gb200-tray.json", json::parse(R"({"deviceDefaults": {"fabric":
      {"clusterUuid": "00000000-0000-0000-0000-000000000000"}}})"));
  library = zero.Open();
  EXPECT_EQ(nvml::NodeCliqueId(*library, {}).value(), "");
  EXPECT_EQ(nvml::NodeCliqueId(*library, {.strict = true}).value(), "");
}

TEST(DiscoveryGb200, OlderLibraryWithoutV1CallUsesTheVersionedOne) {
  MockNode node("gb200-tray.json",
                json::parse(R"({"missingFunctions": ["nvmlDeviceGetGpuFabricInfo"]})"));
  auto library = node.Open();
  auto device = library->DeviceByIndex(0);
  ASSERT_TRUE(device.ok());
  auto info = device->GpuFabricInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->source, "nvmlDeviceGetGpuFabricInfoV(v3)");
  EXPECT_EQ(info->clique_id, 32766U);
  EXPECT_EQ(info->health_summary, std::optional<unsigned char>(1));
  EXPECT_EQ(nvml::NodeCliqueId(*library, {}).value(), "9f2c41e7-58a3-4b6d-8e0a-3c5d7f1b2a94.32766");
}

TEST(DiscoveryGb200, LibraryWithNoFabricCallHasNoClique) {
  MockNode node("gb200-tray.json", json::parse(R"({"missingFunctions":
      ["nvmlDeviceGetGpuFabricInfo", "nvmlDeviceGetGpuFabricInfoV"]})"));
  auto library = node.Open();
  EXPECT_EQ(nvml::NodeCliqueId(*library, {}).value(), "");
  EXPECT_EQ(nvml::NodeCliqueId(*library, {.strict = true}).value(), "");
}

TEST(DiscoveryL40s, NoMigNoFabric) {
  MockNode node("l40s.json");
  json report = node.Inspect({.dynamic_mig = true});
  EXPECT_EQ(report["cliqueId"], "");
  EXPECT_EQ(DeviceNames(report), (std::vector<std::string>{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}));
  json gpu = DeviceNamed(report, "gpu-0");
  EXPECT_EQ(gpu["attributes"]["architecture"]["string"], "Ada Lovelace");
  EXPECT_EQ(gpu["attributes"]["cudaDriverVersion"]["version"], "12.4.0");
  EXPECT_FALSE(gpu.contains("consumesCounters"));
  NodeInventory inventory = node.Discover();
  EXPECT_FALSE(inventory.gpus[0].mig_capable);
  EXPECT_FALSE(inventory.gpus[0].module_id.has_value());
}

TEST(DiscoveryOptions, ListTypeNumaAndModuleIdGates) {
  MockNode node("h100-sxm.json");
  json report = node.Inspect({.fabric_manager_partitioning = true, .list_type_attributes = true});
  json gpu = DeviceNamed(report, "gpu-4");
  EXPECT_EQ(gpu["attributes"]["resource.kubernetes.io/numaNode"], json::parse(R"({"ints": [1]})"));
  EXPECT_EQ(gpu["attributes"]["gpuModuleID"], json::parse(R"({"int": 5})"));
}

// --consumable-shares as upstream: several claims may hold a device, whose
// memory (in whole MiB) is consumable; integer mode adds a count of shares.
TEST(DiscoveryOptions, ConsumableSharesPublishRequestPolicies) {
  MockNode node("h100-sxm.json");
  auto mode = [](const char* text) {
    auto parsed = ConsumableShares::Parse(text);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    return parsed.ok() ? *parsed : ConsumableShares{};
  };
  PublishOptions publish;
  EXPECT_FALSE(DeviceNamed(node.Inspect(publish), "gpu-0").contains("allowMultipleAllocations"));

  publish.consumable_shares = mode("memory");
  json gpu = DeviceNamed(node.Inspect(publish), "gpu-0");
  EXPECT_EQ(gpu["allowMultipleAllocations"], true);
  const json memory = gpu["capacity"]["memory"];
  EXPECT_EQ(memory["requestPolicy"]["default"], memory["value"]) << memory.dump();
  EXPECT_EQ(memory["requestPolicy"]["validRange"],
            (json{{"min", "1Mi"}, {"max", memory["value"]}, {"step", "1Mi"}}));

  publish.consumable_shares = mode("unlimited");
  gpu = DeviceNamed(node.Inspect(publish), "gpu-0");
  EXPECT_EQ(gpu["capacity"]["memory"]["requestPolicy"]["default"], "0");
  EXPECT_FALSE(gpu["capacity"].contains("shares"));

  publish.consumable_shares = mode(" 4 ");
  gpu = DeviceNamed(node.Inspect(publish), "gpu-0");
  EXPECT_EQ(gpu["capacity"]["shares"],
            (json{{"value", "4"},
                  {"requestPolicy", {{"default", "1"}, {"validRange", {{"min", "1"}, {"max", "4"}, {"step", "1"}}}}}}));
  EXPECT_EQ(gpu["capacity"]["memory"]["requestPolicy"]["default"], "0");

  for (const char* bad : {"0", "-2", "lots", "4x"}) {
    auto parsed = ConsumableShares::Parse(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
  }
}

TEST(DiscoveryErrors, MissingDriverNamesEveryFolderTried) {
  auto library = nvml::Library::Open(AtRoot("/nonexistent-driver-root"));
  ASSERT_FALSE(library.ok());
  EXPECT_EQ(library.status().code(), common::StatusCode::kNotFound);
  EXPECT_NE(library.status().message().find("/nonexistent-driver-root/usr/lib64/libnvidia-ml.so.1"),
            std::string::npos);
  EXPECT_NE(library.status().message().find("--nvidia-driver-root"), std::string::npos);
}

TEST(DiscoveryErrors, DriverNotLoadedIsFailedPrecondition) {
  MockNode node("h100-sxm.json");
  fs::remove(node.root() / "mock-nvml/profile.json");  // the mock's "no driver"
  auto library = nvml::Library::Open(AtRoot(node.root()));
  ASSERT_FALSE(library.ok());
  EXPECT_EQ(library.status().code(), common::StatusCode::kFailedPrecondition);
  EXPECT_NE(library.status().message().find("nvmlInit_v2"), std::string::npos);
}

TEST(Versions, NormalizedToSemver) {
  EXPECT_EQ(NormalizeVersion("580.159.04").value(), "580.159.4");
  EXPECT_EQ(NormalizeVersion("13.0").value(), "13.0.0");
  EXPECT_EQ(NormalizeVersion("9").value(), "9.0.0");
  EXPECT_EQ(NormalizeVersion("v1.2.3-rc.1").value(), "1.2.3-rc.1");
  EXPECT_FALSE(NormalizeVersion("1.2.3.4").ok());
  EXPECT_FALSE(NormalizeVersion("abc").ok());
  EXPECT_FALSE(NormalizeVersion("").ok());
  EXPECT_EQ(CudaDriverVersionString(12040), "12.4");
}

}  // namespace
}  // namespace nvdra::gpu
