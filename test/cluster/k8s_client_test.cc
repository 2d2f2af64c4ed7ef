// Proves the C++ API client against a real kube-apiserver: CRUD of core and
// custom objects, paging, server-side apply ownership, conflicts retried,
// 429 from API Priority and Fairness honoured, in-cluster config with a real
// ServiceAccount token (and its rotation), client-certificate kubeconfig,
// watches (events, bookmarks, cancellation, HTTP/2 multiplexing) and 410
// Gone from an old resourceVersion.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "k8s/api_error.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/flow_control.h"
#include "cluster_client.h"
#include "test_cluster.h"

namespace nvdra::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using k8s::Client;
using k8s::resources::kConfigMaps;
namespace fs = std::filesystem;

constexpr char kNs[] = "client-test";

json ConfigMap(const std::string& name, json data = json::object()) {
  return {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", name}}}, {"data", std::move(data)}};
}

class K8sClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterClient started;
    ASSERT_EQ(StartClusterClient(started, kNs), "");
    cluster_ = started.cluster.release();
    config_ = new k8s::RestConfig(started.config);
    client_ = started.client.release();
  }
  static void TearDownTestSuite() {
    delete client_;
    delete config_;
    delete cluster_;
  }

  // A ServiceAccount in kNs allowed to read and write ConfigMaps there, and a
  // fresh token for it from the TokenRequest API.
  static std::string ServiceAccountToken(const std::string& name) {
    auto sa = client_->Create(k8s::resources::kServiceAccounts, kNs,
                              {{"apiVersion", "v1"}, {"kind", "ServiceAccount"}, {"metadata", {{"name", name}}}});
    EXPECT_TRUE(sa.ok() || k8s::IsAlreadyExists(sa.status())) << sa.status();
    const k8s::ResourceRef roles{"rbac.authorization.k8s.io", "v1", "roles", true};
    const k8s::ResourceRef bindings{"rbac.authorization.k8s.io", "v1", "rolebindings", true};
    k8s::PatchOptions apply;
    apply.field_manager = "client-test";
    auto role = client_->Apply(roles, kNs,
                               {{"apiVersion", "rbac.authorization.k8s.io/v1"}, {"kind", "Role"},
                                {"metadata", {{"name", "configmaps"}, {"namespace", kNs}}},
                                {"rules", json::array({{{"apiGroups", {""}}, {"resources", {"configmaps"}},
                                                        {"verbs", {"get", "list", "watch", "create", "update"}}}})}},
                               apply);
    EXPECT_TRUE(role.ok()) << role.status();
    auto binding = client_->Apply(
        bindings, kNs,
        {{"apiVersion", "rbac.authorization.k8s.io/v1"}, {"kind", "RoleBinding"},
         {"metadata", {{"name", "configmaps-" + name}, {"namespace", kNs}}},
         {"roleRef", {{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", "Role"}, {"name", "configmaps"}}},
         {"subjects", json::array({{{"kind", "ServiceAccount"}, {"name", name}, {"namespace", kNs}}})}},
        apply);
    EXPECT_TRUE(binding.ok()) << binding.status();
    k8s::WriteOptions token_request;
    token_request.subresource = "token";
    auto token = client_->Create(k8s::resources::kServiceAccounts, kNs,
                                 {{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenRequest"},
                                  {"metadata", {{"name", name}}}, {"spec", {{"expirationSeconds", 3600}}}},
                                 token_request);
    EXPECT_TRUE(token.ok()) << token.status();
    return token.ok() ? (*token)["status"]["token"].get<std::string>() : "";
  }

  // Creates a namespaced CRD `<plural>.example.com` (v1, status subresource,
  // unknown fields kept) and waits for Established through a watch on it.
  static void CreateCrd(const std::string& plural, const std::string& kind) {
    json crd = json::parse(R"({
      "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
      "spec": {"group": "example.com", "scope": "Namespaced",
        "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
          "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}})");
    const std::string name = plural + ".example.com";
    crd["metadata"]["name"] = name;
    crd["spec"]["names"] = {{"plural", plural}, {"kind", kind}};
    auto created = client_->Create(k8s::resources::kCustomResourceDefinitions, "", crd);
    ASSERT_TRUE(created.ok()) << created.status();
    k8s::WatchOptions w;
    w.field_selector = "metadata.name=" + name;
    w.timeout_seconds = 60;
    auto watch = client_->Watch(k8s::resources::kCustomResourceDefinitions, "", w);
    ASSERT_TRUE(watch.ok()) << watch.status();
    while (true) {
      auto e = (*watch)->Next();
      ASSERT_TRUE(e.ok() && e->has_value()) << e.status();
      for (const auto& c : (*e)->object["status"].value("conditions", json::array())) {
        if (c["type"] == "Established" && c["status"] == "True") return;
      }
    }
  }

  static std::string WhoAmI(Client& client) {
    k8s::RestRequest r;
    r.method = "POST";
    r.path = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
    r.body = R"({"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"})";
    r.content_type = "application/json";
    auto response = client.Do(r);
    if (!response.ok()) return "error: " + response.status().ToString();
    return json::parse(response->body)["status"]["userInfo"]["username"].get<std::string>();
  }

  static TestCluster* cluster_;
  static k8s::RestConfig* config_;
  static Client* client_;
};

TestCluster* K8sClientTest::cluster_ = nullptr;
k8s::RestConfig* K8sClientTest::config_ = nullptr;
Client* K8sClientTest::client_ = nullptr;

TEST_F(K8sClientTest, KubeconfigWithClientCertificatesAuthenticatesOverHttp2) {
  EXPECT_FALSE(config_->client_cert_pem.empty());
  EXPECT_FALSE(config_->ca_pem.empty());
  EXPECT_NE(WhoAmI(*client_).find("admin"), std::string::npos) << WhoAmI(*client_);
  k8s::RestRequest version;
  version.path = "/version";
  auto response = client_->Do(version);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->http_version, 2);
}

TEST_F(K8sClientTest, CoreObjectCrudAndTypedErrors) {
  auto created = client_->Create(kConfigMaps, kNs, ConfigMap("crud", {{"a", "1"}}));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(k8s::IsAlreadyExists(client_->Create(kConfigMaps, kNs, ConfigMap("crud")).status()));

  auto got = client_->Get(kConfigMaps, kNs, "crud");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)["data"]["a"], "1");

  json changed = *got;
  changed["data"]["b"] = "2";
  auto updated = client_->Update(kConfigMaps, kNs, changed);
  ASSERT_TRUE(updated.ok()) << updated.status();
  // The stale resourceVersion of `changed` is a conflict now.
  changed["data"]["c"] = "3";
  auto stale = client_->Update(kConfigMaps, kNs, changed);
  EXPECT_TRUE(k8s::IsConflict(stale.status())) << stale.status();
  ASSERT_TRUE(stale.api_error().has_value());
  EXPECT_EQ(stale.api_error()->reason, "Conflict");

  auto merged = client_->Patch(kConfigMaps, kNs, "crud", k8s::PatchType::kMerge, {{"data", {{"a", nullptr}}}});
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_FALSE((*merged)["data"].contains("a"));
  auto strategic = client_->Patch(kConfigMaps, kNs, "crud", k8s::PatchType::kStrategicMerge,
                                  {{"metadata", {{"labels", {{"l", "v"}}}}}});
  ASSERT_TRUE(strategic.ok()) << strategic.status();
  const std::string rv = (*strategic)["metadata"]["resourceVersion"];
  auto json_patch = client_->Patch(
      kConfigMaps, kNs, "crud", k8s::PatchType::kJson,
      json::array({{{"op", "test"}, {"path", "/metadata/resourceVersion"}, {"value", rv}},
                   {{"op", "add"}, {"path", "/data/d"}, {"value", "4"}}}));
  ASSERT_TRUE(json_patch.ok()) << json_patch.status();
  EXPECT_EQ((*json_patch)["data"]["d"], "4");

  auto invalid = client_->Create(kConfigMaps, kNs, ConfigMap("Bad_Name"));
  EXPECT_TRUE(k8s::IsInvalid(invalid.status())) << invalid.status();
  EXPECT_NE(invalid.status().message().find("metadata.name"), std::string::npos) << invalid.status();

  k8s::DeleteOptions wrong_uid;
  wrong_uid.precondition_uid = "00000000-0000-0000-0000-000000000000";
  EXPECT_TRUE(k8s::IsConflict(client_->Delete(kConfigMaps, kNs, "crud", wrong_uid).status()));
  k8s::DeleteOptions right;
  right.precondition_uid = (*json_patch)["metadata"]["uid"].get<std::string>();
  right.propagation_policy = "Background";
  right.grace_period_seconds = 0;
  ASSERT_TRUE(client_->Delete(kConfigMaps, kNs, "crud", right).ok());
  auto gone = client_->Get(kConfigMaps, kNs, "crud");
  EXPECT_TRUE(k8s::IsNotFound(gone.status())) << gone.status();
  EXPECT_TRUE(k8s::IsNotFound(client_->Delete(kConfigMaps, kNs, "crud").status()));
}

TEST_F(K8sClientTest, CustomResourceCrudKeepsUnknownFieldsAndStatusSubresource) {
  CreateCrd("widgets", "Widget");
  const k8s::ResourceRef widgets{"example.com", "v1", "widgets", true};
  json widget = {{"apiVersion", "example.com/v1"}, {"kind", "Widget"}, {"metadata", {{"name", "w1"}}},
                 {"spec", {{"size", 3}, {"future", {{"nested", true}}}}}};
  auto w1 = client_->Create(widgets, kNs, widget);
  ASSERT_TRUE(w1.ok()) << w1.status();
  EXPECT_EQ((*w1)["spec"]["future"]["nested"], true);
  json with_status = *w1;
  with_status["status"] = {{"ready", true}};
  k8s::WriteOptions status;
  status.subresource = "status";
  auto st = client_->Update(widgets, kNs, with_status, status);
  ASSERT_TRUE(st.ok()) << st.status();
  auto got = client_->Get(widgets, kNs, "w1");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)["status"]["ready"], true);
  EXPECT_EQ((*got)["spec"]["size"], 3);
  auto list = client_->List(widgets, "");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)["items"].size(), 1u);
  ASSERT_TRUE(client_->Delete(widgets, kNs, "w1").ok());
  EXPECT_TRUE(k8s::IsNotFound(client_->Get(widgets, kNs, "w1").status()));
}

