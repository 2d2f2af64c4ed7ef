// compute-domain-controller's pure parts: single-writer IMEX index
// assignment, channel IDs for channel isolation, and template rendering
// (placeholders, YAML scalars, the three templates shipped in templates/).

#include <optional>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "computedomain/controller/indexes.h"
#include "computedomain/controller/templates.h"

namespace nvdra::computedomain::controller {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using json = nlohmann::json;

CliqueMember Member(std::string node, std::optional<std::int64_t> index = std::nullopt) {
  return CliqueMember{.node_name = std::move(node), .ip_address = "10.0.0.1", .clique_id = "c", .index = index,
                      .status = "Ready"};
}

TEST(AssignIndexesTest, NewEntriesGetZeroToNMinusOneInJoinOrder) {
  IndexAssignment a = AssignIndexes({Member("n3"), Member("n1"), Member("n2")}, 18);
  EXPECT_EQ(a.indexes, (std::map<std::string, std::int64_t>{{"n3", 0}, {"n1", 1}, {"n2", 2}}));
  EXPECT_THAT(a.assigned, ElementsAre("n3", "n1", "n2"));
  EXPECT_THAT(a.over_limit, IsEmpty());
}

TEST(AssignIndexesTest, KeepsAssignedIndexesAndFillsTheLowestGap) {
  // n1 left (index 1 free), n5 joined: it gets 1, nobody else moves.
  IndexAssignment a = AssignIndexes({Member("n0", 0), Member("n2", 2), Member("n3", 3), Member("n5")}, 18);
  EXPECT_EQ(a.indexes.at("n0"), 0);
  EXPECT_EQ(a.indexes.at("n2"), 2);
  EXPECT_EQ(a.indexes.at("n3"), 3);
  EXPECT_EQ(a.indexes.at("n5"), 1);
  EXPECT_THAT(a.assigned, ElementsAre("n5"));
  // Two gaps, two newcomers: lowest first, in list order.
  a = AssignIndexes({Member("a"), Member("x", 1), Member("b"), Member("y", 4), Member("c")}, 18);
  EXPECT_EQ(a.indexes.at("a"), 0);
  EXPECT_EQ(a.indexes.at("b"), 2);
  EXPECT_EQ(a.indexes.at("c"), 3);
}

TEST(AssignIndexesTest, NothingToDoWhenAllHaveIndexes) {
  IndexAssignment a = AssignIndexes({Member("n0", 0), Member("n1", 1)}, 18);
  EXPECT_THAT(a.assigned, IsEmpty());
  EXPECT_EQ(a.indexes.size(), 2u);
}

TEST(AssignIndexesTest, EntriesBeyondTheLimitGetNone) {
  IndexAssignment a = AssignIndexes({Member("a", 0), Member("b"), Member("c"), Member("d")}, 3);
  EXPECT_EQ(a.indexes.at("b"), 1);
  EXPECT_EQ(a.indexes.at("c"), 2);
  EXPECT_FALSE(a.indexes.contains("d"));
  EXPECT_THAT(a.over_limit, ElementsAre("d"));
  // The limit is a parameter, not 18: a clique of 2.
  a = AssignIndexes({Member("a"), Member("b"), Member("c")}, 2);
  EXPECT_THAT(a.over_limit, ElementsAre("c"));
}

TEST(AssignIndexesTest, ForeignIndexesAreNeverRewritten) {
  // An index out of range or a duplicate (only another writer makes them)
  // stays as it is; newcomers still avoid the in-range ones.
  IndexAssignment a = AssignIndexes({Member("a", 0), Member("b", 0), Member("c", 40), Member("d")}, 18);
  EXPECT_EQ(a.indexes.at("a"), 0);
  EXPECT_EQ(a.indexes.at("b"), 0);
  EXPECT_EQ(a.indexes.at("c"), 40);
  EXPECT_EQ(a.indexes.at("d"), 1);
  EXPECT_THAT(a.assigned, ElementsAre("d"));
}

TEST(AssignIndexesTest, EntriesWithoutNodeNameAreIgnored) {
  IndexAssignment a = AssignIndexes({Member(""), Member("a")}, 18);
  EXPECT_EQ(a.indexes.size(), 1u);
  EXPECT_EQ(a.indexes.at("a"), 0);
}

TEST(AssignChannelTest, LowestFreeFromOneBelowTheCount) {
  EXPECT_EQ(AssignChannel({}, 128), 1);
  EXPECT_EQ(AssignChannel({1, 2, 4}, 128), 3);
  EXPECT_EQ(AssignChannel({1, 2, 3}, 4), std::nullopt);
  EXPECT_EQ(AssignChannel({0}, 2), 1);  // 0 is never handed out
  EXPECT_EQ(AssignChannel({}, 1), std::nullopt);
}

TEST(RenderTemplateTest, ReplacesPlaceholdersAndTypesScalars) {
  auto out = RenderTemplate("t", "a: ${A}\nb: \"${B}\"\nc: [${C}, x]\nd: true\ne: \"7\"\n",
                            {{"A", "12"}, {"B", "34"}, {"C", "5"}});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, json::parse(R"({"a": 12, "b": "34", "c": [5, "x"], "d": true, "e": "7"})"));
}

