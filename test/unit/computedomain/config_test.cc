#include "computedomain/config.h"

#include <CLI/CLI.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "env_for_test.h"

namespace nvdra::computedomain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using nvdra::testing::ParseArgs;
using nvdra::testing::ScopedEnv;

common::FeatureGates Gates(std::string_view text) { return *common::FeatureGates::Parse(text); }

TEST(ImexFlagsTest, HostManagedNeedsGate) {
  ImexFlags imex;
  imex.mode = "hostManaged";
  EXPECT_THAT(imex.Validate(common::FeatureGates::Defaults()).message(),
              HasSubstr("HostManagedIMEXDaemon"));
  EXPECT_TRUE(imex.Validate(Gates("HostManagedIMEXDaemon=true")).ok());
}

TEST(ImexFlagsTest, ChannelIsolationIsAcceptedAndUnknownValuesAreRejected) {
  ImexFlags imex;
  imex.isolation = "channel";
  EXPECT_TRUE(imex.Validate(common::FeatureGates::Defaults()).ok());
  EXPECT_TRUE(imex.channel_isolation());
  imex.isolation = "workload";
  EXPECT_THAT(imex.Validate(common::FeatureGates::Defaults()).message(), HasSubstr("--imex-isolation"));
  imex = ImexFlags{};
  imex.mode = "selfManaged";
  EXPECT_THAT(imex.Validate(common::FeatureGates::Defaults()).message(),
              HasSubstr("--imex-mode"));
}

TEST(CdPluginConfigTest, ChannelCountIsBounded) {
  ScopedEnv a("NODE_NAME", "n1"), b("IMEX_CHANNEL_COUNT", "4");
  CLI::App app;
  PluginConfig config;
  AddFlags(app, config);
  ASSERT_EQ(ParseArgs(app, {}), std::nullopt);
  EXPECT_EQ(config.imex_channel_count, 4);
  EXPECT_TRUE(config.Validate(common::FeatureGates::Defaults()).ok());
  config.imex_channel_count = 0;
  EXPECT_THAT(config.Validate(common::FeatureGates::Defaults()).message(), HasSubstr("--imex-channel-count"));
  config.imex_channel_count = kMaxImexChannelCount + 1;
  EXPECT_THAT(config.Validate(common::FeatureGates::Defaults()).message(), HasSubstr("--imex-channel-count"));
}

TEST(CdPluginConfigTest, EnvironmentFillsFlags) {
  ScopedEnv a("NODE_NAME", "n1"), b("GPU_CLIQUE_LABEL_ENABLED", "true"),
      c("IMEX_MODE", "driverManaged"), d("IMEX_HOST_SOCKET_PATH", "/s.sock");
  CLI::App app;
  PluginConfig config;
  AddFlags(app, config);
  ASSERT_EQ(ParseArgs(app, {}), std::nullopt);
  EXPECT_EQ(config.plugin.node_name, "n1");
  EXPECT_TRUE(config.gpu_clique_label_enabled);
  EXPECT_EQ(config.imex_host_socket_path, "/s.sock");
  EXPECT_TRUE(config.Validate(common::FeatureGates::Defaults()).ok());
}

TEST(ControllerConfigTest, DefaultsAndEnvironmentMatchUpstream) {
  ScopedEnv a("POD_NAME", "ctrl-0"), b("IMAGE_NAME", "img"), c("LOG_VERBOSITY_CD_DAEMON", "4"),
      d("ADDITIONAL_NAMESPACES", "a,b"), e("CD_DAEMON_IMAGE_PULL_SECRET_NAMES", "s1"),
      f("MAX_NODES_PER_IMEX_DOMAIN", nullptr);
  CLI::App app;
  ControllerConfig config;
  AddFlags(app, config);
  ASSERT_EQ(ParseArgs(app, {}), std::nullopt);
  EXPECT_EQ(config.pod_name, "ctrl-0");
  EXPECT_EQ(config.log_verbosity_cd_daemon, 4);
  EXPECT_EQ(config.max_nodes_per_imex_domain, 18);
  EXPECT_THAT(config.additional_namespaces, ElementsAre("a", "b"));
  EXPECT_THAT(config.cd_daemon_image_pull_secret_names, ElementsAre("s1"));
  EXPECT_FALSE(config.leader_election.enabled);
  EXPECT_TRUE(config.Validate(common::FeatureGates::Defaults()).ok());
}

