// Proves the test control plane is a real cluster: the real kube-scheduler
// allocates devices from ResourceSlices (including partitions that draw on
// shared counters) and binds the Pod, and reports why a claim cannot fit.

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "test_cluster.h"

namespace nvdra::testing {
namespace {

using nlohmann::json;

constexpr char kDriver[] = "test.example.com";
constexpr char kNamespace[] = "dra-scheduling";

json NodeObject(const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata", {{"name", name}, {"labels", {{"kubernetes.io/hostname", name}}}}},
          {"status",
           {{"capacity", {{"cpu", "8"}, {"memory", "32Gi"}, {"pods", "110"}}},
            {"allocatable", {{"cpu", "8"}, {"memory", "32Gi"}, {"pods", "110"}}}}}};
}

// One pool per node in two slices: since 1.35 a slice holds devices or
// shared counters, not both. gpu-0 is a whole device; gpu-1-part-0 and
// gpu-1-part-1 are partitions of gpu-1 that each need 5Gi of its 8Gi, so only
// one of them can be allocated at a time.
json CounterSlice(const std::string& node) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceSlice"},
          {"metadata", {{"name", node + "-counters"}}},
          {"spec",
           {{"driver", kDriver},
            {"nodeName", node},
            {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 2}}},
            {"sharedCounters", json::array({{{"name", "gpu-1-counters"}, {"counters", {{"memory", {{"value", "8Gi"}}}}}}})}}}};
}

json Partition(const std::string& name) {
  return {{"name", name},
          {"attributes", {{"kind", {{"string", "partition"}}}}},
          {"capacity", {{"memory", {{"value", "5Gi"}}}}},
          {"consumesCounters",
           json::array({{{"counterSet", "gpu-1-counters"}, {"counters", {{"memory", {{"value", "5Gi"}}}}}}})}};
}

json DeviceSlice(const std::string& node) {
  json whole = {{"name", "gpu-0"},
                {"attributes", {{"kind", {{"string", "gpu"}}}}},
                {"capacity", {{"memory", {{"value", "8Gi"}}}}}};
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceSlice"},
          {"metadata", {{"name", node + "-devices"}}},
          {"spec",
           {{"driver", kDriver},
            {"nodeName", node},
            {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 2}}},
            {"devices", json::array({whole, Partition("gpu-1-part-0"), Partition("gpu-1-part-1")})}}}};
}

json Request(const std::string& name, const std::string& kind, int count) {
  std::string cel = "device.attributes[\"" + std::string(kDriver) + "\"].kind == \"" + kind + "\"";
  return {{"name", name},
          {"exactly",
           {{"deviceClassName", kDriver},
            {"count", count},
            {"selectors", json::array({{{"cel", {{"expression", cel}}}}})}}}};
}

json Claim(const std::string& name, json requests) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", {{"name", name}, {"namespace", kNamespace}}},
          {"spec", {{"devices", {{"requests", std::move(requests)}}}}}};
}

// A pod pinned to `node` that uses `claim`. No kubelet runs here, so the pod
// tolerates the taints that the node lifecycle controller puts on a node that
// never reports Ready.
json PodUsingClaim(const std::string& name, const std::string& claim, const std::string& node) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", kNamespace}}},
          {"spec",
           {{"nodeSelector", {{"kubernetes.io/hostname", node}}},
            {"tolerations", json::array({{{"operator", "Exists"}}})},
            {"resourceClaims", json::array({{{"name", "devices"}, {"resourceClaimName", claim}}})},
            {"containers", json::array({{{"name", "main"},
                                         {"image", "registry.invalid/workload:1"},
                                         {"resources", {{"claims", json::array({{{"name", "devices"}}})}}}}})}}}};
}

class DraSchedulingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string error;
    cluster_ = TestCluster::Start(&error).release();
    ASSERT_NE(cluster_, nullptr) << error;
    const json device_class = {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "DeviceClass"},
        {"metadata", {{"name", kDriver}}},
        {"spec",
         {{"selectors",
           json::array({{{"cel", {{"expression", "device.driver == \"" + std::string(kDriver) + "\""}}}}})}}}};
    const json ns = {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", kNamespace}}}};
    for (const json& object : {ns, device_class, NodeObject("node-a"), NodeObject("node-b"), CounterSlice("node-a"),
                               DeviceSlice("node-a"), CounterSlice("node-b"), DeviceSlice("node-b")}) {
      auto r = cluster_->Apply(object);
      ASSERT_TRUE(r.ok()) << object["kind"] << " " << object["metadata"]["name"] << ": " << r.err;
    }
  }

  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  static TestCluster* cluster_;
};

