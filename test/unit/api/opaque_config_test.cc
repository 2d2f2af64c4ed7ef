#include "api/opaque_config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace nvdra::api {
namespace {

using nlohmann::json;

json Gpu(json extra = json::object()) {
  json config = {{"apiVersion", "resource.nvidia.com/v1beta1"}, {"kind", "GpuConfig"}};
  config.update(extra);
  return config;
}

TEST(DecodeOpaqueConfig, AcceptsKnownKindsAndFields) {
  auto config = DecodeOpaqueConfig(Gpu({{"sharing", {{"strategy", "MPS"}, {"mpsConfig", {{"multiUser", true}}}}}}),
                                   "where");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->kind, ConfigKind::kGpuConfig);
  EXPECT_TRUE(DecodeOpaqueConfig(json{{"apiVersion", "resource.nvidia.com/v1beta1"},
                                      {"kind", "ComputeDomainChannelConfig"},
                                      {"domainID", "1f0c2a4e-3b5d-4c6e-8f70-9a1b2c3d4e5f"},
                                      {"allocationMode", "All"}},
                                 "where")
                  .ok());
  // null means unset, as for Go's decoder.
  EXPECT_TRUE(DecodeOpaqueConfig(Gpu({{"sharing", nullptr}}), "where").ok());
}

TEST(DecodeOpaqueConfig, RejectsUnknownFieldsWithTheirPath) {
  auto config = DecodeOpaqueConfig(Gpu({{"sharing", {{"strategy", "MPS"}, {"mpsConfig", {{"multiuser", true}}}}}}),
                                   "claim config[2].opaque.parameters");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("claim config[2].opaque.parameters.sharing.mpsConfig.multiuser: unknown "
                                           "field"),
            std::string::npos)
      << config.status().message();
  // MigDeviceConfig has no timeSlicingConfig.
  auto mig = DecodeOpaqueConfig(json{{"apiVersion", "resource.nvidia.com/v1beta1"},
                                     {"kind", "MigDeviceConfig"},
                                     {"sharing", {{"timeSlicingConfig", json::object()}}}},
                                "p");
  ASSERT_FALSE(mig.ok());
  EXPECT_NE(mig.status().message().find("p.sharing.timeSlicingConfig: unknown field"), std::string::npos);
}

TEST(DecodeOpaqueConfig, RejectsWrongTypesKindsAndVersions) {
  auto wrong_type = DecodeOpaqueConfig(Gpu({{"sharing", {{"strategy", 3}}}}), "p");
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(wrong_type.status().message().find("p.sharing.strategy: must be a string, not number"),
            std::string::npos)
      << wrong_type.status().message();
  auto kind = DecodeOpaqueConfig(json{{"apiVersion", "resource.nvidia.com/v1beta1"}, {"kind", "TpuConfig"}}, "p");
  ASSERT_FALSE(kind.ok());
  EXPECT_NE(kind.status().message().find("p.kind: unknown kind \"TpuConfig\""), std::string::npos);
  auto version = DecodeOpaqueConfig(json{{"apiVersion", "resource.nvidia.com/v1"}, {"kind", "GpuConfig"}}, "p");
  ASSERT_FALSE(version.ok());
  EXPECT_NE(version.status().message().find("use \"resource.nvidia.com/v1beta1\""), std::string::npos);
  EXPECT_FALSE(DecodeOpaqueConfig(json::array(), "p").ok());
}

common::FeatureGates GatesFrom(const char* text) {
  auto gates = common::FeatureGates::Parse(text);
  EXPECT_TRUE(gates.ok()) << gates.status().ToString();
  return gates.ok() ? *gates : common::FeatureGates::Defaults();
}

// A decoded config of `kind` with `sharing`.
OpaqueConfig Shared(json sharing, const char* kind = "GpuConfig") {
  json parameters = {{"apiVersion", "resource.nvidia.com/v1beta1"}, {"kind", kind}, {"sharing", std::move(sharing)}};
  auto decoded = DecodeOpaqueConfig(parameters, "p");
  EXPECT_TRUE(decoded.ok()) << decoded.status().ToString();
  return decoded.ok() ? *decoded : OpaqueConfig{};
}