TEST_F(K8sClientTest, PagesThrough2000ObjectsAndMultiplexesCreates) {
  constexpr int kObjects = 2000;
  constexpr int kThreads = 16;
  std::atomic<int> next{0}, failures{0};
  const auto started = std::chrono::steady_clock::now();
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = next++; i < kObjects; i = next++) {
          k8s::ResourceRef ref = kConfigMaps;
          auto r = client_->Create(ref, "default", ConfigMap("page-" + std::to_string(i), {{"i", std::to_string(i)}}));
          if (!r.ok()) ++failures;
        }
      });
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_EQ(failures, 0);
  std::printf("[ figures  ] %d creates from %d threads in %.2f s: %.0f requests/s\n", kObjects, kThreads, seconds,
              kObjects / seconds);

  k8s::ListOptions page;
  page.limit = 500;
  int pages = 0;
  std::set<std::string> names;
  std::string snapshot_rv;
  while (true) {
    auto r = client_->List(kConfigMaps, "default", page);
    ASSERT_TRUE(r.ok()) << r.status();
    ++pages;
    for (const auto& item : (*r)["items"]) {
      const std::string name = item["metadata"]["name"];
      if (name.rfind("page-", 0) == 0) names.insert(name);
    }
    if (snapshot_rv.empty()) snapshot_rv = (*r)["metadata"]["resourceVersion"];
    EXPECT_EQ((*r)["metadata"]["resourceVersion"], snapshot_rv);  // one snapshot across pages
    page.continue_token = (*r)["metadata"].value("continue", "");
    if (page.continue_token.empty()) break;
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kObjects));
  EXPECT_GE(pages, 4);
  k8s::ListOptions all_opts;
  all_opts.limit = 300;
  all_opts.label_selector = "";
  auto all = client_->ListAll(kConfigMaps, "default", all_opts);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_GE((*all)["items"].size(), static_cast<size_t>(kObjects));
  k8s::ListOptions by_field;
  by_field.field_selector = "metadata.name=page-1234";
  auto one = client_->List(kConfigMaps, "default", by_field);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ((*one)["items"].size(), 1u);
  EXPECT_EQ((*one)["items"][0]["data"]["i"], "1234");
}

