// The Helm chart against a real API server (test/cluster's control plane, no
// kubelets): `helm install` creates every rendered object (the API server
// validates each), `helm upgrade` with changed values changes them and keeps
// the webhook's generated certificate, `helm uninstall` leaves nothing but
// the CRDs; and the ValidatingAdmissionPolicy confines the kubelet plugins'
// service account, with real pod-bound tokens, to its own node's
// ResourceSlices.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_cluster.h"

namespace nvdra::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr char kNamespace[] = "nvidia-dra";
constexpr char kRelease[] = "nvdra";
constexpr char kName[] = "dra-driver-nvidia-gpu";
// <release>-<chart>-service-account + "-kubeletplugin": the chart's fullname rule.
constexpr char kPluginServiceAccount[] = "nvdra-dra-driver-nvidia-gpu-service-account-kubeletplugin";

class ChartClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Helm keeps caches and its repository config under these; keep them
    // out of $HOME.
    helm_home_ = new fs::path(fs::temp_directory_path() / ("nvdra-chart-test-" + std::to_string(::getpid())));
    fs::create_directories(*helm_home_);
    for (const char* var : {"HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"}) {
      ::setenv(var, (*helm_home_ / var).c_str(), 1);
    }
    std::string error;
    cluster_ = TestCluster::Start(&error).release();
    if (cluster_ == nullptr) FAIL() << "control plane did not start:\n" << error;
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    if (helm_home_ != nullptr) fs::remove_all(*helm_home_);
    delete helm_home_;
  }
  void SetUp() override {
    if (cluster_ == nullptr) GTEST_SKIP() << "no control plane";
  }

  static CommandResult Helm(std::vector<std::string> args) {
    std::vector<std::string> argv = {(cluster_->bin_dir() / "helm").string(), "--kubeconfig",
                                     cluster_->kubeconfig().string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, "", std::chrono::minutes(5));
  }

  // helm install/upgrade of the chart in kNamespace with `values` (--set).
  static CommandResult Deploy(const std::string& verb, const std::vector<std::string>& values) {
    std::vector<std::string> args = {verb, kRelease, NVDRA_CHART_DIR, "--namespace", kNamespace};
    if (verb == "install") args.push_back("--create-namespace");
    for (const std::string& v : values) {
      args.push_back("--set");
      args.push_back(v);
    }
    return Helm(args);
  }

  // The objects of the release's current manifest: (kind, namespace, name).
  static std::vector<json> Manifest() {
    CommandResult manifest = Helm({"get", "manifest", kRelease, "--namespace", kNamespace});
    EXPECT_TRUE(manifest.ok()) << manifest.err;
    // The YAML stream as one JSON array (python3-yaml, from scripts/setup).
    CommandResult as_json = RunCommand(
        {"python3", "-c",
         "import json, sys, yaml; print(json.dumps([d for d in yaml.safe_load_all(sys.stdin) if d]))"},
        manifest.out);
    EXPECT_TRUE(as_json.ok()) << as_json.err;
    json parsed = json::parse(as_json.out, nullptr, false);
    EXPECT_TRUE(parsed.is_array()) << as_json.out;
    if (!parsed.is_array()) return {};
    return parsed.get<std::vector<json>>();
  }

  // `kubectl get` of one object from a manifest; nullopt when it is absent.
  static std::optional<json> Live(const json& object) {
    std::vector<std::string> args = {object["kind"].get<std::string>() + "." + Group(object),
                                     object["metadata"]["name"].get<std::string>()};
    if (object["metadata"].contains("namespace")) {
      args.push_back("-n");
      args.push_back(object["metadata"]["namespace"]);
    }
    return cluster_->Get(args);
  }
  static std::string Group(const json& object) {
    const std::string api_version = object["apiVersion"];
    const auto slash = api_version.find('/');
    return slash == std::string::npos ? "" : api_version.substr(0, slash);
  }

  static std::string EnvOf(const json& daemonset, const std::string& container, const std::string& name) {
    for (const json& c : daemonset["spec"]["template"]["spec"]["containers"]) {
      if (c["name"] != container) continue;
      for (const json& e : c.value("env", json::array())) {
        if (e["name"] == name) return e.value("value", "");
      }
    }
    return "<unset>";
  }

  // Uninstalls, waits for the release's objects to be deleted, and checks
  // that none is left: every object of the last manifest is gone, and no
  // object anywhere carries the release's instance label (pods of the
  // release's workloads included). CRDs stay, as Helm keeps crds/.
  static void UninstallAndExpectNothingLeft() {
    const std::vector<json> objects = Manifest();
    ASSERT_FALSE(objects.empty());
    CommandResult un = Helm({"uninstall", kRelease, "--namespace", kNamespace, "--wait", "--timeout", "2m"});
    ASSERT_TRUE(un.ok()) << un.err;
    for (const json& o : objects) {
      EXPECT_FALSE(Live(o).has_value()) << o["kind"] << " " << o["metadata"]["name"] << " survived helm uninstall";
    }
    // Pods of the Deployments are removed by the garbage collector after
    // their owners: wait for that event, then check every kind.
    CommandResult gone = cluster_->Kubectl({"wait", "--for=delete", "pods", "-n", kNamespace, "-l",
                                            std::string("app.kubernetes.io/instance=") + kRelease, "--timeout=120s"});
    EXPECT_TRUE(gone.ok() || gone.err.find("no matching resources") != std::string::npos) << gone.err;
    CommandResult left = cluster_->Kubectl(
        {"get",
         "pods,replicasets,deployments,daemonsets,services,secrets,serviceaccounts,roles,rolebindings,clusterroles,"
         "clusterrolebindings,deviceclasses,validatingwebhookconfigurations,validatingadmissionpolicies,"
         "validatingadmissionpolicybindings,networkpolicies,poddisruptionbudgets",
         "-A", "-l", std::string("app.kubernetes.io/instance=") + kRelease, "-o", "name"});
    ASSERT_TRUE(left.ok()) << left.err;
    EXPECT_EQ(left.out, "") << "left behind by helm uninstall:\n" << left.out;
    for (const char* crd : {"computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com"}) {
      EXPECT_TRUE(cluster_->Get({"crd", crd}).has_value()) << crd << " removed (Helm keeps CRDs)";
    }
  }

  static TestCluster* cluster_;
  static fs::path* helm_home_;
};