TEST(ValidateConfig, TimeSlicingNeedsItsGateAndAValidInterval) {
  const common::FeatureGates off = common::FeatureGates::Defaults();
  const common::FeatureGates on = GatesFrom("TimeSlicingSettings=true");
  auto exclusive = DecodeOpaqueConfig(Gpu(), "p");
  ASSERT_TRUE(exclusive.ok());
  EXPECT_TRUE(ValidateConfig(*exclusive, "p", off).ok());
  EXPECT_EQ(SharingOf(*exclusive), std::nullopt);

  const OpaqueConfig plain = Shared({{"strategy", "TimeSlicing"}});
  common::Status gated = ValidateConfig(plain, "p", off);
  EXPECT_EQ(gated.code(), common::StatusCode::kFailedPrecondition);
  EXPECT_NE(gated.message().find("p.sharing.strategy: TimeSlicing needs the feature gate TimeSlicingSettings"),
            std::string::npos)
      << gated.message();
  EXPECT_NE(gated.message().find("featureGates.TimeSlicingSettings=true"), std::string::npos);
  EXPECT_TRUE(ValidateConfig(plain, "p", on).ok());
  EXPECT_EQ(SharingOf(plain), Sharing(TimeSlicing{TimeSliceInterval::kDefault}));

  const OpaqueConfig long_slices = Shared({{"strategy", "TimeSlicing"}, {"timeSlicingConfig", {{"interval", "Long"}}}});
  EXPECT_TRUE(ValidateConfig(long_slices, "p", on).ok());
  EXPECT_EQ(SharingOf(long_slices), Sharing(TimeSlicing{TimeSliceInterval::kLong}));

  common::Status no_interval =
      ValidateConfig(Shared({{"strategy", "TimeSlicing"}, {"timeSlicingConfig", json::object()}}), "p", on);
  EXPECT_EQ(no_interval.code(), common::StatusCode::kInvalidArgument);
  EXPECT_NE(no_interval.message().find("p.sharing.timeSlicingConfig.interval: must be set"), std::string::npos);
  common::Status bad_interval = ValidateConfig(
      Shared({{"strategy", "TimeSlicing"}, {"timeSlicingConfig", {{"interval", "Forever"}}}}), "p", on);
  EXPECT_EQ(bad_interval.code(), common::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_interval.message().find("unknown interval \"Forever\""), std::string::npos);
  common::Status mixed =
      ValidateConfig(Shared({{"strategy", "TimeSlicing"}, {"mpsConfig", json::object()}}), "p", on);
  EXPECT_EQ(mixed.code(), common::StatusCode::kInvalidArgument);
  EXPECT_NE(mixed.message().find("p.sharing.mpsConfig: only with strategy MPS"), std::string::npos);

  // On a MIG device TimeSlicing is accepted (and changes nothing, as upstream).
  const OpaqueConfig mig = Shared({{"strategy", "TimeSlicing"}}, "MigDeviceConfig");
  EXPECT_TRUE(ValidateConfig(mig, "p", on).ok());
  EXPECT_EQ(SharingOf(mig), Sharing(TimeSlicing{}));
}

