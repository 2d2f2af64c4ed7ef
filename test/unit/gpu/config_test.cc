#include "gpu/config.h"

#include <CLI/CLI.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "env_for_test.h"

namespace nvdra::gpu {
namespace {

using ::testing::HasSubstr;
using nvdra::testing::ParseArgs;
using nvdra::testing::ScopedEnv;

PluginConfig ValidConfig() {
  PluginConfig config;
  config.plugin.node_name = "node-1";
  config.image_name = "nvcr.io/nvidia/k8s-dra-driver-gpu:v0.5.0";
  return config;
}

common::FeatureGates Gates(std::string_view text) { return *common::FeatureGates::Parse(text); }

TEST(GpuPluginConfigTest, EnvironmentFillsGpuSpecificFlags) {
  ScopedEnv a("IMAGE_NAME", "img"), b("CONSUMABLE_SHARES", "memory"), c("HOST_ROOT", "/hr"),
      d("ADDITIONAL_XIDS_TO_IGNORE", "13,31"), e("HTTP_ENDPOINT", ":8080");
  CLI::App app;
  PluginConfig config;
  AddFlags(app, config);
  ASSERT_EQ(ParseArgs(app, {"--node-name=n"}), std::nullopt);
  EXPECT_EQ(config.image_name, "img");
  EXPECT_EQ(config.consumable_shares, "memory");
  EXPECT_EQ(config.host_root, "/hr");
  EXPECT_EQ(config.additional_xids_to_ignore, "13,31");
  EXPECT_EQ(config.metrics.http_endpoint, ":8080");
  EXPECT_EQ(config.metrics.metrics_path, "/metrics");
}

TEST(GpuPluginConfigTest, ValidConfigPasses) {
  EXPECT_TRUE(ValidConfig().Validate(common::FeatureGates::Defaults()).ok());
}

TEST(GpuPluginConfigTest, ImageNameIsRequired) {
  PluginConfig config = ValidConfig();
  config.image_name.clear();
  EXPECT_THAT(config.Validate(common::FeatureGates::Defaults()).message(),
              HasSubstr("--image-name (IMAGE_NAME) is required"));
}

TEST(GpuPluginConfigTest, ConsumableSharesNeedsItsGate) {
  PluginConfig config = ValidConfig();
  config.consumable_shares = "4";
  EXPECT_THAT(config.Validate(common::FeatureGates::Defaults()).message(),
              HasSubstr("needs feature gate ConsumableShares"));
  EXPECT_TRUE(config.Validate(Gates("ConsumableShares=true")).ok());
  config.consumable_shares = "0";
  EXPECT_THAT(config.Validate(Gates("ConsumableShares=true")).message(),
              HasSubstr("--consumable-shares"));
}

TEST(GpuPluginConfigTest, BadXidAndPullPolicyAreNamed) {
  PluginConfig config = ValidConfig();
  config.additional_xids_to_ignore = "13, x";
  EXPECT_THAT(config.Validate(common::FeatureGates::Defaults()).message(),
              HasSubstr("--additional-xids-to-ignore: \"x\""));
  config.additional_xids_to_ignore = "13, 31";
  config.image_pull_policy = "Sometimes";
  EXPECT_THAT(config.Validate(common::FeatureGates::Defaults()).message(),
              HasSubstr("--image-pull-policy"));
}

}  // namespace
}  // namespace nvdra::gpu