TEST_F(K8sClientTest, ServerSideApplyOwnsFieldsAndConflictsWithoutForce) {
  k8s::PatchOptions alice;
  alice.field_manager = "alice";
  k8s::PatchOptions bob;
  bob.field_manager = "bob";
  json intent = ConfigMap("ssa", {{"owned-by-alice", "1"}});
  intent["metadata"]["namespace"] = kNs;
  auto a = client_->Apply(kConfigMaps, kNs, intent, alice);  // creates
  ASSERT_TRUE(a.ok()) << a.status();

  json bob_intent = ConfigMap("ssa", {{"owned-by-alice", "2"}, {"bobs", "x"}});
  auto conflict = client_->Apply(kConfigMaps, kNs, bob_intent, bob);
  EXPECT_TRUE(k8s::IsConflict(conflict.status())) << conflict.status();
  EXPECT_NE(conflict.status().message().find("alice"), std::string::npos) << conflict.status();
  ASSERT_TRUE(conflict.api_error().has_value());
  EXPECT_EQ(conflict.api_error()->details["causes"].size(), 1u) << conflict.api_error()->details;

  auto shared = client_->Apply(kConfigMaps, kNs, ConfigMap("ssa", {{"bobs", "x"}}), bob);
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_EQ((*shared)["data"]["owned-by-alice"], "1");

  bob.force = true;
  auto forced = client_->Apply(kConfigMaps, kNs, bob_intent, bob);
  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_EQ((*forced)["data"]["owned-by-alice"], "2");
  std::set<std::string> managers;
  for (const auto& m : (*forced)["metadata"]["managedFields"]) {
    if (m["operation"] == "Apply") managers.insert(m["manager"]);
  }
  // alice owned only the field bob took, so her entry is gone.
  EXPECT_EQ(managers, (std::set<std::string>{"bob"}));
  // Re-applying her old intent without force now conflicts with bob.
  EXPECT_TRUE(k8s::IsConflict(client_->Apply(kConfigMaps, kNs, intent, alice).status()));
}