TEST(ControllerConfigTest, RequiredFlagsAreNamed) {
  ControllerConfig config;
  const common::FeatureGates gates = common::FeatureGates::Defaults();
  EXPECT_THAT(config.Validate(gates).message(), HasSubstr("--pod-name (POD_NAME)"));
  config.pod_name = "p";
  EXPECT_THAT(config.Validate(gates).message(), HasSubstr("--image-name (IMAGE_NAME)"));
  config.image_name = "i";
  EXPECT_THAT(config.Validate(gates).message(),
              HasSubstr("--log-verbosity-cd-daemon (LOG_VERBOSITY_CD_DAEMON)"));
  config.log_verbosity_cd_daemon = 2;
  EXPECT_TRUE(config.Validate(gates).ok());
}

TEST(ControllerConfigTest, AdditionalNamespacesMustBeNamespaceNames) {
  ControllerConfig config;
  config.pod_name = "p";
  config.image_name = "i";
  config.log_verbosity_cd_daemon = 2;
  const common::FeatureGates gates = common::FeatureGates::Defaults();
  config.additional_namespaces = {"legacy-ns", "a1"};
  EXPECT_TRUE(config.Validate(gates).ok());
  for (const char* bad : {"Legacy", "-a", "a-", "a_b", "", "a.b"}) {
    config.additional_namespaces = {"ok", bad};
    const common::Status status = config.Validate(gates);
    EXPECT_THAT(status.message(), HasSubstr("--additional-namespaces (ADDITIONAL_NAMESPACES)")) << bad;
    EXPECT_THAT(status.message(), HasSubstr("\"" + std::string(bad) + "\"")) << bad;
  }
  config.additional_namespaces = {std::string(64, 'a')};
  EXPECT_FALSE(config.Validate(gates).ok());
}

TEST(ControllerConfigTest, DaemonMetricsEndpointNeedsAFixedPortAndAPath) {
  ScopedEnv a("CD_DAEMON_HTTP_ENDPOINT", ":8082"), b("CD_DAEMON_METRICS_PATH", nullptr);
  CLI::App app;
  ControllerConfig config;
  AddFlags(app, config);
  ASSERT_EQ(ParseArgs(app, {"--pod-name=p", "--image-name=i", "--log-verbosity-cd-daemon=2"}), std::nullopt);
  EXPECT_EQ(config.cd_daemon_http_endpoint, ":8082");
  EXPECT_EQ(config.cd_daemon_metrics_path, "/metrics");
  const common::FeatureGates gates = common::FeatureGates::Defaults();
  EXPECT_TRUE(config.Validate(gates).ok()) << config.Validate(gates);
  for (const char* bad : {"8082", ":http", "[::1:8082", ":70000"}) {
    config.cd_daemon_http_endpoint = bad;
    const common::Status status = config.Validate(gates);
    EXPECT_EQ(status.code(), common::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), HasSubstr("--cd-daemon-http-endpoint (CD_DAEMON_HTTP_ENDPOINT)")) << bad;
  }
  config.cd_daemon_http_endpoint = ":0";
  EXPECT_THAT(config.Validate(gates).message(), HasSubstr("no fixed port"));
  config.cd_daemon_http_endpoint = "";
  EXPECT_TRUE(config.Validate(gates).ok()) << "empty: daemons serve no metrics";
  config.cd_daemon_metrics_path = "metrics";
  EXPECT_THAT(config.Validate(gates).message(), HasSubstr("--cd-daemon-metrics-path"));
}

