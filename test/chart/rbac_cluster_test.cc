// Least privilege of the chart's identities against a real API server
// (test/cluster's control plane, no kubelets), with real service-account
// tokens:
//   - each service account's rights, as the API server's
//     SelfSubjectRulesReview reports them to a token of that account (the
//     review `kubectl auth can-i --list` prints), equal the allow-list below,
//     in the driver's namespace, in a namespace listed in ADDITIONAL_NAMESPACES
//     and in a user's namespace; every entry names the call in src/ that needs
//     it, so a right nobody calls fails the test as surely as a missing one;
//   - what RBAC cannot express is denied by the chart's admission policies:
//     an IMEX daemon (a token bound to its pod) may patch only its own pod,
//     only its clique label and status annotations, and write only its own
//     node's entry in its own ComputeDomain's status; the controller may
//     change only its label on Nodes.
// The calls themselves run with these rights in the simulated-node e2e
// suites (e2e.simnode_chart, e2e.simnode_computedomain_*), which install the
// same chart.

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "computedomain/clique_membership.h"
#include "k8s/api_error.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "test_cluster.h"

namespace nvdra::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr char kNamespace[] = "nvidia-dra";
constexpr char kExtraNamespace[] = "nvdra-extra";  // the controller's ADDITIONAL_NAMESPACES
constexpr char kUserNamespace[] = "team-a";        // where users create ComputeDomains
constexpr char kRelease[] = "nvdra";
// <release>-<chart>-service-account + suffix: the chart's fullname rule.
constexpr char kPluginAccount[] = "nvdra-dra-driver-nvidia-gpu-service-account-kubeletplugin";
constexpr char kControllerAccount[] = "nvdra-dra-driver-nvidia-gpu-service-account-controller";
constexpr char kWebhookAccount[] = "nvdra-dra-driver-nvidia-gpu-webhook-service-account";
constexpr char kDaemonAccount[] = "compute-domain-daemon-service-account";  // upstream's name, per namespace

constexpr char kDomainLabel[] = "resource.nvidia.com/computeDomain";
constexpr char kCliqueLabel[] = "resource.nvidia.com/computeDomain.cliqueID";
constexpr char kDaemonStatusAnnotation[] = "resource.nvidia.com/computeDomain.daemonStatus";

// One right: "<verb> <resource>[.<group>]" as a SelfSubjectRulesReview lists
// it, and the call that needs it.
struct Right {
  const char* right;
  const char* needed_by;
};
using AllowList = std::vector<Right>;

// Where a rule applies: every namespace (a ClusterRole bound cluster-wide,
// cluster-scoped resources included) or only the listed ones.
struct Grant {
  std::set<std::string> namespaces;  // empty: everywhere
  AllowList rights;
};

// The values every install here uses: every component, and every gate that
// adds a call on.
std::vector<std::string> ChartValues(bool cliques) {
  return {"gpuResourcesEnabledOverride=true",
          "featureGates.MPSSupport=true",
          "featureGates.NVMLDeviceHealthCheck=true",
          "featureGates.FabricTopologySupport=true",
          std::string("featureGates.ComputeDomainCliques=") + (cliques ? "true" : "false"),
          std::string("controller.containers.computeDomain.env[0].name=ADDITIONAL_NAMESPACES"),
          std::string("controller.containers.computeDomain.env[0].value=") + kExtraNamespace};
}