TEST_F(K8sClientTest, UpdateConflictIsRetriedByRetryOnConflict) {
  ASSERT_TRUE(client_->Create(kConfigMaps, kNs, ConfigMap("counter", {{"n", "0"}})).ok());
  int attempts = 0;
  auto status = k8s::RetryOnConflict(k8s::kDefaultConflictRetry, [&]() -> common::Status {
    ++attempts;
    ASSIGN_OR_RETURN(json cm, client_->Get(kConfigMaps, kNs, "counter"));
    if (attempts == 1) {
      // Someone else writes between our read and our write.
      auto other = client_->Patch(kConfigMaps, kNs, "counter", k8s::PatchType::kMerge, {{"data", {{"other", "y"}}}});
      if (!other.ok()) return other.status();
    }
    cm["data"]["n"] = std::to_string(std::stoi(cm["data"]["n"].get<std::string>()) + 1);
    return client_->Update(kConfigMaps, kNs, cm).status();
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(attempts, 2);
  auto cm = client_->Get(kConfigMaps, kNs, "counter");
  ASSERT_TRUE(cm.ok());
  EXPECT_EQ((*cm)["data"]["n"], "1");
  EXPECT_EQ((*cm)["data"]["other"], "y");  // the other writer's change survived
}

// In-cluster config from files written like the kubelet's projected volume.
TEST_F(K8sClientTest, InClusterConfigWithRealServiceAccountTokenAndRotation) {
  const std::string token = ServiceAccountToken("in-cluster");
  ASSERT_FALSE(token.empty());
  const fs::path dir = cluster_->dir() / "serviceaccount";
  fs::create_directories(dir);
  std::ofstream(dir / "ca.crt") << config_->ca_pem;
  std::ofstream(dir / "namespace") << kNs;
  std::ofstream(dir / "token") << "not-a-valid-token";
  const auto port = config_->server.substr(config_->server.rfind(':') + 1);
  k8s::ConfigSources sources;  // kubeconfig "" = in-cluster
  sources.service_host = "127.0.0.1";
  sources.service_port = port;
  sources.service_account_dir = dir;
  auto config = k8s::LoadConfig(sources);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->default_namespace, kNs);
  auto client = Client::New(*config);
  ASSERT_TRUE(client.ok());
  auto rejected = (*client)->List(kConfigMaps, config->default_namespace);
  EXPECT_TRUE(k8s::IsUnauthorized(rejected.status())) << rejected.status();

  // The kubelet rotates the token: the next request reads the new file.
  const auto old_mtime = fs::last_write_time(dir / "token");
  std::ofstream(dir / "token") << token << "\n";
  fs::last_write_time(dir / "token", old_mtime + 1s);
  auto listed = (*client)->List(kConfigMaps, config->default_namespace);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(WhoAmI(**client), std::string("system:serviceaccount:") + kNs + ":in-cluster");
  auto forbidden = (*client)->List(kConfigMaps, "default");
  EXPECT_TRUE(k8s::IsForbidden(forbidden.status())) << forbidden.status();
}

TEST_F(K8sClientTest, TooManyRequestsFromPriorityAndFairnessIsHonoured) {
  const std::string token = ServiceAccountToken("throttled");
  ASSERT_FALSE(token.empty());
  // A priority level with the smallest share that rejects instead of
  // queueing, and a flow schema sending everything the SA does to it.
  const k8s::ResourceRef levels{"flowcontrol.apiserver.k8s.io", "v1", "prioritylevelconfigurations", false};
  const k8s::ResourceRef schemas{"flowcontrol.apiserver.k8s.io", "v1", "flowschemas", false};
  k8s::PatchOptions apply;
  apply.field_manager = "client-test";
  auto level = client_->Apply(
      levels, "",
      {{"apiVersion", "flowcontrol.apiserver.k8s.io/v1"}, {"kind", "PriorityLevelConfiguration"},
       {"metadata", {{"name", "nvdra-test-reject"}}},
       {"spec", {{"type", "Limited"},
                 {"limited", {{"nominalConcurrencyShares", 1}, {"lendablePercent", 0},
                              {"borrowingLimitPercent", 0}, {"limitResponse", {{"type", "Reject"}}}}}}}},
      apply);
  ASSERT_TRUE(level.ok()) << level.status();
  auto schema = client_->Apply(
      schemas, "",
      {{"apiVersion", "flowcontrol.apiserver.k8s.io/v1"}, {"kind", "FlowSchema"},
       {"metadata", {{"name", "nvdra-test-throttled"}}},
       {"spec", {{"priorityLevelConfiguration", {{"name", "nvdra-test-reject"}}},
                 {"matchingPrecedence", 100},
                 {"distinguisherMethod", {{"type", "ByUser"}}},
                 {"rules", json::array({{{"subjects", json::array({{{"kind", "ServiceAccount"},
                                                                    {"serviceAccount", {{"name", "throttled"}, {"namespace", kNs}}}}})},
                                         {"resourceRules", json::array({{{"verbs", {"*"}}, {"apiGroups", {"*"}},
                                                                         {"resources", {"*"}}, {"namespaces", {"*"}},
                                                                         {"clusterScope", true}}})},
                                         {"nonResourceRules", json::array({{{"verbs", {"*"}}, {"nonResourceURLs", {"*"}}}})}}})}}}},
      apply);
  ASSERT_TRUE(schema.ok()) << schema.status();
  // Heavy requests (every ConfigMap in the namespace) make each one hold its seats long enough.
  for (int i = 0; i < 300; ++i) {
    (void)client_->Create(kConfigMaps, kNs, ConfigMap("load-" + std::to_string(i), {{"x", std::string(2000, 'x')}}));
  }

  k8s::RestConfig sa_config = *config_;
  sa_config.client_cert_pem.clear();
  sa_config.client_key_pem.clear();
  sa_config.bearer_token = token;
  sa_config.qps = 0;

  auto hammer = [&](Client& client, int threads, int per_thread, std::atomic<int>& throttled_errors,
                    std::atomic<int>& ok, std::optional<std::chrono::seconds>& retry_after) {
    std::mutex mu;
    std::vector<std::jthread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&] {
        for (int i = 0; i < per_thread; ++i) {
          auto r = client.List(kConfigMaps, kNs);
          if (r.ok()) {
            ++ok;
          } else if (k8s::IsTooManyRequests(r)) {
            ++throttled_errors;
            std::lock_guard lock(mu);
            retry_after = k8s::RetryAfter(r);
          } else {
            ADD_FAILURE() << r.status();
          }
        }
      });
    }
  };

  // The flow schema takes effect asynchronously; a client that does not
  // retry sees 429s once it has. Bounded: the API server applies it in ~1 s.
  k8s::ClientOptions no_retry;
  no_retry.max_throttle_retries = 0;
  auto raw = Client::New(sa_config, no_retry);
  ASSERT_TRUE(raw.ok());
  std::atomic<int> throttled{0}, ok{0};
  std::optional<std::chrono::seconds> retry_after;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (throttled == 0 && std::chrono::steady_clock::now() < deadline) hammer(**raw, 32, 4, throttled, ok, retry_after);
  ASSERT_GT(throttled.load(), 0) << "no 429 seen; " << ok << " requests succeeded";
  ASSERT_TRUE(retry_after.has_value());
  std::printf("[ figures  ] APF: %d of %d requests rejected with 429, Retry-After %lld s\n", throttled.load(),
              throttled.load() + ok.load(), static_cast<long long>(retry_after->count()));

  // The same load through a client that honours Retry-After: all succeed.
  auto patient = Client::New(sa_config);
  ASSERT_TRUE(patient.ok());
  std::atomic<int> throttled2{0}, ok2{0};
  std::optional<std::chrono::seconds> unused;
  const auto started = std::chrono::steady_clock::now();
  hammer(**patient, 32, 1, throttled2, ok2, unused);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_EQ(throttled2.load(), 0);
  EXPECT_EQ(ok2.load(), 32);
  EXPECT_GT((*patient)->stats().throttle_retries, 0u);
  std::printf("[ figures  ] retrying client: 32 concurrent lists ok after %llu Retry-After waits in %.1f s\n",
              static_cast<unsigned long long>((*patient)->stats().throttle_retries), seconds);
  (void)client_->Delete(schemas, "", "nvdra-test-throttled");
}

