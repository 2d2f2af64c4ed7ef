// Clean-up decisions: which daemon objects a teardown removes, in which
// order, and which cached objects are stale.

#include "computedomain/controller/cleanup.h"

#include <memory>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace nvdra::computedomain::controller {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using json = nlohmann::json;

json DaemonSet(std::string ns, std::string name, std::vector<std::string> templates) {
  json claims = json::array();
  for (const std::string& t : templates) claims.push_back({{"name", "c"}, {"resourceClaimTemplateName", t}});
  claims.push_back({{"name", "direct"}, {"resourceClaimName", "x"}});
  return {{"metadata", {{"namespace", ns}, {"name", name}}},
          {"spec", {{"template", {{"spec", {{"resourceClaims", claims}}}}}}}};
}

TEST(ClaimTemplatesOfTest, TheTemplatesItsPodsAreMadeFrom) {
  EXPECT_THAT(ClaimTemplatesOf(DaemonSet("old", "ds", {"t1", "t2"})), ElementsAre("t1", "t2"));
  EXPECT_THAT(ClaimTemplatesOf(json::object()), IsEmpty());
}

TEST(PlanDaemonObjectsTest, OursFirstThenEachDaemonSetElsewhereWithItsTemplates) {
  const auto& ds = k8s::resources::kDaemonSets;
  const auto& rct = k8s::resources::kResourceClaimTemplates;
  auto plan = PlanDaemonObjects("u1", "drv", {std::make_shared<const json>(DaemonSet("old", "legacy", {"legacy-claim"}))});
  EXPECT_THAT(plan, ElementsAre(OwnedObjectName{&ds, "drv", "computedomain-daemon-u1"},
                                OwnedObjectName{&rct, "drv", "computedomain-daemon-u1"},
                                OwnedObjectName{&ds, "old", "legacy"},
                                OwnedObjectName{&rct, "old", "legacy-claim"}));
  EXPECT_EQ(PlanDaemonObjects("u1", "drv", {}).size(), 2u);
}

TEST(StaleDomainOfTest, ObjectsOfDomainsNotLiveAreStale) {
  const json of_u1 = {{"metadata", {{"labels", {{"resource.nvidia.com/computeDomain", "u1"}}}}}};
  EXPECT_EQ(StaleDomainOf(of_u1, {"u2"}), "u1");
  EXPECT_EQ(StaleDomainOf(of_u1, {"u1"}), "");
  EXPECT_EQ(StaleDomainOf(json::object(), {}), "");  // not labelled for any domain
}

}  // namespace
}  // namespace nvdra::computedomain::controller
