#include "api/fabric_topology.h"

#include <cmath>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "api/opaque_config.h"

namespace nvdra::api {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr std::string_view kWhere = "spec.devices.config[0].opaque.parameters";

json Config(const std::string& kind, json extra) {
  json config = {{"apiVersion", "resource.nvidia.com/v1beta1"}, {"kind", kind}};
  config.update(extra);
  return config;
}

common::FeatureGates On() { return *common::FeatureGates::Parse("FabricTopologySupport=true,PassthroughSupport=true"); }

// Decoded strictly, then validated, as the webhook and the plugin do.
common::Status Check(const json& parameters, const common::FeatureGates& gates = On()) {
  common::StatusOr<OpaqueConfig> decoded = DecodeOpaqueConfig(parameters, kWhere);
  if (!decoded.ok()) return decoded.status();
  return ValidateConfig(*decoded, kWhere, gates);
}

json Topology(json fields) { return Config("GpuConfig", {{"fabricTopologyConfig", std::move(fields)}}); }

// Seed 002's example, as written (sharing and all).
json SeedExample() {
  return Config("GpuConfig", json::parse(R"({
      "sharing": {"strategy": "TimeSlicing"},
      "fabricTopologyConfig": {"strategy": "Auto", "partitionSize": 4, "virtualizationModel": "BareMetal",
                               "minBandwidth": 600.0, "maxLatency": 0.1, "partitionIDs": ["partition-1"]}})"));
}

TEST(FabricTopology, TheSeedsExampleIsAcceptedWithAWarningForItsIgnoredPartitionIds) {
  const auto gates = common::FeatureGates::Parse("FabricTopologySupport=true,TimeSlicingSettings=true");
  ASSERT_TRUE(gates.ok());
  EXPECT_TRUE(Check(SeedExample(), *gates).ok()) << Check(SeedExample(), *gates);
  const std::vector<std::string> warnings = FabricTopologyWarnings(SeedExample(), kWhere);
  ASSERT_EQ(warnings.size(), 1U);
  EXPECT_THAT(warnings[0], HasSubstr("fabricTopologyConfig.partitionIDs: ignored with strategy Auto"));
  EXPECT_LE(warnings[0].size(), 256U) << "the API server cuts longer warnings";

  const std::optional<FabricTopology> topology = FabricTopologyOf(SeedExample(), kWhere);
  ASSERT_TRUE(topology.has_value());
  EXPECT_EQ(topology->strategy, FabricStrategy::kAuto);
  EXPECT_EQ(topology->partition_size, 4);
  EXPECT_EQ(topology->model, VirtualizationModel::kBareMetal);
  EXPECT_DOUBLE_EQ(topology->min_bandwidth_gbps, 600.0);
  EXPECT_DOUBLE_EQ(topology->max_latency_ms, 0.1);
  EXPECT_TRUE(topology->partition_ids.empty()) << "ignored under Auto";
}

TEST(FabricTopology, TheGateOffIsRefusedNamingTheSwitches) {
  common::Status off = Check(Topology({{"strategy", "Auto"}}), common::FeatureGates::Defaults());
  EXPECT_EQ(off.code(), common::StatusCode::kFailedPrecondition);
  EXPECT_THAT(off.message(), HasSubstr(std::string(kWhere) + ".fabricTopologyConfig: requires the "
                                       "FabricTopologySupport feature gate: set FABRIC_TOPOLOGY_SUPPORT=true"));
  EXPECT_THAT(off.message(), HasSubstr("featureGates.FabricTopologySupport=true"));
  common::Status id_off = Check(Config("GpuConfig", {{"fabricPartitionID", 3}}), common::FeatureGates::Defaults());
  EXPECT_THAT(id_off.message(), HasSubstr(".fabricPartitionID: requires the FabricTopologySupport feature gate"));
  EXPECT_TRUE(Check(Config("GpuConfig", json::object()), common::FeatureGates::Defaults()).ok()) << "no fields: no gate";
}

TEST(FabricTopology, EachBadFieldIsRefusedByName) {
  const struct {
    json fields;
    const char* message;
  } cases[] = {
      {{{"partitionSize", 3}}, "fabricTopologyConfig.partitionSize: 3 GPUs is not a partition size; use 2, 4 or 8"},
      {{{"partitionSize", 16}}, "partitionSize: 16 GPUs"},
      {{{"partitionSize", 1}}, "partitionSize: 1 GPUs"},
      {{{"strategy", "Manual"}}, "fabricTopologyConfig.partitionIDs: strategy Manual needs the partitions"},
      {{{"strategy", "Manual"}, {"partitionIDs", json::array()}}, "strategy Manual needs the partitions"},
      {{{"strategy", "Manual"}, {"partitionIDs", {"1"}}, {"virtualizationModel", "VGPU"}},
       "virtualizationModel: VGPU applies no fabric constraint"},
      {{{"strategy", "Sometimes"}}, "fabricTopologyConfig.strategy: unknown strategy \"Sometimes\"; use Auto, Manual"},
      {{{"virtualizationModel", "Cloud"}}, "virtualizationModel: unknown model \"Cloud\"; use BareMetal"},
      {{{"minBandwidth", -1}}, "fabricTopologyConfig.minBandwidth: -1 is not a bound"},
      {{{"maxLatency", -0.5}}, "fabricTopologyConfig.maxLatency: -0.5 is not a bound"},
      {{{"minBandwidth", std::numeric_limits<double>::infinity()}}, "minBandwidth: null is not a bound"},
      {{{"strategy", "Manual"}, {"partitionIDs", {"p3"}}}, "partitionIDs[0]: \"p3\" is not a Fabric Manager partition id"},
      {{{"virtualizationModel", "FullPassthrough"}}, "FullPassthrough hands the GPUs to a VM with vfio-pci"},
      {{{"partitionSize", "4"}}, "partitionSize: must be an integer, not string"},
      {{{"minBandwidth", "600GB/s"}}, "minBandwidth: must be a number, not string"},
      {{{"partitionIDs", "1"}}, "partitionIDs: must be a list of strings"},
      {{{"partitionSizes", 4}}, "fabricTopologyConfig.partitionSizes: unknown field"},
  };
  for (const auto& c : cases) {
    common::Status status = Check(Topology(c.fields));
    EXPECT_FALSE(status.ok()) << c.fields.dump();
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.fields.dump();
  }
  // A non-finite number cannot be written in JSON, but a decoder that
  // overflows (1e400) could give one.
  json infinite = Topology({{"maxLatency", 1.0}});
  infinite["fabricTopologyConfig"]["maxLatency"] = std::numeric_limits<double>::infinity();
  EXPECT_THAT(Check(infinite).message(), HasSubstr("maxLatency"));
  EXPECT_THAT(Check(Config("GpuConfig", {{"fabricPartitionID", 1}, {"fabricTopologyConfig", {{"strategy", "Auto"}}}}))
                  .message(),
              HasSubstr("set either fabricPartitionID or fabricTopologyConfig, not both"));
  EXPECT_THAT(Check(Config("GpuConfig", {{"fabricPartitionID", "three"}})).message(),
              HasSubstr("fabricPartitionID: \"three\" is not a Fabric Manager partition id"));
  EXPECT_THAT(Check(Config("GpuConfig", {{"fabricPartitionID", -1}})).message(),
              HasSubstr("fabricPartitionID: -1 is not"));
  EXPECT_THAT(Check(Config("MigDeviceConfig", {{"fabricTopologyConfig", json::object()}})).message(),
              HasSubstr("fabricTopologyConfig: unknown field")) << "a MIG device is no partition member";
}

TEST(FabricTopology, FullPassthroughBelongsToAVfioDeviceConfig) {
  const json vfio = Config("VfioDeviceConfig", {{"fabricTopologyConfig", {{"virtualizationModel", "FullPassthrough"},
                                                                          {"partitionSize", 8}}}});
  EXPECT_TRUE(Check(vfio).ok()) << Check(vfio);
  EXPECT_EQ(FabricTopologyOf(vfio, kWhere)->model, VirtualizationModel::kFullPassthrough);
  const json shared = Config("VfioDeviceConfig", {{"fabricTopologyConfig", {{"virtualizationModel", "SharedNVSwitch"}}}});
  EXPECT_TRUE(Check(shared).ok());
}

TEST(FabricTopology, FabricPartitionIdIsAManualConfigOfOnePartition) {
  for (const json& id : {json(3), json("3"), json("partition-3")}) {
    const json config = Config("GpuConfig", {{"fabricPartitionID", id}});
    EXPECT_TRUE(Check(config).ok()) << id.dump();
    const std::optional<FabricTopology> topology = FabricTopologyOf(config, kWhere);
    ASSERT_TRUE(topology.has_value());
    EXPECT_EQ(topology->strategy, FabricStrategy::kManual);
    EXPECT_EQ(topology->partition_ids, std::vector<std::uint32_t>{3});
    EXPECT_EQ(topology->field, std::string(kWhere) + ".fabricPartitionID");
  }
  const json manual = Topology({{"strategy", "Manual"}, {"partitionIDs", {"partition-1", "2"}}});
  ASSERT_TRUE(Check(manual).ok());
  EXPECT_EQ(FabricTopologyOf(manual, kWhere)->partition_ids, (std::vector<std::uint32_t>{1, 2}));
  EXPECT_FALSE(FabricTopologyOf(Config("GpuConfig", json::object()), kWhere).has_value());
}

TEST(FabricTopology, DefaultsAndWarningsForWhatIsIgnored) {
  const json bare = Topology(json::object());
  ASSERT_TRUE(Check(bare).ok());
  const std::optional<FabricTopology> defaults = FabricTopologyOf(bare, kWhere);
  ASSERT_TRUE(defaults.has_value());
  EXPECT_EQ(defaults->strategy, FabricStrategy::kAuto);
  EXPECT_EQ(defaults->model, VirtualizationModel::kBareMetal);
  EXPECT_EQ(defaults->partition_size, std::nullopt);
  EXPECT_TRUE(FabricTopologyWarnings(bare, kWhere).empty());

  const json vgpu = Topology({{"virtualizationModel", "VGPU"}, {"minBandwidth", 600}, {"maxLatency", 1}});
  ASSERT_TRUE(Check(vgpu).ok());
  EXPECT_THAT(FabricTopologyWarnings(vgpu, kWhere),
              ::testing::ElementsAre(HasSubstr("minBandwidth: ignored with virtualizationModel VGPU"),
                                     HasSubstr("maxLatency: ignored with virtualizationModel VGPU")));
  const json disabled = Topology({{"strategy", "Disabled"}, {"partitionSize", 4}, {"partitionIDs", {"1"}}});
  ASSERT_TRUE(Check(disabled).ok());
  EXPECT_THAT(FabricTopologyWarnings(disabled, kWhere),
              ::testing::ElementsAre(HasSubstr("partitionIDs: ignored with strategy Disabled"),
                                     HasSubstr("partitionSize: ignored with strategy Disabled")));
}

}  // namespace
}  // namespace nvdra::api