TEST(RenderTemplateTest, MissingValueAndBadYamlNameTheTemplate) {
  auto missing = RenderTemplate("tmpl.yaml", "a: ${NOPE}\n", {});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("tmpl.yaml"));
  EXPECT_THAT(missing.status().message(), HasSubstr("${NOPE}"));
  auto bad = RenderTemplate("tmpl.yaml", "a: [\n", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("tmpl.yaml"));
}

TemplateValues Values() {
  return {{"NAMESPACE", "drv"},
          {"NAME", "computedomain-daemon-u1"},
          {"FINALIZER", "resource.nvidia.com/computeDomain"},
          {"COMPUTE_DOMAIN_LABEL_KEY", "resource.nvidia.com/computeDomain"},
          {"COMPUTE_DOMAIN_UID", "u1"},
          {"TARGET_LABEL_KEY", "resource.nvidia.com/computeDomainTarget"},
          {"IMAGE_NAME", "img:1"},
          {"LOG_VERBOSITY", "2"},
          {"MAX_NODES_PER_IMEX_DOMAIN", "18"},
          {"RESOURCE_CLAIM_TEMPLATE_NAME", "computedomain-daemon-u1"},
          {"ALLOCATION_MODE", "Single"},
          {"IMAGE_PULL_SECRETS", ""},
          {"FEATURE_GATES_ENV", ""},
          {"METRICS_ENDPOINT_ENV", ""},
          {"METRICS_PATH_ENV", ""},
          {"METRICS_PORTS", ""},
          {"CHANNEL_SELECTORS", ""}};
}

TEST(ShippedTemplatesTest, RenderAsUpstreamsController) {
  auto templates = Templates::Load(NVDRA_SOURCE_DIR "/templates");
  ASSERT_TRUE(templates.ok()) << templates.status();

  auto ds = RenderTemplate(kDaemonSetTemplate, templates->daemon_set, Values());
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)["kind"], "DaemonSet");
  EXPECT_EQ((*ds)["metadata"]["labels"]["resource.nvidia.com/computeDomain"], "u1");
  EXPECT_EQ((*ds)["metadata"]["finalizers"], json::array({"resource.nvidia.com/computeDomain"}));
  const json& pod = (*ds)["spec"]["template"]["spec"];
  EXPECT_EQ(pod["nodeSelector"]["resource.nvidia.com/computeDomain"], "u1");
  EXPECT_EQ(pod["serviceAccountName"], "compute-domain-daemon-service-account");
  EXPECT_EQ(pod["resourceClaims"][0]["resourceClaimTemplateName"], "computedomain-daemon-u1");
  const json& container = pod["containers"][0];
  EXPECT_EQ(container["image"], "img:1");
  EXPECT_EQ(container["env"][0], json::parse(R"({"name": "LOG_VERBOSITY", "value": "2"})"));
  EXPECT_EQ(container["env"][1], json::parse(R"({"name": "MAX_NODES_PER_IMEX_DOMAIN", "value": "18"})"));
  EXPECT_EQ(container["startupProbe"]["failureThreshold"], 1200);

  auto daemon = RenderTemplate(kDaemonClaimTemplate, templates->daemon_claim, Values());
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  EXPECT_EQ((*daemon)["metadata"]["labels"]["resource.nvidia.com/computeDomainTarget"], "Daemon");
  EXPECT_EQ((*daemon)["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"],
            json::parse(R"({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainDaemonConfig",
                            "domainID": "u1"})"));

  auto workload = RenderTemplate(kWorkloadClaimTemplate, templates->workload_claim, Values());
  ASSERT_TRUE(workload.ok()) << workload.status();
  EXPECT_EQ((*workload)["metadata"]["labels"]["resource.nvidia.com/computeDomainTarget"], "Workload");
  EXPECT_EQ((*workload)["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"],
            "compute-domain-default-channel.nvidia.com");
  EXPECT_EQ((*workload)["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["allocationMode"], "Single");
}

TEST(ShippedTemplatesTest, MissingFolderNamesTheFlag) {
  auto templates = Templates::Load("/nonexistent-templates");
  ASSERT_FALSE(templates.ok());
  EXPECT_THAT(templates.status().message(), HasSubstr("--templates-dir"));
}

}  // namespace
}  // namespace nvdra::computedomain::controller
