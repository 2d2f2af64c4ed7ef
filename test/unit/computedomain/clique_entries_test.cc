// Clique entries and IMEX indexes as the single writer computes them.

#include "computedomain/controller/clique_entries.h"

#include <memory>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "computedomain/clique_membership.h"

namespace nvdra::computedomain::controller {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using json = nlohmann::json;

k8s::cache::ObjectPtr Pod(std::string name, std::string node, std::string clique, std::string created,
                          std::string ip = "10.0.0.1") {
  json pod = {{"metadata",
               {{"name", name},
                {"uid", "uid-" + name},
                {"creationTimestamp", created},
                {"labels", {{std::string(kComputeDomainCliqueLabel), clique}}},
                {"annotations", {{std::string(kDaemonStatusAnnotation), "Ready"}}}}},
              {"spec", {{"nodeName", node}}},
              {"status", {{"podIP", ip}}}};
  return std::make_shared<const json>(std::move(pod));
}

std::vector<std::string> Nodes(const json& daemons) {
  std::vector<std::string> out;
  for (const json& d : daemons) out.push_back(d["nodeName"]);
  return out;
}

TEST(MemberPodsByCliqueTest, OnlyScheduledLivePodsWithAnIpAndACliqueInCreationOrder) {
  auto deleting = std::make_shared<json>(*Pod("d", "n4", "c", "t0"));
  (*deleting)["metadata"]["deletionTimestamp"] = "t9";
  const std::vector<k8s::cache::ObjectPtr> pods = {
      Pod("b", "n2", "c", "t2"),         Pod("a", "n1", "c", "t1"),        Pod("nofabric", "n3", "", "t0"),
      Pod("unscheduled", "", "c", "t0"), Pod("noip", "n5", "c", "t0", ""), deleting,
      Pod("x", "n6", "other", "t3")};
  auto members = MemberPodsByClique(pods);
  ASSERT_EQ(members.size(), 2u);
  ASSERT_EQ(members["c"].size(), 2u);
  EXPECT_EQ((*members["c"][0])["metadata"]["name"], "a");
  EXPECT_EQ((*members["c"][1])["metadata"]["name"], "b");
  EXPECT_EQ(members["other"].size(), 1u);
}

TEST(ComputeCliqueEntriesTest, ListedNodesKeepTheirIndexNewcomersFillTheLowestGap) {
  const auto p1 = Pod("p1", "n1", "c", "t1", "10.0.0.11");
  const auto p3 = Pod("p3", "n3", "c", "t3");
  const auto p4 = Pod("p4", "n4", "c", "t4");
  const json clique = {{"daemons",
                        {{{"nodeName", "n1"}, {"ipAddress", "old"}, {"index", 1}},
                         {{"nodeName", "n2"}, {"ipAddress", "10.0.0.2"}, {"index", 0}}}}};
  CliqueEntries entries = ComputeCliqueEntries(clique, {p1.get(), p3.get(), p4.get()}, "c", 18);
  // n2's pod is gone: its entry goes and index 0 is free again.
  EXPECT_THAT(Nodes(entries.daemons), ElementsAre("n1", "n3", "n4"));
  EXPECT_EQ(entries.daemons[0], json::parse(R"({"nodeName": "n1", "ipAddress": "10.0.0.11", "cliqueID": "c",
                                                 "status": "Ready", "index": 1})"));
  EXPECT_EQ(entries.daemons[1]["index"], 0);
  EXPECT_EQ(entries.daemons[2]["index"], 2);
  EXPECT_THAT(entries.assignment.assigned, ElementsAre("n3", "n4"));
}

TEST(ComputeCliqueEntriesTest, BeyondMaxNodesANewcomerGetsNoIndex) {
  const auto p1 = Pod("p1", "n1", "c", "t1");
  const auto p2 = Pod("p2", "n2", "c", "t2");
  CliqueEntries entries = ComputeCliqueEntries(json(), {p1.get(), p2.get()}, "c", 1);
  EXPECT_EQ(entries.daemons[0]["index"], 0);
  EXPECT_FALSE(entries.daemons[1].contains("index"));
  EXPECT_THAT(entries.assignment.over_limit, ElementsAre("n2"));
}

// A pod whose daemon says NotReady, with or without a reason.
k8s::cache::ObjectPtr NotReadyPod(std::string name, std::string node, std::string reason, std::string message) {
  json pod = *Pod(std::move(name), std::move(node), "c", "t1");
  json& annotations = pod["metadata"]["annotations"];
  annotations[std::string(kDaemonStatusAnnotation)] = "NotReady";
  if (!reason.empty()) annotations[std::string(kDaemonStatusReasonAnnotation)] = reason;
  if (!message.empty()) annotations[std::string(kDaemonStatusMessageAnnotation)] = message;
  return std::make_shared<const json>(std::move(pod));
}

TEST(ComputeCliqueEntriesTest, ADaemonsReasonAndMessageGoIntoItsEntryOnlyWhileNotReady) {
  const auto sick = NotReadyPod("p1", "n1", "FabricUnhealthy", "NVLink fabric unhealthy: GPU-a");
  const auto starting = NotReadyPod("p2", "n2", "", "");
  auto leftover = std::make_shared<json>(*Pod("p3", "n3", "c", "t3"));  // Ready, stale reason annotation
  (*leftover)["metadata"]["annotations"][std::string(kDaemonStatusReasonAnnotation)] = "FabricUnhealthy";
  // The listed entry of n1 still says why it was NotReady before: recomputed from the pod.
  const json clique = {{"daemons", {{{"nodeName", "n1"}, {"ipAddress", "10.0.0.1"}, {"index", 0},
                                     {"status", "NotReady"}, {"reason", "Old"}, {"message", "old"}}}}};
  CliqueEntries entries = ComputeCliqueEntries(clique, {sick.get(), starting.get(), leftover.get()}, "c", 18);
  ASSERT_EQ(entries.daemons.size(), 3u);
  EXPECT_EQ(entries.daemons[0], json::parse(R"({"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c",
                                                 "status": "NotReady", "index": 0, "reason": "FabricUnhealthy",
                                                 "message": "NVLink fabric unhealthy: GPU-a"})"));
  EXPECT_FALSE(entries.daemons[1].contains("reason")) << entries.daemons[1];
  EXPECT_FALSE(entries.daemons[1].contains("message"));
  EXPECT_EQ(entries.daemons[2]["status"], "Ready");
  EXPECT_FALSE(entries.daemons[2].contains("reason")) << entries.daemons[2];
  // Read back as members (what the daemon and the status see).
  const std::vector<CliqueMember> members = CliqueMembers({{"daemons", entries.daemons}});
  EXPECT_EQ(members[0].reason, "FabricUnhealthy");
  EXPECT_EQ(members[0].message, "NVLink fabric unhealthy: GPU-a");
  EXPECT_EQ(members[1].reason, "");
}

TEST(CapStatusMessageTest, LongMessagesAreCutOnACharacterBoundary) {
  EXPECT_EQ(CapStatusMessage("short"), "short");
  std::string exact(kMaxStatusMessageBytes, 'x');
  EXPECT_EQ(CapStatusMessage(exact), exact);
  std::string utf8(kMaxStatusMessageBytes - 4, 'x');
  utf8 += "\xc3\xa9\xc3\xa9\xc3\xa9";  // é é é: the cut would split one
  const std::string capped = CapStatusMessage(utf8);
  EXPECT_LE(capped.size(), kMaxStatusMessageBytes);
  EXPECT_TRUE(capped.ends_with("x..."));
}

TEST(MergeOwnerReferencesTest, EveryMemberPodOnceEarlierOnesKept) {
  const auto p1 = Pod("p1", "n1", "c", "t1");
  const json clique = {{"metadata", {{"ownerReferences", {{{"kind", "Pod"}, {"name", "old"}, {"uid", "uid-old"}},
                                                           {{"kind", "Pod"}, {"name", "p1"}, {"uid", "uid-p1"}}}}}}};
  json owners = MergeOwnerReferences(clique, {p1.get()});
  ASSERT_EQ(owners.size(), 2u);
  const auto p2 = Pod("p2", "n2", "c", "t2");
  owners = MergeOwnerReferences(json(), {p2.get()});
  EXPECT_EQ(owners, json::parse(R"([{"apiVersion": "v1", "kind": "Pod", "name": "p2", "uid": "uid-p2"}])"));
}

TEST(ComputeStatusIndexesTest, PerCliqueAndOnlyChangedWhenSomeoneGotOne) {
  k8s::ComputeDomain cd = k8s::ComputeDomain::New("ns", "cd");
  cd.mutable_json()["status"]["nodes"] = json::parse(R"([
      {"name": "n1", "cliqueID": "a", "index": 0},
      {"name": "n2", "cliqueID": "b"},
      {"name": "n3", "cliqueID": ""}])");
  StatusIndexes indexes = ComputeStatusIndexes(cd, 18);
  EXPECT_TRUE(indexes.changed);
  EXPECT_EQ(indexes.entries, json::parse(R"([{"name": "n1", "index": 0}, {"name": "n2", "index": 0}])"));
  cd.mutable_json()["status"]["nodes"][1]["index"] = 0;
  EXPECT_FALSE(ComputeStatusIndexes(cd, 18).changed);
}