TestCluster* ChartClusterTest::cluster_ = nullptr;
fs::path* ChartClusterTest::helm_home_ = nullptr;

TEST_F(ChartClusterTest, InstallUpgradeUninstall) {
  CommandResult install = Deploy("install", {"gpuResourcesEnabledOverride=true"});
  ASSERT_TRUE(install.ok()) << install.out << install.err;

  // Every rendered object exists on the server.
  std::vector<json> objects = Manifest();
  std::set<std::string> kinds;
  for (const json& o : objects) {
    kinds.insert(o["kind"]);
    EXPECT_TRUE(Live(o).has_value()) << o["kind"] << " " << o["metadata"]["name"] << " missing after install";
  }
  for (const char* kind : {"DaemonSet", "Deployment", "DeviceClass", "ValidatingAdmissionPolicy",
                           "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration", "Secret", "Service",
                           "ClusterRole", "Role", "ServiceAccount"}) {
    EXPECT_TRUE(kinds.contains(kind)) << "no " << kind << " installed";
  }
  for (const char* crd : {"computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com"}) {
    EXPECT_TRUE(cluster_->Get({"crd", crd}).has_value()) << crd << " not installed from crds/";
  }
  // API version detection picked the highest version this server serves.
  auto gpu_class = cluster_->Get({"deviceclass", "gpu.nvidia.com"});
  ASSERT_TRUE(gpu_class.has_value());
  for (const json& o : objects) {
    if (o["kind"] == "DeviceClass") {
      EXPECT_EQ(o["apiVersion"], "resource.k8s.io/v1") << o["metadata"]["name"];
    }
  }
  EXPECT_EQ((*gpu_class)["spec"].value("extendedResourceName", ""), "nvidia.com/gpu");
  auto channel_class = cluster_->Get({"deviceclass", "compute-domain-default-channel.nvidia.com"});
  ASSERT_TRUE(channel_class.has_value());
  EXPECT_NE((*channel_class)["spec"]["selectors"][0]["cel"]["expression"].get<std::string>().find("id == 0"),
            std::string::npos);
  auto webhook_secret = cluster_->Get({"secret", "-n", kNamespace, std::string(kName) + "-webhook-cert"});
  ASSERT_TRUE(webhook_secret.has_value());
  const std::string ca = (*webhook_secret)["data"]["ca.crt"];
  auto webhook_config = cluster_->Get({"validatingwebhookconfiguration", std::string(kName) + "-webhook-config"});
  ASSERT_TRUE(webhook_config.has_value());
  EXPECT_EQ((*webhook_config)["webhooks"][0]["clientConfig"]["caBundle"], ca);

  // An upgrade that changes nothing keeps the generated certificate.
  CommandResult same = Deploy("upgrade", {"gpuResourcesEnabledOverride=true"});
  ASSERT_TRUE(same.ok()) << same.err;
  webhook_secret = cluster_->Get({"secret", "-n", kNamespace, std::string(kName) + "-webhook-cert"});
  ASSERT_TRUE(webhook_secret.has_value());
  EXPECT_EQ((*webhook_secret)["data"]["ca.crt"], ca) << "helm upgrade generated a new CA";

  // An upgrade with changed values changes the objects.
  CommandResult upgrade = Deploy("upgrade", {"gpuResourcesEnabledOverride=true", "logVerbosity=6",
                                             "webhook.enabled=false", "resources.computeDomains.imex.isolation=channel",
                                             "kubeletPlugin.containers.gpus.resources.requests.memory=48Mi"});
  ASSERT_TRUE(upgrade.ok()) << upgrade.out << upgrade.err;
  auto daemonset = cluster_->Get({"daemonset", "-n", kNamespace, std::string(kName) + "-kubelet-plugin"});
  ASSERT_TRUE(daemonset.has_value());
  EXPECT_EQ(EnvOf(*daemonset, "gpus", "LOG_VERBOSITY"), "6");
  EXPECT_EQ(EnvOf(*daemonset, "compute-domains", "IMEX_ISOLATION"), "channel");
  for (const json& c : (*daemonset)["spec"]["template"]["spec"]["containers"]) {
    if (c["name"] == "gpus") {
      EXPECT_EQ(c["resources"]["requests"]["memory"], "48Mi");
    }
  }
  channel_class = cluster_->Get({"deviceclass", "compute-domain-default-channel.nvidia.com"});
  ASSERT_TRUE(channel_class.has_value());
  EXPECT_EQ((*channel_class)["spec"]["selectors"][0]["cel"]["expression"].get<std::string>().find("id =="),
            std::string::npos)
      << "channel isolation: the default channel class must select any channel";
  EXPECT_FALSE(cluster_->Get({"validatingwebhookconfiguration", std::string(kName) + "-webhook-config"}).has_value())
      << "webhook configuration left after webhook.enabled=false";
  EXPECT_FALSE(cluster_->Get({"deployment", "-n", kNamespace, std::string(kName) + "-webhook"}).has_value());
  auto controller = cluster_->Get({"deployment", "-n", kNamespace, std::string(kName) + "-controller"});
  ASSERT_TRUE(controller.has_value());

  UninstallAndExpectNothingLeft();
}