// gpu-kubelet-plugin and compute-domain-kubelet-plugin (one account).
std::vector<Grant> PluginAllowList() {
  return {
      {{},
       {{"get resourceslices.resource.k8s.io", "ResourceSlicePublisher::Reread "
                                               "(src/kubeletplugin/resource_slice_publisher.cc, Get kResourceSlices)"},
        {"list resourceslices.resource.k8s.io", "ResourceSlicePublisher's informer (RestListWatch kResourceSlices)"},
        {"watch resourceslices.resource.k8s.io", "ResourceSlicePublisher's informer"},
        {"create resourceslices.resource.k8s.io", "ResourceSlicePublisher Create"},
        {"update resourceslices.resource.k8s.io", "ResourceSlicePublisher Update"},
        {"delete resourceslices.resource.k8s.io", "ResourceSlicePublisher Delete"},
        {"get resourceclaims.resource.k8s.io", "ClaimPreparer GETs each claim at Prepare "
                                               "(src/kubeletplugin/claim_preparer.cc)"},
        {"get nodes", "slices' owner reference (ResourceSlicePublisher::EnsureNodeUid), CD plugin's label read-modify-write "
                      "(src/computedomain/device_state.cc), GPU plugin's fabric label (src/gpu/plugin.cc)"},
        {"update nodes", "CD plugin removes resource.nvidia.com/computeDomain from its Node "
                         "(device_state.cc Update kNodes; nodes-policy keeps it to its own Node)"},
        {"patch nodes", "CD plugin's nvidia.com/gpu.clique label (src/computedomain/plugin.cc) and its domain label "
                        "(device_state.cc AddNodeLabel, a merge patch), GPU plugin removes "
                        "the device-health-reset annotation (src/gpu/device_health_reporter.cc)"},
        {"list nodes", "NVMLDeviceHealthCheck: the Node informer of device_health_reporter.cc; CD plugin: its Node "
                       "informer (DomainWatch, the domain label read at prepare)"},
        {"watch nodes", "NVMLDeviceHealthCheck and the CD plugin: their Node informers"},
        {"create events.events.k8s.io", "DeviceUnhealthy/DeviceHealthy and FabricTopologyNotApplied Events "
                                        "(src/k8s/event_recorder.cc Create)"},
        {"patch events.events.k8s.io", "event series (event_recorder.cc Patch)"},
        {"list computedomains.resource.nvidia.com", "DomainWatch's ComputeDomain informer "
                                                    "(src/computedomain/domain_watch.cc)"},
        {"watch computedomains.resource.nvidia.com", "DomainWatch's ComputeDomain informer"}}},
      {{kNamespace},
       {{"list computedomaincliques.resource.nvidia.com", "DomainWatch's clique informer (driver namespace)"},
        {"watch computedomaincliques.resource.nvidia.com", "DomainWatch's clique informer"},
        {"list pods", "DomainWatch's informer on this node's IMEX daemon pods (driver namespace)"},
        {"watch pods", "DomainWatch's daemon pod informer"},
        {"list deployments.apps", "MPSSupport: ApiMpsDeployments' informer (src/gpu/mps_daemon.cc)"},
        {"watch deployments.apps", "MPSSupport: ApiMpsDeployments' informer"},
        {"create deployments.apps", "MPSSupport: ApiMpsDeployments::Create"},
        {"delete deployments.apps", "MPSSupport: ApiMpsDeployments::Delete"}}},
  };
}

// compute-domain-controller.
std::vector<Grant> ControllerAllowList() {
  return {
      {{},
       {{"list computedomains.resource.nvidia.com", "ControllerCaches' domain informer "
                                                    "(src/computedomain/controller/caches.cc)"},
        {"watch computedomains.resource.nvidia.com", "ControllerCaches' domain informer"},
        {"patch computedomains.resource.nvidia.com", "its finalizer: added in controller.cc, removed by "
                                                     "ApiWriter::ReleaseDomain (merge patches)"},
        {"patch computedomains.resource.nvidia.com/status",
         "DomainStatusUpdater (domain_status.cc), imexChannelID (controller.cc), clique indexes by server-side "
         "apply and departed entries by JSON patch (clique_entries.cc)"},
        {"get resourceclaimtemplates.resource.k8s.io", "owned_objects.cc and cleanup.cc read a template"},
        {"list resourceclaimtemplates.resource.k8s.io", "ControllerCaches' template informer"},
        {"watch resourceclaimtemplates.resource.k8s.io", "ControllerCaches' template informer"},
        {"create resourceclaimtemplates.resource.k8s.io", "owned_objects.cc Create"},
        {"update resourceclaimtemplates.resource.k8s.io", "owned_objects.cc Update"},
        {"patch resourceclaimtemplates.resource.k8s.io", "ApiWriter::ReleaseOwned (finalizer removal)"},
        {"delete resourceclaimtemplates.resource.k8s.io", "ApiWriter::DeleteOwned"},
        {"list resourceclaims.resource.k8s.io", "ControllerCaches' claim informer (node labelling)"},
        {"watch resourceclaims.resource.k8s.io", "ControllerCaches' claim informer"},
        {"list nodes", "labelled-node informer (caches.cc) and NodeLabeler::RemoveNodeLabels' ListAll"},
        {"watch nodes", "labelled-node informer"},
        {"patch nodes", "NodeLabeler sets and removes resource.nvidia.com/computeDomain (merge patch; "
                        "controller-nodes-policy denies any other change)"},
        {"create events.events.k8s.io", "ApiWriter::Emit through src/k8s/event_recorder.cc Create"},
        {"patch events.events.k8s.io", "event series (event_recorder.cc Patch)"}}},
      {{kNamespace, kExtraNamespace},
       {{"get daemonsets.apps", "owned_objects.cc and ApiWriter::ReleaseOwned read the domain's DaemonSet"},
        {"list daemonsets.apps", "DaemonSet informers (caches.cc), one per daemon namespace"},
        {"watch daemonsets.apps", "DaemonSet informers"},
        {"create daemonsets.apps", "owned_objects.cc Create"},
        {"update daemonsets.apps", "owned_objects.cc Update"},
        {"patch daemonsets.apps", "ApiWriter::ReleaseOwned"},
        {"delete daemonsets.apps", "ApiWriter::DeleteOwned"},
        {"list computedomaincliques.resource.nvidia.com", "clique informer (caches.cc)"},
        {"watch computedomaincliques.resource.nvidia.com", "clique informer"},
        {"create computedomaincliques.resource.nvidia.com", "clique_entries.cc Create"},
        {"update computedomaincliques.resource.nvidia.com", "clique_entries.cc Update (entries, indexes)"},
        {"delete computedomaincliques.resource.nvidia.com", "cleanup.cc DeleteOwned (cliques of deleted domains)"}}},
      {{kNamespace},
       {{"get leases.coordination.k8s.io", "leader election (src/k8s/leader_election.cc Get)"},
        {"create leases.coordination.k8s.io", "leader election Create"},
        {"update leases.coordination.k8s.io", "leader election Update"},
        {"list pods", "daemon pod informer (caches.cc, driver namespace)"},
        {"watch pods", "daemon pod informer"}}},
  };
}

