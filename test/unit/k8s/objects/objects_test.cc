// Typed objects: unknown fields survive a read-modify-write at every level,
// missing fields read as defaults, and malformed input is a Status.

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "k8s/objects/compute_domain.h"
#include "k8s/objects/core.h"
#include "k8s/objects/resource.h"

namespace nvdra::k8s {
namespace {

using nlohmann::json;

// A ResourceSlice as a newer server might send it: unknown fields at the top,
// in metadata, in spec, in spec.pool and inside devices[].
constexpr char kSliceFromServer[] = R"({
  "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "futureTop": {"a": [1, 2.5, null]},
  "metadata": {"name": "node-a-gpu", "uid": "u1", "resourceVersion": "42", "generation": 3,
               "labels": {"x": "y"}, "futureMeta": "m", "managedFields": [{"manager": "k"}],
               "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "n1", "futureRef": 7}]},
  "spec": {"driver": "gpu.nvidia.com", "nodeName": "node-a", "futureSpec": {"deep": true},
           "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1, "futurePool": "p"},
           "devices": [{"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-0"}}, "futureDevice": [3]},
                       {"name": "gpu-1", "bindingConditions": ["c"]}]}
})";

TEST(ObjectsTest, ResourceSliceKeepsUnknownFieldsAtEveryLevelThroughSetters) {
  const json original = json::parse(kSliceFromServer);
  auto slice = FromJson<ResourceSlice>(original);
  ASSERT_TRUE(slice.ok()) << slice.status();
  EXPECT_EQ(slice->name(), "node-a-gpu");
  EXPECT_EQ(slice->driver(), "gpu.nvidia.com");
  EXPECT_EQ(slice->pool_name(), "node-a");
  EXPECT_EQ(slice->node_name(), "node-a");
  EXPECT_EQ(slice->generation(), 3);
  ASSERT_EQ(slice->devices().size(), 2u);

  slice->set_pool_generation(2);
  slice->SetLabel("new", "label");
  auto devices = slice->devices();
  devices[0].set_capacity({{"memory", {{"value", "80Gi"}}}});
  devices.push_back(Device::New("gpu-2"));
  slice->set_devices(devices);
  auto owners = slice->owner_references();
  owners[0].set_block_owner_deletion(true);
  slice->set_owner_references(owners);

  json expected = original;
  expected["spec"]["pool"]["generation"] = 2;
  expected["metadata"]["labels"]["new"] = "label";
  expected["spec"]["devices"][0]["capacity"] = {{"memory", {{"value", "80Gi"}}}};
  expected["spec"]["devices"].push_back({{"name", "gpu-2"}});
  expected["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = true;
  EXPECT_EQ(slice->json(), expected);
  // Byte for byte: nlohmann keeps object keys sorted, so equal json dumps
  // equal text, and every unknown field is still there with its value.
  EXPECT_EQ(slice->json().dump(), expected.dump());
}

TEST(ObjectsTest, ResourceClaimResultsAndReservedForKeepUnknownFields) {
  json original = {
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceClaim"},
      {"metadata", {{"name", "c"}, {"namespace", "ns"}}},
      {"spec", {{"devices", {{"requests", json::array({{{"name", "gpu"}}})}}}}},
      {"status",
       {{"futureStatus", 1},
        {"allocation",
         {{"devices",
           {{"results", json::array({{{"request", "gpu"}, {"driver", "gpu.nvidia.com"}, {"pool", "p"},
                                      {"device", "gpu-0"}, {"futureResult", {{"k", "v"}}}}})},
            {"config", json::array()}}},
          {"futureAllocation", "a"}}},
        {"reservedFor", json::array({{{"resource", "pods"}, {"name", "p1"}, {"uid", "u"}, {"futureRef", 1}}})}}}};
  auto claim = FromJson<ResourceClaim>(original);
  ASSERT_TRUE(claim.ok()) << claim.status();
  ASSERT_TRUE(claim->allocated());
  ASSERT_EQ(claim->results().size(), 1u);
  EXPECT_EQ(claim->results()[0].device(), "gpu-0");
  EXPECT_EQ(claim->Key(), "ns/c");

  auto reserved = claim->reserved_for();
  reserved.push_back(ResourceClaimConsumerReference::New("pods", "p2", "u2"));
  claim->set_reserved_for(reserved);
  claim->set_results(claim->results());  // written back unchanged

  json expected = original;
  expected["status"]["reservedFor"].push_back({{"resource", "pods"}, {"name", "p2"}, {"uid", "u2"}});
  EXPECT_EQ(claim->json().dump(), expected.dump());
}

TEST(ObjectsTest, ComputeDomainAndCliqueFieldsAndUnknownFields) {
  json cd_json = {{"apiVersion", "resource.nvidia.com/v1beta1"},
                  {"kind", "ComputeDomain"},
                  {"metadata", {{"name", "cd"}, {"namespace", "ns"}, {"finalizers", {"f1"}}}},
                  {"spec", {{"numNodes", 2}, {"channel", {{"resourceClaimTemplate", {{"name", "rct"}}}, {"x", 1}}}}},
                  {"status", {{"nodes", json::array({{{"name", "n1"}, {"index", 0}, {"future", true}}})}}}};
  auto cd = FromJson<ComputeDomain>(cd_json);
  ASSERT_TRUE(cd.ok()) << cd.status();
  EXPECT_EQ(cd->num_nodes(), 2);
  EXPECT_EQ(cd->channel_resource_claim_template_name(), "rct");
  EXPECT_EQ(cd->channel_allocation_mode(), "Single");  // CRD default
  EXPECT_EQ(cd->status(), "NotReady");                 // CRD default
  auto nodes = cd->nodes();
  ASSERT_EQ(nodes.size(), 1u);
  nodes[0].set_status("Ready");
  cd->set_nodes(nodes);
  cd->set_status("Ready");
  EXPECT_TRUE(cd->AddFinalizer("f2"));
  EXPECT_FALSE(cd->AddFinalizer("f2"));
  EXPECT_TRUE(cd->RemoveFinalizer("f1"));
  EXPECT_EQ(cd->json()["status"]["nodes"][0]["future"], true);
  EXPECT_EQ(cd->json()["spec"]["channel"]["x"], 1);
  EXPECT_EQ(cd->finalizers(), std::vector<std::string>{"f2"});

  auto clique = ComputeDomainClique::New("driver-ns", "uid.clique");
  CliqueDaemon daemon;
  daemon.set_node_name("n1");
  daemon.set_index(3);
  clique.set_daemons({daemon});
  auto round = FromJson<ComputeDomainClique>(clique.json());
  ASSERT_TRUE(round.ok()) << round.status();
  EXPECT_EQ(round->daemons()[0].index(), 3);
  EXPECT_EQ(round->daemons()[0].status(), "");
  EXPECT_EQ(ComputeDomainClique::Resource().Path("driver-ns", "uid.clique"),
            "/apis/resource.nvidia.com/v1beta1/namespaces/driver-ns/computedomaincliques/uid.clique");
}

TEST(ObjectsTest, MissingFieldsReadAsDefaultsWithoutThrowing) {
  auto pod = FromJson<Pod>(json::object());
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->name(), "");
  EXPECT_EQ(pod->node_name(), "");
  EXPECT_TRUE(pod->resource_claims().empty());
  EXPECT_TRUE(pod->labels().empty());
  EXPECT_FALSE(pod->deletion_timestamp().has_value());
  EXPECT_EQ(pod->generation(), 0);

  Node node;
  EXPECT_TRUE(node.taints().empty());
  EXPECT_EQ(node.Address("InternalIP"), "");
  ResourceClaim claim;
  EXPECT_FALSE(claim.allocated());
  EXPECT_TRUE(claim.results().empty());
  EXPECT_TRUE(claim.allocation_config().is_array());
  Lease lease;
  EXPECT_EQ(lease.holder_identity(), "");
  EXPECT_EQ(lease.lease_duration_seconds(), 0);
  ComputeDomainNode cd_node;
  EXPECT_EQ(cd_node.index(), -1);

  // Wrong types that slipped in through mutable_json still read as defaults.
  Pod broken = Pod::New("ns", "p");
  broken.mutable_json()["spec"] = "not an object";
  EXPECT_EQ(broken.node_name(), "");
  broken.set_node_name("n1");  // setters repair the path
  EXPECT_EQ(broken.node_name(), "n1");
}