// A kubeconfig for the API server that authenticates with `token` only.
fs::path TokenKubeconfig(const TestCluster& cluster, const std::string& token, const std::string& name) {
  CommandResult view = cluster.Kubectl({"config", "view", "--raw", "--minify", "-o", "json"});
  json admin = json::parse(view.out, nullptr, false);
  json cluster_entry = admin["clusters"][0];
  json config = {{"apiVersion", "v1"},
                 {"kind", "Config"},
                 {"clusters", json::array({cluster_entry})},
                 {"users", json::array({{{"name", name}, {"user", {{"token", token}}}}})},
                 {"contexts", json::array({{{"name", name},
                                            {"context", {{"cluster", cluster_entry["name"]}, {"user", name}}}}})},
                 {"current-context", name}};
  fs::path path = cluster.dir() / (name + ".kubeconfig");
  std::ofstream(path) << config.dump();
  return path;
}

json Slice(const std::string& name, const std::string& node) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceSlice"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"driver", "gpu.nvidia.com"},
            {"nodeName", node},
            {"pool", {{"name", node}, {"generation", 1}, {"resourceSliceCount", 1}}},
            {"devices", json::array({{{"name", "gpu-0"}, {"attributes", {{"type", {{"string", "gpu"}}}}}}})}}}};
}