// compute-domain-daemon: the account of every daemon namespace.
std::vector<Grant> DaemonAllowList(const std::string& home, bool cliques) {
  std::vector<Grant> grants = {
      {{home},
       {{"patch pods", "CliqueMembership::LabelPod and ::Publish merge-patch its own pod "
                       "(src/computedomain/clique_membership.cc; daemon-pods-policy holds it to its pod)"}}}};
  if (cliques) {
    grants[0].rights.push_back({"list computedomaincliques.resource.nvidia.com",
                                "ImexDaemon's informer on its clique (src/computedomain/imex_daemon.cc)"});
    grants[0].rights.push_back({"watch computedomaincliques.resource.nvidia.com", "ImexDaemon's clique informer"});
  } else {
    grants.push_back(
        {{},
         {{"list computedomains.resource.nvidia.com", "ImexDaemon's informer on its ComputeDomain (another namespace)"},
          {"watch computedomains.resource.nvidia.com", "ImexDaemon's ComputeDomain informer"},
          {"get computedomains.resource.nvidia.com", "CliqueMembership::Leave re-reads the entry list"},
          {"patch computedomains.resource.nvidia.com/status",
           "CliqueMembership::ApplyStatusEntry (server-side apply) and ::Leave (JSON patch); "
           "daemon-status-policy holds it to its domain and its node's entry"}}});
  }
  return grants;
}

std::set<std::string> Expected(const std::vector<Grant>& grants, const std::string& ns) {
  std::set<std::string> out;
  for (const Grant& g : grants) {
    if (!g.namespaces.empty() && !g.namespaces.contains(ns)) continue;
    for (const Right& r : g.rights) out.insert(r.right);
  }
  return out;
}

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

std::string Join(const std::set<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += "\n    " + s;
  return out.empty() ? " (none)" : out;
}

class RbacClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    helm_home_ = new fs::path(fs::temp_directory_path() / ("nvdra-rbac-test-" + std::to_string(::getpid())));
    fs::create_directories(*helm_home_);
    for (const char* var : {"HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"}) {
      ::setenv(var, (*helm_home_ / var).c_str(), 1);
    }
    std::string error;
    cluster_ = TestCluster::Start(&error).release();
    if (cluster_ == nullptr) FAIL() << "control plane did not start:\n" << error;
    for (const char* ns : {kNamespace, kExtraNamespace, kUserNamespace}) {
      CommandResult r = cluster_->Kubectl({"create", "namespace", ns});
      ASSERT_TRUE(r.ok()) << r.err;
    }
    CommandResult nobody = cluster_->Kubectl({"create", "serviceaccount", "nobody", "-n", kUserNamespace});
    ASSERT_TRUE(nobody.ok()) << nobody.err;
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

  // The chart under test; NVDRA_TEST_CHART_DIR overrides it (to show what
  // this test reports about another revision of the chart).
  static std::string ChartDir() {
    const char* dir = std::getenv("NVDRA_TEST_CHART_DIR");
    return dir != nullptr && *dir != '\0' ? dir : NVDRA_CHART_DIR;
  }
  static CommandResult Helm(const std::string& verb, const std::vector<std::string>& values) {
    std::vector<std::string> argv = {(cluster_->bin_dir() / "helm").string(),
                                     "--kubeconfig",
                                     cluster_->kubeconfig().string(),
                                     verb,
                                     kRelease,
                                     ChartDir(),
                                     "--namespace",
                                     kNamespace};
    for (const std::string& v : values) {
      argv.push_back("--set");
      argv.push_back(v);
    }
    return RunCommand(argv, "", std::chrono::minutes(5));
  }
  static void Uninstall() {
    CommandResult un = RunCommand({(cluster_->bin_dir() / "helm").string(), "--kubeconfig",
                                   cluster_->kubeconfig().string(), "uninstall", kRelease, "--namespace", kNamespace,
                                   "--wait", "--timeout", "2m"},
                                  "", std::chrono::minutes(3));
    EXPECT_TRUE(un.ok()) << un.err;
  }

  // A kubeconfig for the API server that authenticates with `token` only.
  static fs::path TokenKubeconfig(const std::string& token, const std::string& name) {
    CommandResult view = cluster_->Kubectl({"config", "view", "--raw", "--minify", "-o", "json"});
    json admin = json::parse(view.out, nullptr, false);
    json cluster_entry = admin["clusters"][0];
    json config = {{"apiVersion", "v1"},
                   {"kind", "Config"},
                   {"clusters", json::array({cluster_entry})},
                   {"users", json::array({{{"name", name}, {"user", {{"token", token}}}}})},
                   {"contexts", json::array({{{"name", name},
                                              {"context", {{"cluster", cluster_entry["name"]}, {"user", name}}}}})},
                   {"current-context", name}};
    fs::path path = cluster_->dir() / (name + ".kubeconfig");
    std::ofstream(path) << config.dump();
    return path;
  }
  // A kubeconfig with a fresh token of `account` in `ns`; bound to `pod`
  // when given (the token then carries the pod's name and node).
  static fs::path AccountKubeconfig(const std::string& ns, const std::string& account, const std::string& pod = "") {
    std::vector<std::string> args = {"create", "token", account, "-n", ns};
    if (!pod.empty()) args.insert(args.end(), {"--bound-object-kind", "Pod", "--bound-object-name", pod});
    CommandResult token = cluster_->Kubectl(args);
    EXPECT_TRUE(token.ok()) << token.err;
    return TokenKubeconfig(Trimmed(token.out), ns + "-" + account + (pod.empty() ? "" : "-" + pod));
  }
  static CommandResult As(const fs::path& kubeconfig, const std::vector<std::string>& args,
                          const std::string& input = "") {
    std::vector<std::string> argv = {(cluster_->bin_dir() / "kubectl").string(), "--kubeconfig", kubeconfig.string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, input);
  }

  // What the API server says `kubeconfig`'s user may do in `ns`: the
  // SelfSubjectRulesReview that `kubectl auth can-i --list` prints, one
  // "<verb> <resource>[.<group>]" per right.
  static std::set<std::string> Rights(const fs::path& kubeconfig, const std::string& ns) {
    json review = {{"apiVersion", "authorization.k8s.io/v1"},
                   {"kind", "SelfSubjectRulesReview"},
                   {"spec", {{"namespace", ns}}}};
    // --validate=false: kubectl's client-side check lists CRDs, which these
    // accounts may not.
    CommandResult r = As(kubeconfig, {"create", "--validate=false", "-f", "-", "-o", "json"}, review.dump());
    EXPECT_TRUE(r.ok()) << r.err;
    json answer = json::parse(r.out, nullptr, false);
    std::set<std::string> out;
    if (answer.is_discarded()) return out;
    EXPECT_FALSE(answer["status"].value("incomplete", false)) << answer["status"].dump();
    for (const json& rule : answer["status"].value("resourceRules", json::array())) {
      const json names = rule.value("resourceNames", json::array());
      for (const json& verb : rule.value("verbs", json::array())) {
        for (const json& group : rule.value("apiGroups", json::array())) {
          for (const json& resource : rule.value("resources", json::array())) {
            std::string right = verb.get<std::string>() + " ";
            std::string res = resource.get<std::string>();
            // "computedomains/status" in group g reads "computedomains.g/status".
            const auto slash = res.find('/');
            const std::string base = res.substr(0, slash);
            const std::string sub = slash == std::string::npos ? "" : res.substr(slash);
            right += base + (group.get<std::string>().empty() ? "" : "." + group.get<std::string>()) + sub;
            if (names.empty()) {
              out.insert(right);
            } else {
              for (const json& n : names) out.insert(right + " named " + n.get<std::string>());
            }
          }
        }
      }
    }
    return out;
  }

  // Rights of `account` beyond those of any authenticated account (account
  // "nobody" of the user's namespace, bound to nothing), in `ns`.
  static std::set<std::string> RightsBeyondBaseline(const fs::path& kubeconfig, const std::string& ns) {
    static const fs::path* nobody = new fs::path(AccountKubeconfig(kUserNamespace, "nobody"));
    std::set<std::string> all = Rights(kubeconfig, ns);
    for (const std::string& r : Rights(*nobody, ns)) all.erase(r);
    return all;
  }

  // Asserts that `account` may do exactly `expected` in each namespace.
  // RBAC objects reach the authorizer's cache a moment after they are
  // written, and no event tells when: asks again for up to 30 s.
  static void ExpectExactly(const std::string& account_ns, const std::string& account,
                            const std::vector<Grant>& grants) {
    const fs::path kubeconfig = AccountKubeconfig(account_ns, account);
    for (const std::string ns : {kNamespace, kExtraNamespace, kUserNamespace}) {
      const std::set<std::string> want = Expected(grants, ns);
      std::set<std::string> got;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      do {
        got = RightsBeyondBaseline(kubeconfig, ns);
        if (got == want) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      } while (std::chrono::steady_clock::now() < deadline);
      std::set<std::string> extra, missing;
      for (const std::string& r : got) {
        if (!want.contains(r)) extra.insert(r);
      }
      for (const std::string& r : want) {
        if (!got.contains(r)) missing.insert(r);
      }
      EXPECT_TRUE(extra.empty() && missing.empty())
          << account_ns << "/" << account << " in namespace " << ns << ":\n  granted but called nowhere:"
          << Join(extra) << "\n  called but not granted:" << Join(missing);
    }
  }

  // Our API client (src/k8s) authenticating as `kubeconfig`'s token.
  static std::unique_ptr<k8s::Client> ClientFor(const fs::path& kubeconfig) {
    auto config = k8s::LoadKubeconfig({kubeconfig});
    EXPECT_TRUE(config.ok()) << config.status().ToString();
    if (!config.ok()) return nullptr;
    auto client = k8s::Client::New(*config);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? *std::move(client) : nullptr;
  }

  // Repeats `request` (a server-side dry run) until a ValidatingAdmissionPolicy
  // answers it: the policies reach the API server a moment after the install.
  template <typename Request>
  static void WaitFor(const std::string& policy, Request request) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
      common::Status answer = request();
      if (answer.message().find("ValidatingAdmissionPolicy") != std::string::npos) return;
      ASSERT_LT(std::chrono::steady_clock::now(), deadline)
          << policy << " did not answer within 60 s; last answer: " << answer.ToString();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  static TestCluster* cluster_;
  static fs::path* helm_home_;
};

