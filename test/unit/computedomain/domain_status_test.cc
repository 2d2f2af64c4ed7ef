// The domain's status from its cliques and daemon pods, and the memory of
// the controller's own status writes.

#include "computedomain/controller/domain_status.h"

#include <chrono>
#include <memory>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "computedomain/clique_membership.h"

namespace nvdra::computedomain::controller {
namespace {

using json = nlohmann::json;

k8s::ComputeDomain Domain(std::int64_t num_nodes) {
  k8s::ComputeDomain cd = k8s::ComputeDomain::New("ns", "cd");
  cd.set_num_nodes(num_nodes);
  return cd;
}

// A vector, not a json: `{Daemon(...)}` as a json is a one-element array to
// g++ but the daemon itself to clang (the sanitized trees' compiler).
k8s::ComputeDomainClique Clique(std::vector<json> daemons) {
  k8s::ComputeDomainClique clique = k8s::ComputeDomainClique::New("drv", "u1.c");
  clique.mutable_json()["daemons"] = json(std::move(daemons));
  return clique;
}

json Daemon(std::string node, std::string status, int index) {
  return {{"nodeName", node}, {"ipAddress", "10.0.0.1"}, {"cliqueID", "c"}, {"status", status}, {"index", index}};
}

// A daemon pod on a node without a fabric: clique label present and empty.
k8s::cache::ObjectPtr FabriclessPod(std::string node, bool ready) {
  json pod = {{"metadata", {{"name", "p-" + node}, {"labels", {{std::string(kComputeDomainCliqueLabel), ""}}}}},
              {"spec", {{"nodeName", node}}},
              {"status", {{"podIP", "10.0.0.9"},
                          {"conditions", {{{"type", "Ready"}, {"status", ready ? "True" : "False"}}}}}}};
  return std::make_shared<const json>(std::move(pod));
}

TEST(ComputeDomainStatusTest, ReadyWhenNumNodesDaemonsJoinedAndAllAreReady) {
  const ControllerOptions options;
  auto report = ComputeDomainStatus(Domain(2), {Clique({Daemon("n2", "Ready", 1), Daemon("n1", "Ready", 0)})}, {},
                                    options);
  EXPECT_EQ(report.status, "Ready");
  EXPECT_EQ(report.Category(), "Ready");
  ASSERT_EQ(report.nodes.size(), 2u);
  EXPECT_EQ(report.nodes[0]["name"], "n1");  // sorted by name
  EXPECT_EQ(report.nodes[0]["index"], 0);
}

// This node's daemon pod in clique "c" at 10.0.0.1 (the entries' address),
// with the status its daemon published on it.
k8s::cache::ObjectPtr CliquePod(std::string node, std::string status, std::string ip = "10.0.0.1",
                                bool deleting = false) {
  json pod = {{"metadata",
               {{"name", "p-" + node},
                {"labels", {{std::string(kComputeDomainCliqueLabel), "c"}}},
                {"annotations", {{std::string(kDaemonStatusAnnotation), status}}}}},
              {"spec", {{"nodeName", node}}},
              {"status", {{"podIP", ip}}}};
  if (deleting) pod["metadata"]["deletionTimestamp"] = "2026-11-28T00:00:00Z";
  return std::make_shared<const json>(std::move(pod));
}

TEST(ComputeDomainStatusTest, ADaemonPodThatSaysReadyCountsBeforeItsCliqueEntryDoes) {
  const ControllerOptions options;
  const auto clique = Clique({Daemon("n1", "Ready", 0), Daemon("n2", "NotReady", 1)});
  auto report = ComputeDomainStatus(Domain(2), {clique}, {CliquePod("n2", "Ready")}, options);
  EXPECT_EQ(report.status, "Ready") << report.why;
  EXPECT_EQ(report.nodes[1]["status"], "Ready");
  // Not another daemon's pod: another address (a new pod, not yet in the
  // entry), or one that is going away, or one that says NotReady.
  for (const auto& pod : {CliquePod("n2", "Ready", "10.0.0.7"), CliquePod("n2", "Ready", "10.0.0.1", true),
                          CliquePod("n2", "NotReady")}) {
    report = ComputeDomainStatus(Domain(2), {clique}, {pod}, options);
    EXPECT_EQ(report.status, "NotReady") << pod->dump();
    EXPECT_EQ(report.why, "IMEX daemons not ready on: n2");
  }
}

TEST(ComputeDomainStatusTest, WaitingForNodesWhileFewerThanNumNodesJoined) {
  const ControllerOptions options;
  auto report = ComputeDomainStatus(Domain(3), {Clique({Daemon("n1", "Ready", 0)})}, {}, options);
  EXPECT_EQ(report.status, "NotReady");
  EXPECT_EQ(report.Category(), "waiting for nodes");
  EXPECT_EQ(report.why, "waiting for nodes: 1 of 3 (spec.numNodes) IMEX daemons joined");
}

TEST(ComputeDomainStatusTest, NotReadyNamesTheNodesWhoseDaemonIsNot) {
  const ControllerOptions options;
  auto report = ComputeDomainStatus(Domain(2), {Clique({Daemon("n1", "Ready", 0), Daemon("n2", "NotReady", 1)})},
                                    {}, options);
  EXPECT_EQ(report.status, "NotReady");
  EXPECT_EQ(report.why, "IMEX daemons not ready on: n2");
}

TEST(ComputeDomainStatusTest, DaemonsWithoutAFabricAreListedFromTheirPodWithIndexMinusOne) {
  const ControllerOptions options;
  auto report = ComputeDomainStatus(Domain(2), {Clique({Daemon("n1", "Ready", 0)})},
                                    {FabriclessPod("n0", true)}, options);
  EXPECT_EQ(report.status, "Ready");
  ASSERT_EQ(report.nodes.size(), 2u);
  EXPECT_EQ(report.nodes[0], json::parse(R"({"name": "n0", "ipAddress": "10.0.0.9", "cliqueID": "",
                                              "index": -1, "status": "Ready"})"));
}

TEST(ComputeDomainStatusTest, WithoutCliquesTheDomainsOwnNodesCount) {
  ControllerOptions options;
  options.cliques_enabled = false;
  k8s::ComputeDomain cd = Domain(1);
  cd.mutable_json()["status"]["nodes"] = {{{"name", "n1"}, {"status", "NotReady"}}};
  auto report = ComputeDomainStatus(cd, {Clique({Daemon("n9", "Ready", 0)})}, {}, options);
  EXPECT_EQ(report.status, "NotReady");
  EXPECT_EQ(report.why, "IMEX daemons not ready on: n1");
}

TEST(ComputeDomainStatusTest, AnEntrysReasonAndMessageAreInStatusNodesAndTheWhy) {
  const ControllerOptions options;
  json sick = Daemon("n2", "NotReady", 1);
  sick["reason"] = "FabricUnhealthy";
  sick["message"] = "NVLink fabric unhealthy: GPU-b (healthSummary Unhealthy, healthMask 0x10: route unhealthy)";
  auto report = ComputeDomainStatus(Domain(0), {Clique({Daemon("n1", "Ready", 0), sick, Daemon("n3", "NotReady", 2)})},
                                    {}, options);
  EXPECT_EQ(report.status, "NotReady");
  ASSERT_EQ(report.nodes.size(), 3u);
  EXPECT_EQ(report.nodes[1]["reason"], "FabricUnhealthy");
  EXPECT_EQ(report.nodes[1]["message"], sick["message"]);
  EXPECT_FALSE(report.nodes[0].contains("reason")) << "a Ready entry has none";
  EXPECT_FALSE(report.nodes[2].contains("reason")) << "old entries without the field stay without it";
  EXPECT_EQ(report.why,
            "IMEX daemons not ready on: n2 (NVLink fabric unhealthy: GPU-b (healthSummary Unhealthy, healthMask 0x10: "
            "route unhealthy)), n3");
  EXPECT_EQ(report.Category(), "IMEX daemons not ready on");
}

TEST(ComputeDomainStatusTest, HostManagedIsAlwaysReady) {
  ControllerOptions options;
  options.host_managed = true;
  auto report = ComputeDomainStatus(Domain(4), {}, {}, options);
  EXPECT_EQ(report.status, "Ready");
  EXPECT_TRUE(report.nodes.empty());
}

TEST(StatusWriteMemoTest, OurWriteNotYetInTheCacheIsNotRepeated) {
  StatusWriteMemo memo;
  const json body = {{"status", {{"status", "Ready"}}}};
  EXPECT_FALSE(memo.AlreadyWritten("u1", "10", body));
  memo.Remember("u1", "10", "12", body);
  EXPECT_TRUE(memo.AlreadyWritten("u1", "10", body));   // cache still at the base
  EXPECT_TRUE(memo.AlreadyWritten("u1", "11", body));   // another writer's change in between
  EXPECT_FALSE(memo.AlreadyWritten("u1", "12", body));  // the cache has our write: compare anew
  EXPECT_FALSE(memo.AlreadyWritten("u1", "10", json{{"status", {{"status", "NotReady"}}}}));
  EXPECT_FALSE(memo.AlreadyWritten("u2", "10", body));
  memo.Forget("u1");
  EXPECT_FALSE(memo.AlreadyWritten("u1", "10", body));
}

TEST(StatusWriteMemoTest, VersionsThatAreNotNumbersAreWrittenAgain) {
  StatusWriteMemo memo;
  const json body = {{"status", {{"status", "Ready"}}}};
  memo.Remember("u1", "a", "c", body);
  EXPECT_TRUE(memo.AlreadyWritten("u1", "a", body));
  EXPECT_FALSE(memo.AlreadyWritten("u1", "b", body));
}

TEST(NodesWritePacerTest, AFirstWriteGoesAtOnceAndTheNextWaitsOutTheInterval) {
  using namespace std::chrono_literals;
  NodesWritePacer pacer(1000ms);
  const auto t0 = NodesWritePacer::Clock::time_point() + 100s;
  EXPECT_EQ(pacer.Wait("u1", t0), 0ms);
  pacer.Wrote("u1", t0);
  EXPECT_EQ(pacer.Wait("u1", t0), 1000ms);
  EXPECT_EQ(pacer.Wait("u1", t0 + 250ms), 750ms);
  EXPECT_EQ(pacer.Wait("u1", t0 + 999'500us), 1ms) << "rounded up: never a busy loop of zero waits";
  EXPECT_EQ(pacer.Wait("u1", t0 + 1000ms), 0ms);
  EXPECT_EQ(pacer.Wait("u2", t0), 0ms) << "each domain is paced on its own";
  pacer.Forget("u1");
  EXPECT_EQ(pacer.Wait("u1", t0 + 1ms), 0ms);
}

}  // namespace
}  // namespace nvdra::computedomain::controller