// The webhook's matchConditions, evaluated by the API server: with no
// webhook pod running (no nodes here) and failurePolicy Fail, a claim or
// template for another vendor's devices is admitted without a call, and
// every shape that names our drivers or DeviceClasses is sent to the
// webhook (and so refused while it is down), in v1 and in v1beta1.
TEST_F(ChartClusterTest, AWebhookThatIsDownBlocksOnlyClaimsForOurDrivers) {
  CommandResult install = Deploy("install", {"gpuResourcesEnabledOverride=true"});
  ASSERT_TRUE(install.ok()) << install.out << install.err;
  ASSERT_TRUE(cluster_->Apply({{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "claims"}}}}).ok());

  auto claim_v1 = [](const std::string& name, const json& request, const json& config) {
    json devices = {{"requests", json::array({request})}};
    if (!config.is_null()) devices["config"] = json::array({config});
    return json{{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "ResourceClaim"},
                {"metadata", {{"name", name}, {"namespace", "claims"}}},
                {"spec", {{"devices", devices}}}};
  };
  auto exactly = [](const std::string& device_class) {
    return json{{"name", "r"}, {"exactly", {{"deviceClassName", device_class}}}};
  };
  const json our_config = {{"opaque",
                            {{"driver", "gpu.nvidia.com"},
                             {"parameters", {{"apiVersion", "resource.nvidia.com/v1beta1"}, {"kind", "GpuConfig"}}}}}};
  const json their_config = {{"opaque", {{"driver", "example.com"}, {"parameters", {{"anything", true}}}}}};

  // Another vendor's: admitted, as a claim and as a template.
  CommandResult theirs = cluster_->Apply(claim_v1("theirs", exactly("example.com"), their_config));
  EXPECT_TRUE(theirs.ok()) << theirs.err;
  json template_v1 = claim_v1("theirs-template", exactly("example.com"), nullptr);
  template_v1["kind"] = "ResourceClaimTemplate";
  template_v1["spec"] = {{"spec", template_v1["spec"]}};
  CommandResult their_template = cluster_->Apply(template_v1);
  EXPECT_TRUE(their_template.ok()) << their_template.err;

  // Ours, each way a claim can name us: sent to the webhook, which is down.
  auto expect_sent_to_webhook = [&](const json& object, const std::string& what) {
    CommandResult r = cluster_->Apply(object);
    EXPECT_FALSE(r.ok()) << what << " was admitted without the webhook";
    EXPECT_NE(r.err.find("failed calling webhook \"gpu.nvidia.com\""), std::string::npos) << what << ": " << r.err;
  };
  expect_sent_to_webhook(claim_v1("our-class", exactly("gpu.nvidia.com"), nullptr), "a v1 request for gpu.nvidia.com");
  expect_sent_to_webhook(claim_v1("our-config", exactly("example.com"), our_config),
                         "another vendor's class with our opaque config");
  expect_sent_to_webhook(
      claim_v1("our-alternative",
               {{"name", "r"},
                {"firstAvailable", json::array({{{"name", "a"}, {"deviceClassName", "example.com"}},
                                                {{"name", "b"}, {"deviceClassName", "mig.nvidia.com"}}})}},
               nullptr),
      "a firstAvailable alternative of mig.nvidia.com");
  json our_template = claim_v1("our-template", exactly("compute-domain-default-channel.nvidia.com"), nullptr);
  our_template["kind"] = "ResourceClaimTemplate";
  our_template["spec"] = {{"spec", our_template["spec"]}};
  expect_sent_to_webhook(our_template, "a template for the channel class");
  expect_sent_to_webhook({{"apiVersion", "resource.k8s.io/v1beta1"},
                          {"kind", "ResourceClaim"},
                          {"metadata", {{"name", "our-v1beta1"}, {"namespace", "claims"}}},
                          {"spec", {{"devices", {{"requests", json::array({{{"name", "r"},
                                                                             {"deviceClassName", "vfio.gpu.nvidia.com"}}})}}}}}},
                         "a v1beta1 request for vfio.gpu.nvidia.com");

  cluster_->Kubectl({"delete", "namespace", "claims", "--wait=false"});
  UninstallAndExpectNothingLeft();
}