TestCluster* RbacClusterTest::cluster_ = nullptr;
fs::path* RbacClusterTest::helm_home_ = nullptr;

TEST_F(RbacClusterTest, EachAccountMayDoExactlyWhatItsCallsNeed) {
  CommandResult install = Helm("install", ChartValues(/*cliques=*/true));
  ASSERT_TRUE(install.ok()) << install.out << install.err;

  ExpectExactly(kNamespace, kPluginAccount, PluginAllowList());
  ExpectExactly(kNamespace, kControllerAccount, ControllerAllowList());
  // No RBAC at all: it makes no API calls (and its pods mount no token).
  ExpectExactly(kNamespace, kWebhookAccount, {});
  ExpectExactly(kNamespace, kDaemonAccount, DaemonAllowList(kNamespace, /*cliques=*/true));
  ExpectExactly(kExtraNamespace, kDaemonAccount, DaemonAllowList(kExtraNamespace, /*cliques=*/true));

  // Gate ComputeDomainCliques off: the daemons publish in their
  // ComputeDomain's status instead of reading a clique.
  CommandResult upgrade = Helm("upgrade", ChartValues(/*cliques=*/false));
  ASSERT_TRUE(upgrade.ok()) << upgrade.out << upgrade.err;
  ExpectExactly(kNamespace, kDaemonAccount, DaemonAllowList(kNamespace, /*cliques=*/false));
  ExpectExactly(kExtraNamespace, kDaemonAccount, DaemonAllowList(kExtraNamespace, /*cliques=*/false));
  ExpectExactly(kNamespace, kControllerAccount, ControllerAllowList());

  Uninstall();
}

json Domain(const std::string& name) {
  return {{"apiVersion", "resource.nvidia.com/v1beta1"},
          {"kind", "ComputeDomain"},
          {"metadata", {{"name", name}, {"namespace", kUserNamespace}}},
          {"spec", {{"numNodes", 0}, {"channel", {{"resourceClaimTemplate", {{"name", name + "-channel"}}}}}}}};
}

json Entry(const std::string& node, const std::string& ip) {
  return {{"name", node}, {"ipAddress", ip}, {"cliqueID", "c.1"}, {"status", "Ready"}};
}