TEST_F(K8sClientTest, WatchDeliversAddedModifiedDeletedAndBookmarks) {
  auto list = client_->List(kConfigMaps, kNs);
  ASSERT_TRUE(list.ok());
  k8s::WatchOptions options;
  options.resource_version = (*list)["metadata"]["resourceVersion"];
  options.label_selector = "watch=me";
  options.timeout_seconds = 5;  // the server sends a bookmark ~2 s before it ends the watch
  auto watch = client_->Watch(kConfigMaps, kNs, options);
  ASSERT_TRUE(watch.ok()) << watch.status();
  EXPECT_EQ((*watch)->head().http_version, 2);

  json cm = ConfigMap("watched", {{"v", "1"}});
  cm["metadata"]["labels"] = {{"watch", "me"}};
  ASSERT_TRUE(client_->Create(kConfigMaps, kNs, cm).ok());
  ASSERT_TRUE(client_->Patch(kConfigMaps, kNs, "watched", k8s::PatchType::kMerge, {{"data", {{"v", "2"}}}}).ok());
  ASSERT_TRUE(client_->Delete(kConfigMaps, kNs, "watched").ok());

  std::vector<std::string> seen;
  while (true) {
    auto e = (*watch)->Next();
    ASSERT_TRUE(e.ok()) << e.status();
    if (!e->has_value()) break;  // the server ended the watch at timeoutSeconds
    seen.emplace_back(k8s::WatchEventTypeName((*e)->type));
  }
  ASSERT_GE(seen.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(seen.begin(), seen.begin() + 3),
            (std::vector<std::string>{"ADDED", "MODIFIED", "DELETED"}));
  EXPECT_EQ(seen.back(), "BOOKMARK");
  EXPECT_FALSE((*watch)->last_resource_version().empty());
}