TEST(ObjectsTest, MalformedInputIsAnInvalidArgumentStatusNamingTheField) {
  auto not_object = FromJson<Node>(json("a string"));
  ASSERT_FALSE(not_object.ok());
  EXPECT_EQ(not_object.status().code(), common::StatusCode::kInvalidArgument);

  auto bad_metadata = FromJson<Node>(json{{"metadata", "oops"}});
  ASSERT_FALSE(bad_metadata.ok());
  EXPECT_NE(bad_metadata.status().message().find("metadata: expected object, got string"), std::string::npos)
      << bad_metadata.status();

  json slice = json::parse(kSliceFromServer);
  slice["spec"]["devices"][1] = "gpu-1";
  auto bad_device = FromJson<ResourceSlice>(slice);
  ASSERT_FALSE(bad_device.ok());
  EXPECT_NE(bad_device.status().message().find("ResourceSlice node-a-gpu"), std::string::npos);
  EXPECT_NE(bad_device.status().message().find("spec.devices[1]: expected object"), std::string::npos)
      << bad_device.status();

  slice = json::parse(kSliceFromServer);
  slice["spec"]["devices"][0]["attributes"] = json::array();
  EXPECT_FALSE(FromJson<ResourceSlice>(slice).ok());

  json claim = {{"status", {{"allocation", {{"devices", {{"results", json::array({1})}}}}}}}};
  auto bad_result = FromJson<ResourceClaim>(claim);
  ASSERT_FALSE(bad_result.ok());
  EXPECT_NE(bad_result.status().message().find("status.allocation.devices.results[0]"), std::string::npos)
      << bad_result.status();

  EXPECT_FALSE(FromJson<Pod>(json{{"metadata", {{"labels", {{"a", 1}}}}}}).ok());
  EXPECT_FALSE(FromJson<ComputeDomain>(json{{"spec", {{"numNodes", "two"}}}}).ok());
  EXPECT_FALSE(FromJson<Lease>(json{{"spec", {{"leaseDurationSeconds", 1.5}}}}).ok());
  EXPECT_FALSE(ParseJson<Event>("{not json").ok());
  EXPECT_FALSE(ParseJson<DeviceClass>(R"({"spec": {"selectors": "x"}})").ok());
  auto good = ParseJson<DeviceClass>(R"({"metadata": {"name": "gpu.nvidia.com"}, "spec": {"selectors": []}})");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE(good->selectors().empty());
}

TEST(ObjectsTest, NewObjectsCarryApiVersionKindAndTheirResource) {
  EXPECT_EQ(Lease::New("kube-system", "l").json(),
            json({{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", "l"}, {"namespace", "kube-system"}}}}));
  EXPECT_EQ(ComputeDomain::Resource().Name(), "computedomains.resource.nvidia.com");
  EXPECT_EQ(ResourceClaimTemplate::Resource().resource, "resourceclaimtemplates");
  EXPECT_EQ(DaemonSet::New("ns", "d").api_version(), "apps/v1");
  Event event = Event::New("ns", "e");
  event.set_series(2, "2026-01-01T00:00:00.000000Z");
  EXPECT_EQ(event.series_count(), 2);
  auto node = Node::New("n");
  node.set_resource_version("7");
  node.set_resource_version("");
  EXPECT_FALSE(node.json()["metadata"].contains("resourceVersion"));
}

}  // namespace
}  // namespace nvdra::k8s