TEST_F(ChartClusterTest, PolicyConfinesEachPluginToItsOwnNodesSlices) {
  CommandResult install = Deploy("install", {"gpuResourcesEnabledOverride=true"});
  ASSERT_TRUE(install.ok()) << install.out << install.err;

  // Two nodes, and a pod on node A running as the plugins' service account
  // (no kubelet runs it; the token only needs the binding).
  for (const char* node : {"node-a", "node-b"}) {
    // Tainted so that no pod of the release is bound to a node without a
    // kubelet (it could then not finish terminating at uninstall).
    CommandResult r = cluster_->Apply(
        {{"apiVersion", "v1"},
         {"kind", "Node"},
         {"metadata", {{"name", node}}},
         {"spec", {{"taints", json::array({{{"key", "nvdra.test/no-kubelet"}, {"effect", "NoSchedule"}}})}}}});
    ASSERT_TRUE(r.ok()) << r.err;
  }
  CommandResult pod = cluster_->Apply(
      {{"apiVersion", "v1"},
       {"kind", "Pod"},
       {"metadata", {{"name", "plugin-on-a"}, {"namespace", kNamespace}}},
       {"spec",
        {{"nodeName", "node-a"},
         {"serviceAccountName", kPluginServiceAccount},
         {"containers", json::array({{{"name", "plugin"}, {"image", "nvdra.local/none:v0"}}})}}}});
  ASSERT_TRUE(pod.ok()) << pod.err;
  CommandResult token = cluster_->Kubectl({"create", "token", kPluginServiceAccount, "-n", kNamespace,
                                           "--bound-object-kind", "Pod", "--bound-object-name", "plugin-on-a"});
  ASSERT_TRUE(token.ok()) << token.err;
  std::string bound = token.out;
  while (!bound.empty() && (bound.back() == '\n' || bound.back() == '\r')) bound.pop_back();
  const fs::path plugin_a = TokenKubeconfig(*cluster_, bound, "plugin-a");
  auto as_plugin_a = [&](const std::vector<std::string>& args, const std::string& input = "") {
    std::vector<std::string> argv = {(cluster_->bin_dir() / "kubectl").string(), "--kubeconfig", plugin_a.string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, input);
  };

  CommandResult who = as_plugin_a({"auth", "whoami", "-o", "json"});
  ASSERT_TRUE(who.ok()) << who.err;
  json identity = json::parse(who.out, nullptr, false);
  ASSERT_FALSE(identity.is_discarded());
  EXPECT_EQ(identity["status"]["userInfo"]["username"],
            std::string("system:serviceaccount:") + kNamespace + ":" + kPluginServiceAccount);
  EXPECT_EQ(identity["status"]["userInfo"]["extra"]["authentication.kubernetes.io/node-name"][0], "node-a");

  // RBAC and the policy reach the API server's caches a moment after the
  // install. No event tells when: ask (dry run) until the policy answers for
  // node B, which also proves that RBAC lets the request through to it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    CommandResult probe = as_plugin_a({"create", "--dry-run=server", "-f", "-"}, Slice("probe", "node-b").dump());
    if (probe.err.find("ValidatingAdmissionPolicy") != std::string::npos) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "the policy never denied node B's slice within 60 s; last answer: " << probe.out << probe.err;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  // The same for the Node policy.
  for (;;) {
    CommandResult probe = as_plugin_a({"label", "--dry-run=server", "node", "node-b", "nvdra.test/probe=yes"});
    if (probe.err.find("ValidatingAdmissionPolicy") != std::string::npos) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "the Node policy never denied node B within 60 s; last answer: " << probe.out << probe.err;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }

  // Its own node: create, update and delete are allowed.
  CommandResult own = as_plugin_a({"create", "-f", "-"}, Slice("slice-a", "node-a").dump());
  EXPECT_TRUE(own.ok()) << "plugin on node-a could not create its own slice: " << own.err;
  // Updates are PUTs, as the plugins write (RBAC grants update, not patch).
  auto replace_labelled = [&](const std::string& name) {
    CommandResult got = as_plugin_a({"get", "resourceslice", name, "-o", "json"});
    json slice = json::parse(got.out, nullptr, false);
    if (!got.ok() || slice.is_discarded()) return got;
    slice["metadata"]["labels"]["touched"] = "yes";
    return as_plugin_a({"replace", "-f", "-"}, slice.dump());
  };
  CommandResult own_update = replace_labelled("slice-a");
  EXPECT_TRUE(own_update.ok()) << own_update.err;

  // Another node: create is denied by the policy, with its message.
  CommandResult other = as_plugin_a({"create", "-f", "-"}, Slice("slice-b-by-a", "node-b").dump());
  EXPECT_FALSE(other.ok()) << "plugin on node-a created a slice of node-b";
  EXPECT_NE(other.err.find("ValidatingAdmissionPolicy"), std::string::npos) << other.err;
  EXPECT_NE(other.err.find("may only write ResourceSlices with spec.nodeName 'node-a'"), std::string::npos)
      << other.err;
  EXPECT_FALSE(cluster_->Get({"resourceslice", "slice-b-by-a"}).has_value());

  // Another node's existing slice (written by an admin): update and delete denied.
  ASSERT_TRUE(cluster_->Apply(Slice("slice-b", "node-b")).ok());
  CommandResult other_update = replace_labelled("slice-b");
  EXPECT_FALSE(other_update.ok()) << "plugin on node-a updated node-b's slice";
  EXPECT_NE(other_update.err.find("ValidatingAdmissionPolicy"), std::string::npos) << other_update.err;
  CommandResult other_delete = as_plugin_a({"delete", "resourceslice", "slice-b"});
  EXPECT_FALSE(other_delete.ok()) << "plugin on node-a deleted node-b's slice";
  EXPECT_NE(other_delete.err.find("ValidatingAdmissionPolicy"), std::string::npos) << other_delete.err;
  EXPECT_TRUE(cluster_->Get({"resourceslice", "slice-b"}).has_value());

  // A token of the same account bound to no pod carries no node: denied.
  CommandResult unbound = cluster_->Kubectl({"create", "token", kPluginServiceAccount, "-n", kNamespace});
  ASSERT_TRUE(unbound.ok()) << unbound.err;
  std::string plain = unbound.out;
  while (!plain.empty() && (plain.back() == '\n' || plain.back() == '\r')) plain.pop_back();
  const fs::path nodeless = TokenKubeconfig(*cluster_, plain, "plugin-nodeless");
  CommandResult nodeless_create =
      RunCommand({(cluster_->bin_dir() / "kubectl").string(), "--kubeconfig", nodeless.string(), "create", "-f", "-"},
                 Slice("slice-a2", "node-a").dump());
  EXPECT_FALSE(nodeless_create.ok()) << "a token without a node wrote a slice";
  EXPECT_NE(nodeless_create.err.find("has no node in its token"), std::string::npos) << nodeless_create.err;

  // Nodes: RBAC lets the plugins update every Node (the ComputeDomain
  // plugin labels its own); the second policy keeps each to its own.
  CommandResult own_node = as_plugin_a({"label", "node", "node-a", "nvdra.test/touched=yes"});
  EXPECT_TRUE(own_node.ok()) << "plugin on node-a could not label its Node: " << own_node.err;
  CommandResult other_node = as_plugin_a({"label", "node", "node-b", "nvdra.test/touched=yes"});
  EXPECT_FALSE(other_node.ok()) << "plugin on node-a labelled node-b";
  EXPECT_NE(other_node.err.find("may only update its own Node"), std::string::npos) << other_node.err;

  CommandResult own_delete = as_plugin_a({"delete", "resourceslice", "slice-a"});
  EXPECT_TRUE(own_delete.ok()) << own_delete.err;

  // Test objects outside the chart, then the release.
  cluster_->Kubectl({"delete", "pod", "-n", kNamespace, "plugin-on-a", "--force", "--grace-period=0"});
  cluster_->Kubectl({"delete", "resourceslice", "slice-b", "--ignore-not-found"});
  cluster_->Kubectl({"delete", "node", "node-a", "node-b", "--ignore-not-found"});
  UninstallAndExpectNothingLeft();
}

}  // namespace
}  // namespace nvdra::testing