TEST_F(K8sClientTest, StreamingListEndsInitialEventsWithABookmark) {
  k8s::WatchOptions options;
  options.send_initial_events = true;
  options.timeout_seconds = 30;
  auto watch = client_->Watch(kConfigMaps, kNs, options);
  ASSERT_TRUE(watch.ok()) << watch.status();
  int added = 0;
  while (true) {
    auto e = (*watch)->Next();
    ASSERT_TRUE(e.ok() && e->has_value()) << e.status();
    if ((*e)->type == k8s::WatchEventType::kAdded) ++added;
    if ((*e)->type == k8s::WatchEventType::kBookmark) {
      EXPECT_EQ((*e)->object["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
      break;
    }
  }
  EXPECT_GT(added, 0);
}

TEST_F(K8sClientTest, WatchIsCancelledPromptlyFromAnotherThreadAndWatchesShareOneConnection) {
  constexpr int kWatches = 20;
  std::vector<std::unique_ptr<k8s::WatchStream>> watches;
  for (int i = 0; i < kWatches; ++i) {
    k8s::WatchOptions options;
    options.label_selector = "nothing=" + std::to_string(i);  // no events, ever
    auto w = client_->Watch(kConfigMaps, kNs, options);
    ASSERT_TRUE(w.ok()) << w.status();
    watches.push_back(*std::move(w));
  }
  std::set<long> ports;
  long new_connections = 0;
  for (const auto& w : watches) {
    EXPECT_EQ(w->head().http_version, 2);
    ports.insert(w->head().local_port);
    new_connections += w->head().new_connections;
  }
  std::printf("[ figures  ] %d concurrent watches on %zu connection(s), %ld new connection(s) opened for them\n",
              kWatches, ports.size(), new_connections);
  EXPECT_EQ(ports.size(), 1u);

  k8s::WatchStream* blocked = watches[0].get();
  std::atomic<bool> returned{false};
  common::Status result;
  std::jthread reader([&] {
    // Bookmarks may come first; read until the stream ends.
    while (true) {
      auto e = blocked->Next();
      if (!e.ok() || !e->has_value()) {
        result = e.status();
        break;
      }
    }
    returned = true;
  });
  const auto stop_at = std::chrono::steady_clock::now();
  blocked->Stop();
  reader.join();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - stop_at);
  EXPECT_EQ(result.code(), common::StatusCode::kCancelled) << result;
  EXPECT_LT(ms, 500ms);
  std::printf("[ figures  ] blocked watch returned %lld ms after Stop()\n", static_cast<long long>(ms.count()));
  // The others still work after one was cancelled on the shared connection.
  auto after = client_->Get(k8s::resources::kNamespaces, "", kNs);
  EXPECT_TRUE(after.ok()) << after.status();
}

// A fresh cluster's core kinds have watch caches that started at RV ~1 and
// still hold every event, so RV "1" is not too old for them, even after an
// etcd compaction (watches are served from the cache). A kind created later
// has a cache that starts at its creation: RV "1" predates it, 410 Expired.
TEST_F(K8sClientTest, WatchFromAResourceVersionOlderThanTheWatchCacheIsGone) {
  CreateCrd("gadgets", "Gadget");
  const k8s::ResourceRef gadgets{"example.com", "v1", "gadgets", true};
  k8s::WatchOptions options;
  options.resource_version = "1";
  auto watch = client_->Watch(gadgets, kNs, options);
  common::Status status;
  std::optional<k8s::ApiError> error;
  if (!watch.ok()) {
    status = watch.status();
    error = watch.api_error();
  } else {
    auto e = (*watch)->Next();
    status = e.status();
    error = e.api_error();
  }
  EXPECT_TRUE(k8s::IsGone(status)) << status;
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->http_code, 410);
  std::printf("[ figures  ] watch from RV 1: %s (surfaced at %s)\n", status.ToString().c_str(),
              watch.ok() ? "first Next()" : "Watch()");
}

}  // namespace
}  // namespace nvdra::testing