TEST(ValidateConfig, MpsIsGatedAndChecksItsSettings) {
  const common::FeatureGates on = GatesFrom("MPSSupport=true");
  const OpaqueConfig mps = Shared({{"strategy", "MPS"}});
  EXPECT_EQ(ValidateConfig(mps, "p", common::FeatureGates::Defaults()).code(),
            common::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(ValidateConfig(mps, "p", on).ok());
  EXPECT_EQ(SharingOf(mps), Sharing(MpsSharing{}));
  common::Status mixed = ValidateConfig(Shared({{"strategy", "MPS"}, {"timeSlicingConfig", {{"interval", "Long"}}}}),
                                        "p", on);
  EXPECT_EQ(mixed.code(), common::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateConfig(Shared({{"strategy", "Sometimes"}}), "p", common::FeatureGates::Defaults()).code(),
            common::StatusCode::kInvalidArgument);

  // upstream's quickstart settings decode to bytes.
  const OpaqueConfig quickstart = Shared(
      {{"strategy", "MPS"},
       {"mpsConfig",
        {{"defaultActiveThreadPercentage", 50},
         {"defaultPinnedDeviceMemoryLimit", "10Gi"},
         {"defaultPerDevicePinnedMemoryLimit", {{"0", "5Gi"}, {"GPU-b", 1048576}}},
         {"multiUser", true}}}});
  ASSERT_TRUE(ValidateConfig(quickstart, "p", on).ok());
  MpsSharing expected;
  expected.default_active_thread_percentage = 50;
  expected.default_pinned_device_memory_limit = 10LL << 30;
  expected.per_device_pinned_memory_limit = {{"0", 5LL << 30}, {"GPU-b", 1LL << 20}};
  expected.multi_user = true;
  EXPECT_EQ(SharingOf(quickstart), Sharing(expected));

  auto message_of = [&](json mps_config) {
    return ValidateConfig(Shared({{"strategy", "MPS"}, {"mpsConfig", mps_config}}), "p", on).message();
  };
  EXPECT_NE(message_of({{"defaultActiveThreadPercentage", 101}})
                .find("p.sharing.mpsConfig.defaultActiveThreadPercentage: 101 is out of range"),
            std::string::npos);
  EXPECT_NE(message_of({{"defaultActiveThreadPercentage", -1}}).find("from 0 to 100"), std::string::npos);
  EXPECT_NE(message_of({{"defaultPinnedDeviceMemoryLimit", "10GB"}})
                .find("p.sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: \"10GB\" is not a quantity"),
            std::string::npos);
  EXPECT_NE(message_of({{"defaultPinnedDeviceMemoryLimit", "1Ki"}}).find("below the smallest limit MPS takes, 1Mi"),
            std::string::npos);
  EXPECT_NE(message_of({{"defaultPerDevicePinnedMemoryLimit", {{"1", "x"}}}})
                .find("p.sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit[1]"),
            std::string::npos);
}

TEST(MpsPinnedMemoryLimits, DefaultThenPerDeviceByUuidOrIndex) {
  MpsSharing mps;
  mps.default_pinned_device_memory_limit = 10LL << 30;
  mps.per_device_pinned_memory_limit = {{"1", 5LL << 30}, {"GPU-a", (2LL << 30) + 1}};
  auto limits = MpsPinnedMemoryLimits(mps, {"GPU-a", "GPU-b", "GPU-c"}, "p");
  ASSERT_TRUE(limits.ok()) << limits.status().message();
  EXPECT_EQ(*limits, (std::map<std::string, std::string>{{"GPU-a", "2048M"}, {"GPU-b", "5120M"}, {"GPU-c", "10240M"}}));

  EXPECT_TRUE(MpsPinnedMemoryLimits(MpsSharing{}, {"GPU-a"}, "p")->empty());
  mps.per_device_pinned_memory_limit = {{"3", 1LL << 30}};
  auto out_of_range = MpsPinnedMemoryLimits(mps, {"GPU-a", "GPU-b", "GPU-c"}, "p");
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_NE(out_of_range.status().message().find("defaultPerDevicePinnedMemoryLimit[3]: no such device"),
            std::string::npos);
  EXPECT_NE(out_of_range.status().message().find("index from 0 to 2"), std::string::npos);
  mps.per_device_pinned_memory_limit = {{"GPU-z", 1LL << 30}};
  EXPECT_FALSE(MpsPinnedMemoryLimits(mps, {"GPU-a"}, "p").ok());
}

// A claim allocation with results for gpu-0 (request "a") and a MIG device
// (request "b"), and the configs given.
json Allocation(json configs) {
  return json{{"results",
               json::array({{{"request", "a"}, {"driver", "gpu.nvidia.com"}, {"pool", "n"}, {"device", "gpu-0"}},
                            {{"request", "b"}, {"driver", "gpu.nvidia.com"}, {"pool", "n"}, {"device", "mig-0"}},
                            {{"request", "c"}, {"driver", "other.example.com"}, {"pool", "n"}, {"device", "x"}}})},
              {"config", std::move(configs)}};
}

json Config(const char* source, json requests, json parameters, const char* driver = "gpu.nvidia.com") {
  return json{{"source", source},
              {"requests", std::move(requests)},
              {"opaque", {{"driver", driver}, {"parameters", std::move(parameters)}}}};
}

common::StatusOr<ConfigKind> KindOf(const std::string& device) {
  if (device == "gpu-0") return ConfigKind::kGpuConfig;
  if (device == "mig-0") return ConfigKind::kMigDeviceConfig;
  return common::NotFoundError("no device " + device);
}

TEST(ResolveDeviceConfigs, DefaultsApplyByDeviceKind) {
  auto groups = ResolveDeviceConfigs(Allocation(json::array()), "gpu.nvidia.com",
                                     {ConfigKind::kGpuConfig, ConfigKind::kMigDeviceConfig}, KindOf);
  ASSERT_TRUE(groups.ok()) << groups.status().ToString();
  ASSERT_EQ(groups->size(), 2u);
  EXPECT_EQ((*groups)[0].config.kind, ConfigKind::kGpuConfig);
  EXPECT_EQ((*groups)[0].source, "default");
  EXPECT_EQ((*groups)[0].results.size(), 1u);
  EXPECT_EQ((*groups)[1].config.kind, ConfigKind::kMigDeviceConfig);
}

TEST(ResolveDeviceConfigs, ClaimBeatsClassAndTheLastEntryWins) {
  json configs = json::array({
      // Listed first but from the claim: still after every class config.
      Config("FromClaim", json::array(), Gpu({{"sharing", {{"strategy", "TimeSlicing"}}}})),
      Config("FromClass", json::array({"a"}), Gpu({{"sharing", {{"strategy", "MPS"}}}})),
      Config("FromClaim", json::array(), Gpu()),
      Config("FromClaim", json::array({"a"}), Gpu({{"sharing", nullptr}}), "other.example.com"),
  });
  auto groups = ResolveDeviceConfigs(Allocation(configs), "gpu.nvidia.com",
                                     {ConfigKind::kGpuConfig, ConfigKind::kMigDeviceConfig}, KindOf);
  ASSERT_TRUE(groups.ok()) << groups.status().ToString();
  // gpu-0: the last claim config without requests (the plain Gpu()), not the
  // class one naming request "a": a request-specific entry has no priority.
  const ConfiguredResults* gpu = nullptr;
  for (const auto& g : *groups) {
    if (g.config.kind == ConfigKind::kGpuConfig) gpu = &g;
  }
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->source, "claim config[1].opaque.parameters");  // numbered among claim configs
  EXPECT_FALSE(gpu->config.object.contains("sharing"));
}