TestCluster* DraSchedulingTest::cluster_ = nullptr;

TEST_F(DraSchedulingTest, ServesDraApisAndReportsPinnedVersion) {
  auto version = cluster_->Kubectl({"version", "-o", "json"});
  ASSERT_TRUE(version.ok()) << version.err;
  EXPECT_EQ(json::parse(version.out)["serverVersion"]["gitVersion"], "v1.37.2");
  auto versions = cluster_->Kubectl({"api-versions"});
  ASSERT_TRUE(versions.ok()) << versions.err;
  EXPECT_NE(versions.out.find("resource.k8s.io/v1\n"), std::string::npos) << versions.out;
  EXPECT_NE(versions.out.find("resource.k8s.io/v1beta2\n"), std::string::npos) << versions.out;
}

TEST_F(DraSchedulingTest, SchedulerAllocatesWholeDeviceAndPartitionAndBindsPod) {
  ASSERT_TRUE(cluster_->Apply(Claim("claim-a", json::array({Request("whole", "gpu", 1), Request("part", "partition", 1)}))).ok());
  auto r = cluster_->Apply(PodUsingClaim("pod-a", "claim-a", "node-a"));
  ASSERT_TRUE(r.ok()) << r.err;

  // kubectl wait watches the pod: this returns as soon as the scheduler binds it.
  r = cluster_->Kubectl({"wait", "-n", kNamespace, "pod/pod-a", "--for=jsonpath={.spec.nodeName}=node-a", "--timeout=90s"});
  ASSERT_TRUE(r.ok()) << r.err << "\n" << cluster_->Kubectl({"describe", "-n", kNamespace, "pod/pod-a"}).out;

  auto claim = cluster_->Get({"-n", kNamespace, "resourceclaim/claim-a"});
  ASSERT_TRUE(claim.has_value());
  const json& results = (*claim)["status"]["allocation"]["devices"]["results"];
  ASSERT_EQ(results.size(), 2u) << claim->dump(2);
  std::set<std::string> devices;
  for (const json& result : results) {
    EXPECT_EQ(result["driver"], kDriver);
    EXPECT_EQ(result["pool"], "node-a");
    if (result["request"] == "whole") {
      EXPECT_EQ(result["device"], "gpu-0");
    } else {
      EXPECT_EQ(result["request"], "part");
      EXPECT_TRUE(result["device"] == "gpu-1-part-0" || result["device"] == "gpu-1-part-1") << result;
    }
    devices.insert(result["device"].get<std::string>());
  }
  EXPECT_EQ(devices.size(), 2u);

  auto pod = cluster_->Get({"-n", kNamespace, "pod/pod-a"});
  ASSERT_TRUE(pod.has_value());
  const json& reserved = (*claim)["status"]["reservedFor"];
  ASSERT_EQ(reserved.size(), 1u) << claim->dump(2);
  EXPECT_EQ(reserved[0]["name"], "pod-a");
  EXPECT_EQ(reserved[0]["uid"], (*pod)["metadata"]["uid"]);
}

TEST_F(DraSchedulingTest, ClaimBeyondSharedCountersStaysUnallocatedWithSchedulerReason) {
  // Two partitions of gpu-1 need 10Gi of its 8Gi counter: both devices exist
  // and are free on node-b, only the shared counters forbid the allocation.
  ASSERT_TRUE(cluster_->Apply(Claim("claim-b", json::array({Request("parts", "partition", 2)}))).ok());
  auto r = cluster_->Apply(PodUsingClaim("pod-b", "claim-b", "node-b"));
  ASSERT_TRUE(r.ok()) << r.err;

  r = cluster_->Kubectl({"wait", "-n", kNamespace, "pod/pod-b", "--for=condition=PodScheduled=false", "--timeout=90s"});
  ASSERT_TRUE(r.ok()) << r.err;

  auto pod = cluster_->Get({"-n", kNamespace, "pod/pod-b"});
  ASSERT_TRUE(pod.has_value());
  EXPECT_FALSE(pod->at("spec").contains("nodeName"));
  std::string message;
  for (const json& condition : (*pod)["status"]["conditions"]) {
    if (condition["type"] == "PodScheduled") {
      EXPECT_EQ(condition["reason"], "Unschedulable");
      message = condition.value("message", "");
    }
  }
  EXPECT_NE(message.find("cannot allocate all claims"), std::string::npos) << message;

  auto claim = cluster_->Get({"-n", kNamespace, "resourceclaim/claim-b"});
  ASSERT_TRUE(claim.has_value());
  EXPECT_FALSE(claim->contains("status") && (*claim)["status"].contains("allocation")) << claim->dump(2);
}

}  // namespace
}  // namespace nvdra::testing
