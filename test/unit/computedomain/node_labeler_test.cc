// Early node labelling: which claim transition labels, which node, and when
// the controller declines.

#include "computedomain/controller/node_labeler.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace nvdra::computedomain::controller {
namespace {

using json = nlohmann::json;

json Claim() {
  return json::parse(R"({
    "metadata": {"namespace": "ns", "name": "c",
                 "labels": {"resource.nvidia.com/computeDomain": "u1",
                            "resource.nvidia.com/computeDomainTarget": "Workload"}},
    "status": {"allocation": {"nodeSelector": {"nodeSelectorTerms": [
                 {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]}},
               "reservedFor": [{"resource": "pods", "name": "w"}]}})");
}

TEST(AllocatedNodeNameTest, TheSingleNodeOfTheAllocationsSelector) {
  EXPECT_EQ(AllocatedNodeName(Claim()), "node-1");
  json two = Claim();
  two["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] = {"a", "b"};
  EXPECT_EQ(AllocatedNodeName(two), "");
  EXPECT_EQ(AllocatedNodeName(json::object()), "");
}

TEST(IsWorkloadClaimInUseTest, AllocatedReservedLiveWorkloadClaimsOnly) {
  EXPECT_TRUE(IsWorkloadClaimInUse(Claim()));
  json unreserved = Claim();
  unreserved["status"]["reservedFor"] = json::array();
  EXPECT_FALSE(IsWorkloadClaimInUse(unreserved));
  EXPECT_FALSE(ClaimHasConsumers(unreserved));
  json daemon = Claim();
  daemon["metadata"]["labels"]["resource.nvidia.com/computeDomainTarget"] = "Daemon";
  EXPECT_FALSE(IsWorkloadClaimInUse(daemon));
  json deleting = Claim();
  deleting["metadata"]["deletionTimestamp"] = "t";
  EXPECT_FALSE(IsWorkloadClaimInUse(deleting));
  json unallocated = Claim();
  unallocated["status"].erase("allocation");
  EXPECT_FALSE(IsWorkloadClaimInUse(unallocated));
}

TEST(DecideNodeLabelTest, LabelsAnUnlabelledNodeForAClaimOfTheDomainsNamespace) {
  EXPECT_EQ(DecideNodeLabel("ns", "ns", "u1", ""), NodeLabelDecision::kLabel);
  EXPECT_EQ(DecideNodeLabel("ns", "ns", "u1", "u1"), NodeLabelDecision::kAlreadyLabelled);
}

TEST(DecideNodeLabelTest, NeverTakesANodeOfAnotherDomainOrForAnotherNamespace) {
  EXPECT_EQ(DecideNodeLabel("ns", "ns", "u1", "u2"), NodeLabelDecision::kServesOtherDomain);
  EXPECT_EQ(DecideNodeLabel("other", "ns", "u1", ""), NodeLabelDecision::kOtherNamespace);
  EXPECT_EQ(DecideNodeLabel("other", "ns", "u1", "u1"), NodeLabelDecision::kOtherNamespace);
}

}  // namespace
}  // namespace nvdra::computedomain::controller