TEST(ResolveDeviceConfigs, AConfigOfTheWrongKindForARequestFails) {
  json configs = json::array({Config("FromClaim", json::array({"b"}), Gpu())});
  auto groups = ResolveDeviceConfigs(Allocation(configs), "gpu.nvidia.com",
                                     {ConfigKind::kGpuConfig, ConfigKind::kMigDeviceConfig}, KindOf);
  ASSERT_FALSE(groups.ok());
  EXPECT_NE(groups.status().message().find("cannot apply GpuConfig to device mig-0 of request b"),
            std::string::npos)
      << groups.status().message();
}

TEST(ResolveDeviceConfigs, BadConfigsAndUnknownDevicesFail) {
  json bad = json::array({Config("FromClass", json::array(), json{{"kind", "GpuConfig"}})});
  auto groups = ResolveDeviceConfigs(Allocation(bad), "gpu.nvidia.com", {ConfigKind::kGpuConfig}, KindOf);
  ASSERT_FALSE(groups.ok());
  EXPECT_NE(groups.status().message().find("device class config[0].opaque.parameters.apiVersion"),
            std::string::npos)
      << groups.status().message();

  json not_opaque = json::array({{{"source", "FromClaim"}, {"requests", json::array()}}});
  EXPECT_FALSE(ResolveDeviceConfigs(Allocation(not_opaque), "gpu.nvidia.com", {ConfigKind::kGpuConfig}, KindOf).ok());

  json results = {{"results", json::array({{{"request", "a"}, {"driver", "gpu.nvidia.com"}, {"device", "gone"}}})}};
  auto unknown = ResolveDeviceConfigs(results, "gpu.nvidia.com", {ConfigKind::kGpuConfig}, KindOf);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), common::StatusCode::kNotFound);
}

}  // namespace
}  // namespace nvdra::api
