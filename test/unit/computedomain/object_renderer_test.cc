// DomainObjectRenderer: the DaemonSet and claim templates come whole from
// the shipped templates; the options only fill placeholders.

#include "computedomain/controller/object_renderer.h"

#include "computedomain/controller/owned_objects.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace nvdra::computedomain::controller {
namespace {

using json = nlohmann::json;

ControllerOptions Options() {
  ControllerOptions options;
  auto templates = Templates::Load(NVDRA_SOURCE_DIR "/templates");
  EXPECT_TRUE(templates.ok()) << templates.status();
  if (templates.ok()) options.templates = *templates;
  options.driver_namespace = "drv";
  options.image_name = "img:1";
  options.log_verbosity_cd_daemon = 3;
  options.max_nodes_per_imex_domain = 9;
  return options;
}

k8s::ComputeDomain Domain(std::string mode = "") {
  k8s::ComputeDomain cd = k8s::ComputeDomain::New("ns1", "cd1");
  cd.mutable_json()["metadata"]["uid"] = "u1";
  cd.set_channel_resource_claim_template_name("cd1-channel");
  if (!mode.empty()) cd.set_channel_allocation_mode(mode);
  return cd;
}

TEST(DomainObjectRendererTest, DaemonSetWithoutPullSecretsOrGatesHasNeither) {
  const ControllerOptions options = Options();
  auto ds = DomainObjectRenderer(options).DaemonSet("u1");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)["metadata"]["namespace"], "drv");
  EXPECT_EQ((*ds)["metadata"]["name"], "computedomain-daemon-u1");
  const json& pod = (*ds)["spec"]["template"]["spec"];
  EXPECT_FALSE(pod.contains("imagePullSecrets"));
  const json& env = pod["containers"][0]["env"];
  EXPECT_EQ(env.back(), json::parse(R"({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"})"));
  EXPECT_EQ(env[0], json::parse(R"({"name": "LOG_VERBOSITY", "value": "3"})"));
  EXPECT_EQ(env[1], json::parse(R"({"name": "MAX_NODES_PER_IMEX_DOMAIN", "value": "9"})"));
  EXPECT_EQ(pod["resourceClaims"][0]["resourceClaimTemplateName"], "computedomain-daemon-u1");
  EXPECT_EQ(pod["containers"][0]["image"], "img:1");
  EXPECT_FALSE(pod["containers"][0].contains("ports")) << "no metrics endpoint unless asked for";
}

TEST(DomainObjectRendererTest, DaemonSetServesMetricsOnANamedPortWhenAsked) {
  ControllerOptions options = Options();
  options.daemon_http_endpoint = ":8082";
  options.daemon_metrics_path = "/m";
  options.daemon_metrics_port = 8082;
  auto ds = DomainObjectRenderer(options).DaemonSet("u1");
  ASSERT_TRUE(ds.ok()) << ds.status();
  const json& container = (*ds)["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(container["ports"],
            json::parse(R"([{"name": "metrics-daemon", "containerPort": 8082, "protocol": "TCP"}])"));
  const json& env = container["env"];
  ASSERT_GE(env.size(), 2u);
  EXPECT_EQ(env[env.size() - 2], json::parse(R"({"name": "HTTP_ENDPOINT", "value": ":8082"})"));
  EXPECT_EQ(env.back(), json::parse(R"({"name": "METRICS_PATH", "value": "/m"})"));
  EXPECT_FALSE((*ds)["spec"]["template"]["spec"].contains("hostNetwork"))
      << "a fixed port is safe only in the pod network";
}

TEST(DomainObjectRendererTest, DaemonSetCarriesPullSecretsAndGatesFromTheTemplate) {
  ControllerOptions options = Options();
  options.image_pull_secret_names = {"reg-a", "reg \"b\""};
  options.daemon_feature_gates = "A=true,B=false";
  auto ds = DomainObjectRenderer(options).DaemonSet("u1");
  ASSERT_TRUE(ds.ok()) << ds.status();
  const json& pod = (*ds)["spec"]["template"]["spec"];
  EXPECT_EQ(pod["imagePullSecrets"], json::parse(R"([{"name": "reg-a"}, {"name": "reg \"b\""}])"));
  const json& env = pod["containers"][0]["env"];
  EXPECT_EQ(env.back(), json::parse(R"({"name": "FEATURE_GATES", "value": "A=true,B=false"})"));
  EXPECT_EQ(env[env.size() - 2]["name"], "NVIDIA_VISIBLE_DEVICES");
}