TEST_F(RbacClusterTest, PoliciesHoldDaemonToItsPodAndDomainAndControllerToItsNodeLabel) {
  // Gate off, so that the daemons' ComputeDomain status rights exist to be
  // held by the policy.
  CommandResult install = Helm("install", ChartValues(/*cliques=*/false));
  ASSERT_TRUE(install.ok()) << install.out << install.err;

  for (const char* node : {"node-a", "node-b"}) {
    // Tainted: no pod of the release is bound to a node without a kubelet.
    ASSERT_TRUE(cluster_
                    ->Apply({{"apiVersion", "v1"},
                             {"kind", "Node"},
                             {"metadata", {{"name", node}}},
                             {"spec", {{"taints", json::array({{{"key", "nvdra.test/no-kubelet"},
                                                                 {"effect", "NoSchedule"}}})}}}})
                    .ok());
  }
  // Two domains, each with a status entry of node-b written by its daemon.
  std::map<std::string, std::string> uid;
  for (const char* cd : {"cd-a", "cd-b"}) {
    ASSERT_TRUE(cluster_->Apply(Domain(cd)).ok());
    CommandResult seeded = cluster_->Kubectl(
        {"patch", "computedomain", cd, "-n", kUserNamespace, "--subresource=status", "--type=merge", "-p",
         json({{"status", {{"status", "NotReady"}, {"nodes", json::array({Entry("node-b", "10.0.0.2")})}}}}).dump()});
    ASSERT_TRUE(seeded.ok()) << seeded.err;
    auto got = cluster_->Get({"computedomain", cd, "-n", kUserNamespace});
    ASSERT_TRUE(got.has_value());
    uid[cd] = (*got)["metadata"]["uid"];
  }
  // Daemon pods as the domains' DaemonSets name them
  // (computedomain-daemon-<domain UID>-<suffix>); no kubelet runs them, the
  // tokens only need them to exist. Pod A serves cd-a on node-a.
  auto daemon_pod = [&](const std::string& cd, const std::string& node, const std::string& ns) {
    const std::string name = "computedomain-daemon-" + uid[cd] + "-" + node.substr(node.size() - 1) + "xxxx";
    CommandResult r = cluster_->Apply(
        {{"apiVersion", "v1"},
         {"kind", "Pod"},
         {"metadata", {{"name", name}, {"namespace", ns}, {"labels", {{kDomainLabel, uid[cd]}}}}},
         {"spec",
          {{"nodeName", node},
           {"serviceAccountName", ns == kUserNamespace ? "nobody" : kDaemonAccount},
           {"containers", json::array({{{"name", "compute-domain-daemon"}, {"image", "nvdra.local/none:v0"}}})}}}});
    EXPECT_TRUE(r.ok()) << r.err;
    return name;
  };
  const std::string pod_a = daemon_pod("cd-a", "node-a", kNamespace);
  const std::string pod_b = daemon_pod("cd-b", "node-b", kNamespace);
  const std::string user_pod = daemon_pod("cd-a", "node-b", kUserNamespace);
  const fs::path daemon_a = AccountKubeconfig(kNamespace, kDaemonAccount, pod_a);

  CommandResult who = As(daemon_a, {"auth", "whoami", "-o", "json"});
  ASSERT_TRUE(who.ok()) << who.err;
  json identity = json::parse(who.out, nullptr, false);
  ASSERT_FALSE(identity.is_discarded());
  EXPECT_EQ(identity["status"]["userInfo"]["extra"]["authentication.kubernetes.io/pod-name"][0], pod_a);
  EXPECT_EQ(identity["status"]["userInfo"]["extra"]["authentication.kubernetes.io/node-name"][0], "node-a");

  // The daemon's own calls (src/computedomain/clique_membership.cc) through
  // our client, as daemon A's pod-bound token.
  std::unique_ptr<k8s::Client> client = ClientFor(daemon_a);
  ASSERT_NE(client, nullptr);
  const computedomain::DaemonIdentity a{.compute_domain_uid = uid["cd-a"],
                                        .clique_id = "c.1",
                                        .node_name = "node-a",
                                        .pod_name = pod_a,
                                        .pod_namespace = kNamespace,
                                        .pod_uid = "",
                                        .pod_ip = "10.0.0.1"};
  auto with_pod = [&](const std::string& ns, const std::string& pod) {
    computedomain::DaemonIdentity id = a;
    id.pod_namespace = ns;
    id.pod_name = pod;
    return id;
  };
  const json add_a = json::array({{{"op", "add"}, {"path", "/status/nodes/-"}, {"value", Entry("node-a", "10.0.0.1")}}});
  auto patch_status = [&](const std::string& cd, const json& patch, bool dry_run = false) {
    k8s::PatchOptions options;
    options.subresource = "status";
    options.dry_run = dry_run;
    return client->Patch(k8s::resources::kComputeDomains, kUserNamespace, cd, k8s::PatchType::kJson, patch, options)
        .status();
  };
  auto patch_pod = [&](const std::string& pod, const json& patch, bool dry_run = false) {
    k8s::PatchOptions options;
    options.dry_run = dry_run;
    return client->Patch(k8s::resources::kPods, kNamespace, pod, k8s::PatchType::kMerge, patch, options).status();
  };
  // RBAC and the policies reach the API server a moment after the install:
  // ask (dry run) until the policies answer.
  WaitFor("daemon-pods policy", [&] { return patch_pod(pod_b, {{"metadata", {{"labels", {{"x", "y"}}}}}}, true); });
  WaitFor("daemon-status policy", [&] { return patch_status("cd-b", add_a, true); });

  // Pods. Its own: the clique label, then the status annotations (clique store).
  computedomain::CliqueMembership own_pod(*client, a, computedomain::MembershipStore::kClique);
  common::Status labelled = own_pod.LabelPod();
  EXPECT_TRUE(labelled.ok()) << "the daemon could not label its own pod: " << labelled.ToString();
  auto published = own_pod.Publish(computedomain::DaemonStatus{.status = "NotReady", .reason = "FabricUnhealthy"});
  EXPECT_TRUE(published.ok()) << "the daemon could not publish on its own pod: " << published.status().ToString();
  published = own_pod.Publish("Ready");  // removes the reason annotation
  EXPECT_TRUE(published.ok()) << published.status().ToString();
  auto after = cluster_->Get({"pod", pod_a, "-n", kNamespace});
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ((*after)["metadata"]["annotations"][kDaemonStatusAnnotation], "Ready");
  EXPECT_EQ((*after)["metadata"]["labels"][kCliqueLabel], "c.1");
  // Another daemon's pod of the same namespace: RBAC lets it through, the policy does not.
  computedomain::CliqueMembership as_b(*client, with_pod(kNamespace, pod_b), computedomain::MembershipStore::kClique);
  auto other = as_b.Publish("Ready");
  EXPECT_FALSE(other.ok()) << "daemon A published on daemon B's pod";
  EXPECT_NE(other.status().message().find("may only patch its own pod"), std::string::npos)
      << other.status().ToString();
  // Its own pod moved into another domain (the plugin and controller select
  // daemon pods by this label): denied. So is any other key.
  common::Status relabel = patch_pod(pod_a, {{"metadata", {{"labels", {{kDomainLabel, uid["cd-b"]}}}}}});
  EXPECT_FALSE(relabel.ok()) << "daemon A moved its pod into domain B";
  EXPECT_NE(relabel.message().find("may change only the label " + std::string(kCliqueLabel)), std::string::npos)
      << relabel.ToString();
  common::Status annotate = patch_pod(pod_a, {{"metadata", {{"annotations", {{"other", "x"}}}}}});
  EXPECT_FALSE(annotate.ok()) << "daemon A set another annotation on its pod";
  EXPECT_NE(annotate.message().find("ValidatingAdmissionPolicy"), std::string::npos) << annotate.ToString();
  // A pod of another namespace: RBAC.
  computedomain::CliqueMembership elsewhere(*client, with_pod(kUserNamespace, user_pod));
  common::Status foreign_pod = elsewhere.LabelPod();
  EXPECT_TRUE(k8s::IsForbidden(foreign_pod)) << "daemon A patched a pod of namespace " << kUserNamespace << ": "
                                             << foreign_pod.ToString();
  EXPECT_TRUE(k8s::IsForbidden(client->List(k8s::resources::kPods, kNamespace).status())) << "the daemon lists pods";

  // ComputeDomain status (gate off). Its own node's entry in its own domain:
  // server-side apply (ApplyStatusEntry), then Leave's test-and-remove.
  computedomain::CliqueMembership own_domain(*client, a, computedomain::MembershipStore::kComputeDomainStatus, "cd-a",
                                             kUserNamespace);
  auto joined = own_domain.Publish("Ready");
  EXPECT_TRUE(joined.ok()) << "the daemon could not write its entry in its domain: " << joined.status().ToString();
  auto cd_a = cluster_->Get({"computedomain", "cd-a", "-n", kUserNamespace});
  ASSERT_TRUE(cd_a.has_value());
  EXPECT_EQ((*cd_a)["status"]["nodes"].size(), 2u) << cd_a->dump();
  // Another domain: denied.
  computedomain::CliqueMembership other_domain(*client, a, computedomain::MembershipStore::kComputeDomainStatus,
                                               "cd-b", kUserNamespace);
  auto foreign = other_domain.Publish("Ready");
  EXPECT_FALSE(foreign.ok()) << "daemon A wrote into cd-b's status";
  EXPECT_NE(foreign.status().message().find("may only write the status of the ComputeDomain it serves"),
            std::string::npos)
      << foreign.status().ToString();
  // Another node's entry of its own domain, and the domain's own status: denied.
  common::Status other_entry = patch_status(
      "cd-a", json::array({{{"op", "replace"}, {"path", "/status/nodes/0/status"}, {"value", "NotReady"}}}));
  EXPECT_FALSE(other_entry.ok()) << "daemon A changed node-b's entry";
  EXPECT_NE(other_entry.message().find("may only write its own node's entry"), std::string::npos)
      << other_entry.ToString();
  common::Status overall =
      patch_status("cd-a", json::array({{{"op", "replace"}, {"path", "/status/status"}, {"value", "Ready"}}}));
  EXPECT_FALSE(overall.ok()) << "daemon A set its domain Ready";
  EXPECT_NE(overall.message().find("ValidatingAdmissionPolicy"), std::string::npos) << overall.ToString();
  // The domain itself (not its status): RBAC.
  common::Status domain_patch = client
                                    ->Patch(k8s::resources::kComputeDomains, kUserNamespace, "cd-a",
                                            k8s::PatchType::kMerge, {{"metadata", {{"labels", {{"x", "y"}}}}}})
                                    .status();
  EXPECT_TRUE(k8s::IsForbidden(domain_patch)) << "the daemon patched a ComputeDomain: " << domain_patch.ToString();
  common::Status left = own_domain.Leave();
  EXPECT_TRUE(left.ok()) << "the daemon could not remove its entry: " << left.ToString();
  cd_a = cluster_->Get({"computedomain", "cd-a", "-n", kUserNamespace});
  ASSERT_TRUE(cd_a.has_value());
  ASSERT_EQ((*cd_a)["status"]["nodes"].size(), 1u) << cd_a->dump();
  EXPECT_EQ((*cd_a)["status"]["nodes"][0]["name"], "node-b");
  EXPECT_EQ((*cd_a)["status"]["status"], "NotReady");

  // A token of the daemon account bound to no pod names no pod: denied.
  std::unique_ptr<k8s::Client> podless = ClientFor(AccountKubeconfig(kNamespace, kDaemonAccount));
  ASSERT_NE(podless, nullptr);
  computedomain::CliqueMembership podless_membership(*podless, a);
  common::Status podless_label = podless_membership.LabelPod();
  EXPECT_FALSE(podless_label.ok()) << "a daemon token bound to no pod patched a pod";
  EXPECT_NE(podless_label.message().find("may only patch its own pod"), std::string::npos)
      << podless_label.ToString();

  // The controller: its label on any Node (NodeLabeler's merge patches),
  // nothing else.
  std::unique_ptr<k8s::Client> controller = ClientFor(AccountKubeconfig(kNamespace, kControllerAccount));
  ASSERT_NE(controller, nullptr);
  auto patch_node = [&](const json& patch, bool dry_run = false) {
    k8s::PatchOptions options;
    options.dry_run = dry_run;
    return controller->Patch(k8s::resources::kNodes, "", "node-a", k8s::PatchType::kMerge, patch, options).status();
  };
  const json other_label = {{"metadata", {{"labels", {{"nvdra.test/other", "x"}}}}}};
  WaitFor("controller-nodes policy", [&] { return patch_node(other_label, true); });
  common::Status set = patch_node({{"metadata", {{"labels", {{kDomainLabel, uid["cd-a"]}}}}}});
  EXPECT_TRUE(set.ok()) << "the controller could not label a Node: " << set.ToString();
  common::Status removed = patch_node({{"metadata", {{"labels", {{kDomainLabel, nullptr}}}}}});
  EXPECT_TRUE(removed.ok()) << "the controller could not remove its label: " << removed.ToString();
  common::Status other_node_label = patch_node(other_label);
  EXPECT_FALSE(other_node_label.ok()) << "the controller set another label";
  EXPECT_NE(other_node_label.message().find("may change only the label " + std::string(kDomainLabel)),
            std::string::npos)
      << other_node_label.ToString();
  common::Status node_annotation = patch_node({{"metadata", {{"annotations", {{"nvdra.test/other", "x"}}}}}});
  EXPECT_FALSE(node_annotation.ok()) << "the controller annotated a Node";
  common::Status cordon = patch_node({{"spec", {{"unschedulable", true}}}});
  EXPECT_FALSE(cordon.ok()) << "the controller cordoned a Node";
  EXPECT_NE(cordon.message().find("ValidatingAdmissionPolicy"), std::string::npos) << cordon.ToString();
  auto node_a = cluster_->Get({"node", "node-a"});
  ASSERT_TRUE(node_a.has_value());
  EXPECT_FALSE((*node_a)["metadata"]["labels"].contains("nvdra.test/other"));
  EXPECT_FALSE((*node_a)["metadata"]["labels"].contains(kDomainLabel));
  EXPECT_FALSE((*node_a)["spec"].value("unschedulable", false));

  // Test objects outside the chart, then the release.
  for (const auto& [ns, pod] : {std::pair{kNamespace, pod_a}, {kNamespace, pod_b}, {kUserNamespace, user_pod}}) {
    cluster_->Kubectl({"delete", "pod", "-n", ns, pod, "--force", "--grace-period=0"});
  }
  cluster_->Kubectl({"delete", "computedomain", "-n", kUserNamespace, "cd-a", "cd-b", "--ignore-not-found"});
  cluster_->Kubectl({"delete", "node", "node-a", "node-b", "--ignore-not-found"});
  Uninstall();
}

}  // namespace
}  // namespace nvdra::testing
