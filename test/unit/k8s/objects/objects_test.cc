// Typed objects: unknown fields survive a read-modify-write at every level,
// missing fields read as defaults, and malformed input is a Status.

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "k8s/objects/compute_domain.h"

namespace nvdra::k8s {
namespace {

using nlohmann::json;

// A ComputeDomain as a newer server might send it: unknown fields at the top,
// in metadata, in spec, in spec.channel and inside status.nodes[].
constexpr char kDomainFromServer[] = R"({
  "apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain", "futureTop": {"a": [1, 2.5, null]},
  "metadata": {"name": "cd", "namespace": "ns", "uid": "u1", "resourceVersion": "42", "generation": 3,
               "labels": {"x": "y"}, "futureMeta": "m", "managedFields": [{"manager": "k"}]},
  "spec": {"numNodes": 2, "futureSpec": {"deep": true},
           "channel": {"resourceClaimTemplate": {"name": "rct"}, "futureChannel": "c"}},
  "status": {"status": "NotReady", "futureStatus": 1,
             "nodes": [{"name": "n1", "ipAddress": "10.0.0.1", "index": 0, "futureNode": [3]},
                       {"name": "n2", "cliqueID": "c.1"}]}
})";

TEST(ObjectsTest, ComputeDomainKeepsUnknownFieldsAtEveryLevelThroughSetters) {
  const json original = json::parse(kDomainFromServer);
  auto cd = FromJson<ComputeDomain>(original);
  ASSERT_TRUE(cd.ok()) << cd.status();
  EXPECT_EQ(cd->Key(), "ns/cd");
  EXPECT_EQ(cd->generation(), 3);
  ASSERT_EQ(cd->nodes().size(), 2u);

  cd->set_num_nodes(3);
  cd->SetLabel("new", "label");
  auto nodes = cd->nodes();
  nodes[0].set_status("Ready");
  ComputeDomainNode added;
  added.set_name("n3");
  nodes.push_back(added);
  cd->set_nodes(nodes);

  json expected = original;
  expected["spec"]["numNodes"] = 3;
  expected["metadata"]["labels"]["new"] = "label";
  expected["status"]["nodes"][0]["status"] = "Ready";
  expected["status"]["nodes"].push_back({{"name", "n3"}});
  EXPECT_EQ(cd->json(), expected);
  // Byte for byte: nlohmann keeps object keys sorted, so equal json dumps
  // equal text, and every unknown field is still there with its value.
  EXPECT_EQ(cd->json().dump(), expected.dump());
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
  auto cd = FromJson<ComputeDomain>(json::object());
  ASSERT_TRUE(cd.ok()) << cd.status();
  EXPECT_EQ(cd->name(), "");
  EXPECT_EQ(cd->num_nodes(), 0);
  EXPECT_TRUE(cd->nodes().empty());
  EXPECT_TRUE(cd->labels().empty());
  EXPECT_FALSE(cd->deletion_timestamp().has_value());
  EXPECT_FALSE(cd->imex_channel_id().has_value());
  EXPECT_EQ(cd->status_as_written(), "");
  EXPECT_EQ(cd->generation(), 0);
  ComputeDomainClique clique;
  EXPECT_TRUE(clique.daemons().empty());
  ComputeDomainNode cd_node;
  EXPECT_EQ(cd_node.index(), -1);
  // Our optional reason/message: absent in upstream's and old objects.
  EXPECT_EQ(cd_node.reason(), "");
  EXPECT_EQ(cd_node.message(), "");
  cd_node.set_reason("FabricUnhealthy");
  cd_node.set_message("NVLink fabric unhealthy: GPU-1");
  EXPECT_EQ(cd_node.json()["reason"], "FabricUnhealthy");
  EXPECT_EQ(cd_node.message(), "NVLink fabric unhealthy: GPU-1");

  // Wrong types that slipped in through mutable_json still read as defaults.
  ComputeDomain broken = ComputeDomain::New("ns", "cd");
  broken.mutable_json()["spec"] = "not an object";
  broken.mutable_json()["status"] = {{"nodes", nullptr}, {"imexChannelID", "7"}};
  EXPECT_EQ(broken.num_nodes(), 0);
  EXPECT_TRUE(broken.nodes().empty());
  EXPECT_FALSE(broken.imex_channel_id().has_value());
  broken.set_num_nodes(2);  // setters repair the path
  EXPECT_EQ(broken.num_nodes(), 2);
}

TEST(ObjectsTest, MalformedInputIsAnInvalidArgumentStatusNamingTheField) {
  auto not_object = FromJson<ComputeDomain>(json("a string"));
  ASSERT_FALSE(not_object.ok());
  EXPECT_EQ(not_object.status().code(), common::StatusCode::kInvalidArgument);

  auto bad_metadata = FromJson<ComputeDomain>(json{{"metadata", "oops"}});
  ASSERT_FALSE(bad_metadata.ok());
  EXPECT_NE(bad_metadata.status().message().find("metadata: expected object, got string"), std::string::npos)
      << bad_metadata.status();

  json cd = json::parse(kDomainFromServer);
  cd["status"]["nodes"][1] = "n2";
  auto bad_node = FromJson<ComputeDomain>(cd);
  ASSERT_FALSE(bad_node.ok());
  EXPECT_NE(bad_node.status().message().find("ComputeDomain cd"), std::string::npos);
  EXPECT_NE(bad_node.status().message().find("status.nodes[1]: expected object"), std::string::npos)
      << bad_node.status();

  cd = json::parse(kDomainFromServer);
  cd["status"]["nodes"][0]["index"] = "0";
  EXPECT_FALSE(FromJson<ComputeDomain>(cd).ok());

  json clique = {{"daemons", json::array({{{"nodeName", "n1"}, {"index", 1.5}}})}};
  auto bad_daemon = FromJson<ComputeDomainClique>(clique);
  ASSERT_FALSE(bad_daemon.ok());
  EXPECT_NE(bad_daemon.status().message().find("daemons[0].index"), std::string::npos) << bad_daemon.status();

  EXPECT_FALSE(FromJson<ComputeDomain>(json{{"metadata", {{"labels", {{"a", 1}}}}}}).ok());
  EXPECT_FALSE(FromJson<ComputeDomain>(json{{"spec", {{"numNodes", "two"}}}}).ok());
  EXPECT_FALSE(ParseJson<ComputeDomainClique>("{not json").ok());
  auto good = ParseJson<ComputeDomainClique>(R"({"metadata": {"name": "u.c"}, "daemons": []})");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE(good->daemons().empty());
}

TEST(ObjectsTest, NewObjectsCarryApiVersionKindAndTheirResource) {
  EXPECT_EQ(ComputeDomain::New("ns", "cd").json(),
            json({{"apiVersion", "resource.nvidia.com/v1beta1"},
                  {"kind", "ComputeDomain"},
                  {"metadata", {{"name", "cd"}, {"namespace", "ns"}}}}));
  EXPECT_EQ(ComputeDomain::Resource().Name(), "computedomains.resource.nvidia.com");
  EXPECT_EQ(ComputeDomainClique::New("ns", "u.c").kind(), "ComputeDomainClique");
  auto cd = ComputeDomain::New("ns", "cd");
  cd.set_resource_version("7");
  cd.set_resource_version("");
  EXPECT_FALSE(cd.json()["metadata"].contains("resourceVersion"));
}

}  // namespace
}  // namespace nvdra::k8s