// Switching the daemons' metrics on or off changes the DaemonSets of domains
// that already exist: the controller updates them (and the DaemonSet rolls
// their pods, restarting nvidia-imex).
TEST(DomainObjectRendererTest, TurningDaemonMetricsOnOrOffUpdatesExistingDaemonSets) {
  const ControllerOptions off = Options();
  ControllerOptions on = Options();
  on.daemon_http_endpoint = ":8082";
  on.daemon_metrics_port = 8082;
  auto without = DomainObjectRenderer(off).DaemonSet("u1");
  auto with = DomainObjectRenderer(on).DaemonSet("u1");
  ASSERT_TRUE(without.ok() && with.ok());
  EXPECT_EQ(DecideOwnedObjectAction(*with, *without, "u1", false), OwnedObjectAction::kUpdate);
  EXPECT_EQ(DecideOwnedObjectAction(*without, *with, "u1", false), OwnedObjectAction::kUpdate)
      << "HTTP_ENDPOINT must go from the pods once off";
  EXPECT_EQ(DecideOwnedObjectAction(*with, *with, "u1", false), OwnedObjectAction::kNone);
}

TEST(DomainObjectRendererTest, DaemonClaimTemplateIsTheDaemonTarget) {
  const ControllerOptions options = Options();
  auto claim = DomainObjectRenderer(options).DaemonClaimTemplate("u1");
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_EQ((*claim)["metadata"]["namespace"], "drv");
  EXPECT_EQ((*claim)["metadata"]["name"], "computedomain-daemon-u1");
  EXPECT_EQ((*claim)["metadata"]["labels"][std::string(kTargetLabel)], "Daemon");
}

TEST(DomainObjectRendererTest, WorkloadClaimTemplateInTheDomainsNamespace) {
  const ControllerOptions options = Options();
  auto claim = DomainObjectRenderer(options).WorkloadClaimTemplate(Domain("All"), std::nullopt);
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_EQ((*claim)["metadata"]["namespace"], "ns1");
  EXPECT_EQ((*claim)["metadata"]["name"], "cd1-channel");
  EXPECT_EQ((*claim)["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["allocationMode"], "All");
  EXPECT_FALSE((*claim)["spec"]["spec"]["devices"]["requests"][0]["exactly"].contains("selectors"));
}

TEST(DomainObjectRendererTest, WorkloadClaimTemplateSelectsTheDomainsOwnChannel) {
  const ControllerOptions options = Options();
  auto claim = DomainObjectRenderer(options).WorkloadClaimTemplate(Domain(), 7);
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_EQ((*claim)["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"],
            json::parse(R"([{"cel": {"expression": "device.attributes[\"compute-domain.nvidia.com\"].id == 7"}}])"));
  EXPECT_EQ((*claim)["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["allocationMode"], "Single");
}

TEST(DomainObjectRendererTest, HostManagedAlwaysAsksForOneChannel) {
  ControllerOptions options = Options();
  options.host_managed = true;
  auto claim = DomainObjectRenderer(options).WorkloadClaimTemplate(Domain("All"), std::nullopt);
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_EQ((*claim)["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["allocationMode"], "Single");
}

TEST(DomainObjectRendererTest, ATemplateWithAnUnknownPlaceholderIsAnError) {
  ControllerOptions options = Options();
  options.templates.daemon_set = "a: ${UNKNOWN}\n";
  auto ds = DomainObjectRenderer(options).DaemonSet("u1");
  ASSERT_FALSE(ds.ok());
  EXPECT_THAT(ds.status().message(), ::testing::HasSubstr("${UNKNOWN}"));
}

}  // namespace
}  // namespace nvdra::computedomain::controller