TEST(DaemonConfigTest, RunNeedsComputeDomainUuidFromCdiEdits) {
  DaemonConfig config;
  const common::Status status = config.ValidateForRun();
  EXPECT_EQ(status.code(), common::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("COMPUTE_DOMAIN_UUID"));
  config.compute_domain_uuid = "6f1c";
  EXPECT_THAT(config.ValidateForRun().message(), HasSubstr("--pod-name (POD_NAME)"));
  config.pod_name = "daemon-x";
  config.pod_namespace = "nvidia-dra-driver";
  EXPECT_TRUE(config.ValidateForRun().ok());
}

TEST(DaemonConfigTest, RunWithCliqueNeedsPodIdentityAndDomainSize) {
  DaemonConfig config;
  config.compute_domain_uuid = "6f1c";
  config.pod_name = "daemon-x";
  config.pod_namespace = "nvidia-dra-driver";
  config.clique_id = "c.1";
  EXPECT_THAT(config.ValidateForRun().message(), HasSubstr("--node-name (NODE_NAME)"));
  config.node_name = "n1";
  EXPECT_THAT(config.ValidateForRun().message(), HasSubstr("--pod-ip (POD_IP)"));
  config.pod_ip = "10.0.0.1";
  EXPECT_THAT(config.ValidateForRun().message(), HasSubstr("--pod-uid (POD_UID)"));
  config.pod_uid = "u-1";
  EXPECT_TRUE(config.ValidateForRun(/*dns_names=*/false).ok());
  EXPECT_THAT(config.ValidateForRun(/*dns_names=*/true).message(), HasSubstr("--max-nodes-per-imex-domain"));
  config.max_nodes_per_imex_domain = 18;
  EXPECT_TRUE(config.ValidateForRun(/*dns_names=*/true).ok());
  config.imex_ready_poll_interval_ms = 0;
  EXPECT_THAT(config.ValidateForRun(true).message(), HasSubstr("--imex-ready-poll-interval-ms"));
}

TEST(DaemonConfigTest, EnvironmentFillsFlags) {
  ScopedEnv a("CLIQUE_ID", "c.1"), b("COMPUTE_DOMAIN_UUID", "u"), c("POD_IP", "10.0.0.1"),
      d("COMPUTE_DOMAIN_NAMESPACE", nullptr);
  CLI::App app;
  DaemonConfig config;
  AddFlags(app, config);
  ASSERT_EQ(ParseArgs(app, {}), std::nullopt);
  EXPECT_EQ(config.clique_id, "c.1");
  EXPECT_EQ(config.compute_domain_uuid, "u");
  EXPECT_EQ(config.pod_ip, "10.0.0.1");
  EXPECT_EQ(config.compute_domain_namespace, "default");
  EXPECT_EQ(config.metrics.http_endpoint, "") << "metrics off unless asked for";
}

TEST(DaemonConfigTest, MetricsFlagsComeFromTheEnvironmentAsTheOtherBinaries) {
  ScopedEnv a("HTTP_ENDPOINT", ":8082"), b("METRICS_PATH", "/m");
  CLI::App app;
  DaemonConfig config;
  AddFlags(app, config);
  ASSERT_EQ(ParseArgs(app, {"--compute-domain-uuid=u", "--pod-name=p", "--pod-namespace=n"}), std::nullopt);
  EXPECT_EQ(config.metrics.http_endpoint, ":8082");
  EXPECT_EQ(config.metrics.metrics_path, "/m");
  EXPECT_TRUE(config.ValidateForRun().ok());
  config.metrics.metrics_path = "m";
  EXPECT_THAT(config.ValidateForRun().message(), HasSubstr("--metrics-path"));
}

}  // namespace
}  // namespace nvdra::computedomain