TEST(TakeUncachedWritesTest, OurCreatesNotYetCachedAreTakenAndGoneOnesForgotten) {
  const auto clique = [](const std::string& rv) { return json{{"metadata", {{"resourceVersion", rv}}}}; };
  std::map<std::string, json> written = {
      {"drv/u1.a", clique("10")},  // cached: not taken, kept
      {"drv/u1.b", clique("30")},  // created after everything the cache saw (25): taken
      {"drv/u1.c", clique("20")},  // the cache saw past it and does not hold it: gone, forgotten
      {"drv/u2.a", clique("40")},  // another domain: untouched
  };
  const auto taken = TakeUncachedWrites(written, "drv/u1.", {"drv/u1.a"}, 25);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken.at("b"), clique("30"));
  EXPECT_EQ(written.size(), 3u);
  EXPECT_FALSE(written.contains("drv/u1.c"));
  EXPECT_TRUE(written.contains("drv/u1.a"));
  EXPECT_TRUE(written.contains("drv/u2.a"));
}

TEST(FindDepartedEntriesTest, OnlyEntriesStillCarryingTheDepartedIpLastFirst) {
  const json cd = json::parse(R"({"status": {"nodes": [
      {"name": "n1", "ipAddress": "10.0.0.1"},
      {"name": "n2", "ipAddress": "10.0.0.22"},
      {"name": "n3", "ipAddress": "10.0.0.3"}]}})");
  DepartedEntries found = FindDepartedEntries(cd, "/status/nodes"_json_pointer, "name",
                                              {{"n1", "10.0.0.1"}, {"n2", "10.0.0.2"}, {"n3", "10.0.0.3"}});
  // n2 has a successor (another IP): kept.
  EXPECT_THAT(found.nodes, ElementsAre("n3", "n1"));
  ASSERT_EQ(found.patch.size(), 6u);
  EXPECT_EQ(found.patch[0], json::parse(R"({"op": "test", "path": "/status/nodes/2/name", "value": "n3"})"));
  EXPECT_EQ(found.patch[2], json::parse(R"({"op": "remove", "path": "/status/nodes/2"})"));
  EXPECT_THAT(FindDepartedEntries(json::object(), "/status/nodes"_json_pointer, "name", {{"n1", "x"}}).nodes,
              IsEmpty());
}

}  // namespace
}  // namespace nvdra::computedomain::controller
