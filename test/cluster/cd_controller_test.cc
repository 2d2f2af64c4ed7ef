// compute-domain-controller as a process against a real control plane, with
// the chart's CRDs (deployments/helm/dra-driver-nvidia-gpu/crds). The test
// plays the daemons with src/computedomain/clique_membership (each entry
// applied under its node's own field manager, exactly as the daemon does),
// over pods that are plain objects (no scheduler serves them).
//
// Checks: a ComputeDomain gets the finalizer, the daemon DaemonSet and both
// claim templates (names, labels, finalizers, configs); indexes 0..n-1,
// stable, gap-filling, none beyond --max-nodes-per-imex-domain (with an
// Event); status NotReady with an Event saying why, then Ready once numNodes
// Ready entries are there; status.nodes follows the cliques; deletion leaves
// nothing (DaemonSet, templates, cliques, node labels, the domain);
// objects of vanished domains are removed at start; a controller killed
// mid-cascade and restarted converges; two controllers elect one leader and
// the other takes over; channel isolation gives two domains distinct
// channels and selectors. One test runs a real compute-domain-daemon (mock
// NVML gb200-tray, simulated nvidia-imex): a GPU whose NVLink fabric turns
// unhealthy makes its entry NotReady, and the clique, the domain's
// status.nodes and the NotReady Event say which node and why, until it is
// healthy again. Waits are woken by watch events.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cluster_client.h"
#include "computedomain/clique_membership.h"
#include "gpu_plugin_harness.h"
#include "k8s/cache/informer.h"
#include "k8s/rest_list_watch.h"
#include "mock_fabric.h"

namespace nvdra::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr char kUserNs[] = "cdc-user";
constexpr char kDriverNs[] = "cdc-driver";
constexpr char kFinalizer[] = "resource.nvidia.com/computeDomain";
constexpr char kCdLabel[] = "resource.nvidia.com/computeDomain";
constexpr char kTargetLabel[] = "resource.nvidia.com/computeDomainTarget";
constexpr char kLeaseName[] = "cdc-controller";

std::string Str(const json& o, const char* pointer) {
  json::json_pointer p(pointer);
  return o.contains(p) && o.at(p).is_string() ? o.at(p).get<std::string>() : "";
}
bool HasFinalizer(const json& o) {
  if (!o.contains("/metadata/finalizers"_json_pointer)) return false;
  for (const json& f : o["metadata"]["finalizers"]) {
    if (f == kFinalizer) return true;
  }
  return false;
}
std::map<std::string, json> Daemons(const json& clique) {
  std::map<std::string, json> out;
  if (!clique.contains("daemons")) return out;
  for (const json& e : clique["daemons"]) out[e.value("nodeName", "")] = e;
  return out;
}

// The index of `node`'s entry in a clique, -1 when it has none (yet).
std::int64_t IndexOf(const json& clique, const std::string& node) {
  auto entries = Daemons(clique);
  auto it = entries.find(node);
  if (it == entries.end() || !it->second.contains("index")) return -1;
  return it->second["index"].get<std::int64_t>();
}

// Every object of one resource (in one namespace or all), kept current by
// an informer; waits are woken by its events.
class ObjectWatch {
 public:
  ObjectWatch(k8s::Client& client, const k8s::ResourceRef& resource, const std::string& ns) {
    k8s::cache::InformerOptions options;
    options.description = resource.resource;
    informer_ = std::make_unique<k8s::cache::Informer>(std::make_unique<k8s::RestListWatch>(client, resource, ns),
                                                       std::move(options));
    informer_->AddEventHandler({.on_add = [this](const k8s::cache::ObjectPtr&) { Notify(); },
                                .on_update = [this](const k8s::cache::ObjectPtr&,
                                                    const k8s::cache::ObjectPtr&) { Notify(); },
                                .on_delete = [this](const k8s::cache::ObjectPtr&) { Notify(); },
                                .needs_old_object = false});
    informer_->Start();
    informer_->WaitForSyncUntil(k8s::workqueue::RealClock().Now() + 60s);
  }
  ~ObjectWatch() { informer_->Stop(); }

  std::optional<json> Get(const std::string& key) const {
    auto o = informer_->store().Get(key);
    return o ? std::optional<json>(*o) : std::nullopt;
  }
  std::vector<json> List() const {
    std::vector<json> out;
    for (const auto& o : informer_->store().List()) out.push_back(*o);
    return out;
  }
  // Waits until pred(object or nullopt) holds for `key` ("ns/name").
  bool WaitFor(const std::string& key, const std::function<bool(const std::optional<json>&)>& pred,
               std::chrono::milliseconds bound = 60s) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, bound, [&] { return pred(Get(key)); });
  }
  bool WaitForGone(const std::string& key, std::chrono::milliseconds bound = 60s) {
    return WaitFor(key, [](const std::optional<json>& o) { return !o.has_value(); }, bound);
  }
  // Waits until pred holds for the whole list.
  bool WaitForList(const std::function<bool(const std::vector<json>&)>& pred, std::chrono::milliseconds bound = 60s) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, bound, [&] { return pred(List()); });
  }

 private:
  void Notify() {
    { std::lock_guard lock(mutex_); }
    changed_.notify_all();
  }
  std::mutex mutex_;
  std::condition_variable changed_;
  std::unique_ptr<k8s::cache::Informer> informer_;
};

// One played daemon: its pod object and its membership.
struct PlayedDaemon {
  std::string node;
  std::unique_ptr<computedomain::CliqueMembership> membership;
};

class CdControllerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    env_ = new ClusterClient();
    const std::string error = StartClusterClient(*env_, kUserNs);
    ASSERT_EQ(error, "") << error;
    auto ns = env_->client->Create(k8s::resources::kNamespaces, "",
                                   {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", kDriverNs}}}});
    ASSERT_TRUE(ns.ok()) << ns.status();
    auto owner = env_->client->Create(
        k8s::resources::kConfigMaps, kDriverNs,
        {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", "cdc-played-daemons"}}}});
    ASSERT_TRUE(owner.ok()) << owner.status();
    played_owner_uid_ = Str(*owner, "/metadata/uid");
    const std::string crds = std::string(NVDRA_SOURCE_DIR) + "/deployments/helm/dra-driver-nvidia-gpu/crds";
    CommandResult applied = env_->cluster->Kubectl({"apply", "-f", crds});
    ASSERT_TRUE(applied.ok()) << applied.err;
    CommandResult established = env_->cluster->Kubectl(
        {"wait", "--for=condition=Established", "--timeout=60s", "crd/computedomains.resource.nvidia.com",
         "crd/computedomaincliques.resource.nvidia.com"});
    ASSERT_TRUE(established.ok()) << established.err;
    cds_ = new ObjectWatch(*env_->client, k8s::resources::kComputeDomains, kUserNs);
    cliques_ = new ObjectWatch(*env_->client, k8s::resources::kComputeDomainCliques, kDriverNs);
    dss_ = new ObjectWatch(*env_->client, k8s::resources::kDaemonSets, kDriverNs);
    rcts_ = new ObjectWatch(*env_->client, k8s::resources::kResourceClaimTemplates, "");
    events_ = new ObjectWatch(*env_->client, k8s::resources::kEvents, kUserNs);
    leases_ = new ObjectWatch(*env_->client, k8s::resources::kLeases, kDriverNs);
    nodes_ = new ObjectWatch(*env_->client, k8s::resources::kNodes, "");
  }
  static void TearDownTestSuite() {
    for (ObjectWatch** w : {&cds_, &cliques_, &dss_, &rcts_, &events_, &leases_, &nodes_}) {
      delete *w;
      *w = nullptr;
    }
    delete env_;
    env_ = nullptr;
  }

  // A failed test shows what its controllers logged (they run as separate
  // processes; on a CI machine their /tmp logs are not kept).
  void TearDown() override {
    if (HasFailure()) {
      for (const std::string& log : controller_logs_) {
        std::ifstream in(log);
        std::deque<std::string> tail;
        for (std::string line; std::getline(in, line);) {
          tail.push_back(std::move(line));
          if (tail.size() > 60) tail.pop_front();
        }
        std::cerr << "--- last lines of " << log << "\n";
        for (const std::string& line : tail) std::cerr << line.substr(0, 600) << "\n";
      }
    }
    controller_logs_.clear();
  }

  std::unique_ptr<PluginProcess> StartController(const std::string& pod, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {CD_CONTROLLER,
                                     "--kubeconfig=" + env_->cluster->kubeconfig().string(),
                                     "--pod-name=" + pod,
                                     "--namespace=" + std::string(kDriverNs),
                                     "--image-name=nvdra.local/driver:test",
                                     "--log-verbosity-cd-daemon=2",
                                     "--templates-dir=" + std::string(NVDRA_SOURCE_DIR) + "/templates",
                                     "--kube-api-qps=200",
                                     "--kube-api-burst=400",
                                     "-v=2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const std::string log = "/tmp/cdc-" + pod + "-" + std::to_string(getpid()) + ".log";
    if (std::find(controller_logs_.begin(), controller_logs_.end(), log) == controller_logs_.end()) {
      std::filesystem::remove(log);  // a restart within one test appends
      controller_logs_.push_back(log);
    }
    auto process = std::make_unique<PluginProcess>(argv, std::vector<std::string>{"PATH=/usr/bin:/bin"}, log);
    EXPECT_TRUE(process->Start()) << log;
    return process;
  }

  static json CreateCd(const std::string& name, int num_nodes) {
    json cd = {{"apiVersion", "resource.nvidia.com/v1beta1"},
               {"kind", "ComputeDomain"},
               {"metadata", {{"name", name}, {"namespace", kUserNs}}},
               {"spec", {{"numNodes", num_nodes}, {"channel", {{"resourceClaimTemplate", {{"name", name + "-channel"}}}}}}}};
    auto created = env_->client->Create(k8s::resources::kComputeDomains, kUserNs, cd);
    EXPECT_TRUE(created.ok()) << created.status();
    return created.ok() ? *created : json::object();
  }
  static std::string CdKey(const std::string& name) { return std::string(kUserNs) + "/" + name; }
  static std::string DaemonKey(const std::string& uid) {
    return std::string(kDriverNs) + "/computedomain-daemon-" + uid;
  }

  // A pod object to own the entry (the clique's owner references need a
  // live owner, or the garbage collector removes the clique).
  // Labelled and bound to its node as the DaemonSet's pods are: the
  // controller removes entries of nodes without a daemon pod.
  // Without `kubelet_reported_ip` the pod has no status.podIP yet (the
  // kubelet reports it with its next status update): only its daemon's
  // published IP.
  static PlayedDaemon Daemon(const std::string& uid, const std::string& clique, const std::string& node,
                             bool kubelet_reported_ip = true) {
    EnsureNode(node);
    const std::string pod = DaemonPodName(uid, node);
    json object = PodObject(pod, {{kCdLabel, uid}}, node);
    auto created = env_->client->Create(k8s::resources::kPods, kDriverNs, object);
    EXPECT_TRUE(created.ok()) << created.status();
    const std::string ip = "10.9.0." + std::to_string(node.back() - '0' + 1);
    if (kubelet_reported_ip) {
      // The pod IP the daemon publishes, as the kubelet would report it.
      auto patched = env_->client->Patch(k8s::resources::kPods, kDriverNs, pod, k8s::PatchType::kMerge,
                                         {{"status", {{"podIP", ip}}}}, StatusPatch());
      EXPECT_TRUE(patched.ok()) << patched.status();
    }
    computedomain::DaemonIdentity identity{.compute_domain_uid = uid,
                                           .clique_id = clique,
                                           .node_name = node,
                                           .pod_name = pod,
                                           .pod_namespace = kDriverNs,
                                           .pod_uid = created.ok() ? Str(*created, "/metadata/uid") : "",
                                           .pod_ip = ip};
    return {node, std::make_unique<computedomain::CliqueMembership>(*env_->client, identity)};
  }
  static void Apply(PlayedDaemon& d, std::string_view status) {
    auto applied = d.membership->Publish(status);
    ASSERT_TRUE(applied.ok()) << d.node << ": " << applied.status();
  }

  // Waits for an Event about `uid` with `reason` whose note contains `text`.
  static bool WaitForEvent(const std::string& uid, const std::string& reason, const std::string& text) {
    return events_->WaitForList([&](const std::vector<json>& events) {
      for (const json& e : events) {
        if (Str(e, "/regarding/uid") == uid && e.value("reason", "") == reason &&
            e.value("note", "").find(text) != std::string::npos) {
          return true;
        }
      }
      return false;
    });
  }

  static void DeleteCdAndExpectNothingLeft(const json& cd) {
    const std::string uid = Str(cd, "/metadata/uid");
    const std::string name = Str(cd, "/metadata/name");
    auto deleted = env_->client->Delete(k8s::resources::kComputeDomains, kUserNs, name);
    ASSERT_TRUE(deleted.ok()) << deleted.status();
    EXPECT_TRUE(cds_->WaitForGone(CdKey(name))) << "the ComputeDomain keeps its finalizer";
    EXPECT_TRUE(dss_->WaitForGone(DaemonKey(uid)));
    EXPECT_TRUE(rcts_->WaitForGone(DaemonKey(uid)));
    EXPECT_TRUE(rcts_->WaitForGone(CdKey(name + "-channel")));
    EXPECT_TRUE(cliques_->WaitForList([&](const std::vector<json>& all) {
      for (const json& c : all) {
        if (Str(c, "/metadata/name").starts_with(uid)) return false;
      }
      return true;
    })) << "cliques of the domain left";
    EXPECT_TRUE(nodes_->WaitForList([&](const std::vector<json>& all) {
      for (const json& n : all) {
        if (Str(n, "/metadata/labels/resource.nvidia.com~1computeDomain") == uid) return false;
      }
      return true;
    })) << "a node keeps the domain's label";
  }

  // A daemon pod as an object: bound to `node`, tolerating every taint (as
  // the DaemonSet's pods), and controlled by a ConfigMap of the test, so the
  // domain's DaemonSet (same selector) does not adopt it and delete it for
  // running on a node without the domain's label.
  // A DaemonSet of domain `uid` as the controller (or an earlier
  // installation) leaves it: labelled, with our finalizer.
  static json DomainDaemonSet(const std::string& ns, const std::string& uid) {
    const json labels = {{kCdLabel, uid}};
    return {{"apiVersion", "apps/v1"},
            {"kind", "DaemonSet"},
            {"metadata",
             {{"name", "computedomain-daemon-" + uid}, {"namespace", ns}, {"labels", labels},
              {"finalizers", json::array({kFinalizer})}}},
            {"spec",
             {{"selector", {{"matchLabels", labels}}},
              {"template",
               {{"metadata", {{"labels", labels}}},
                {"spec", {{"nodeSelector", labels},
                          {"containers", json::array({{{"name", "c"}, {"image", "unused"}}})}}}}}}}};
  }
  static json PodObject(const std::string& name, const json& labels, const std::string& node) {
    return {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata",
             {{"name", name},
              {"namespace", kDriverNs},
              {"labels", labels},
              {"ownerReferences", json::array({{{"apiVersion", "v1"},
                                                {"kind", "ConfigMap"},
                                                {"name", "cdc-played-daemons"},
                                                {"uid", played_owner_uid_},
                                                {"controller", true}}})}}},
            {"spec",
             {{"nodeName", node},
              {"tolerations", json::array({{{"operator", "Exists"}}})},
              {"containers", json::array({{{"name", "daemon"}, {"image", "unused"}}})}}}};
  }
  static k8s::PatchOptions StatusPatch() {
    k8s::PatchOptions options;
    options.subresource = "status";
    return options;
  }
  static std::string DaemonPodName(const std::string& uid, const std::string& node) {
    return "daemon-" + node + "-" + uid.substr(0, 8);
  }
  // A Node object (no kubelet): pods bound to a missing node would be
  // garbage-collected.
  static void EnsureNode(const std::string& name) {
    json node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", name}}}};
    auto created = env_->client->Create(k8s::resources::kNodes, "", node);
    ASSERT_TRUE(created.ok() || k8s::IsAlreadyExists(created.status())) << created.status();
  }

  static void CreateNode(const std::string& name, const std::string& cd_uid) {
    json node = {{"apiVersion", "v1"},
                 {"kind", "Node"},
                 {"metadata", {{"name", name}, {"labels", {{kCdLabel, cd_uid}}}}}};
    auto created = env_->client->Create(k8s::resources::kNodes, "", node);
    ASSERT_TRUE(created.ok()) << created.status();
  }

  static ClusterClient* env_;
  static std::string played_owner_uid_;
  static ObjectWatch* cds_;
  static ObjectWatch* cliques_;
  static ObjectWatch* dss_;
  static ObjectWatch* rcts_;
  static ObjectWatch* events_;
  static ObjectWatch* leases_;
  std::vector<std::string> controller_logs_;
  static ObjectWatch* nodes_;
};

ClusterClient* CdControllerTest::env_ = nullptr;
std::string CdControllerTest::played_owner_uid_;
ObjectWatch* CdControllerTest::cds_ = nullptr;
ObjectWatch* CdControllerTest::cliques_ = nullptr;
ObjectWatch* CdControllerTest::dss_ = nullptr;
ObjectWatch* CdControllerTest::rcts_ = nullptr;
ObjectWatch* CdControllerTest::events_ = nullptr;
ObjectWatch* CdControllerTest::leases_ = nullptr;
ObjectWatch* CdControllerTest::nodes_ = nullptr;

TEST_F(CdControllerTest, ReconcilesIndexesStatusAndDeletion) {
  const int metrics_port = FreeLocalPort();
  ASSERT_GT(metrics_port, 0);
  // The daemons serve metrics on :8082 (the chart's computeDomainDaemon.metrics).
  auto controller = StartController("ctl-main", {"--max-nodes-per-imex-domain=4",
                                                 "--http-endpoint=127.0.0.1:" + std::to_string(metrics_port),
                                                 "--cd-daemon-http-endpoint=:8082"});
  const auto t0 = std::chrono::steady_clock::now();
  json cd = CreateCd("cd-a", 3);
  const auto t_created = std::chrono::steady_clock::now();
  const std::string uid = Str(cd, "/metadata/uid");
  ASSERT_FALSE(uid.empty());

  // Finalizer, DaemonSet and both claim templates.
  ASSERT_TRUE(cds_->WaitFor(CdKey("cd-a"), [](const auto& o) { return o && HasFinalizer(*o); }));
  ASSERT_TRUE(dss_->WaitFor(DaemonKey(uid), [](const auto& o) { return o.has_value(); }));
  ASSERT_TRUE(rcts_->WaitFor(DaemonKey(uid), [](const auto& o) { return o.has_value(); }));
  ASSERT_TRUE(rcts_->WaitFor(CdKey("cd-a-channel"), [](const auto& o) { return o.has_value(); }));
  const auto t_objects = std::chrono::steady_clock::now();
  const json ds = *dss_->Get(DaemonKey(uid));
  EXPECT_TRUE(HasFinalizer(ds));
  EXPECT_EQ(ds["metadata"]["labels"][kCdLabel], uid);
  EXPECT_EQ(ds["spec"]["template"]["spec"]["nodeSelector"][kCdLabel], uid);
  EXPECT_EQ(ds["spec"]["template"]["spec"]["containers"][0]["image"], "nvdra.local/driver:test");
  const json& daemon_container = ds["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(daemon_container["ports"],
            json::parse(R"([{"name": "metrics-daemon", "containerPort": 8082, "protocol": "TCP"}])"))
      << daemon_container.dump();
  std::map<std::string, std::string> daemon_env;
  for (const json& e : daemon_container["env"]) daemon_env[e.value("name", "")] = e.value("value", "");
  EXPECT_EQ(daemon_env["HTTP_ENDPOINT"], ":8082") << daemon_container.dump();
  EXPECT_EQ(daemon_env["METRICS_PATH"], "/metrics") << daemon_container.dump();
  EXPECT_EQ(ds["spec"]["template"]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"],
            "computedomain-daemon-" + uid);
  const json daemon_rct = *rcts_->Get(DaemonKey(uid));
  EXPECT_TRUE(HasFinalizer(daemon_rct));
  EXPECT_EQ(daemon_rct["metadata"]["labels"][kTargetLabel], "Daemon");
  EXPECT_EQ(daemon_rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["domainID"], uid);
  const json workload_rct = *rcts_->Get(CdKey("cd-a-channel"));
  EXPECT_TRUE(HasFinalizer(workload_rct));
  EXPECT_EQ(workload_rct["metadata"]["labels"][kTargetLabel], "Workload");
  EXPECT_EQ(workload_rct["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"],
            "compute-domain-default-channel.nvidia.com");
  EXPECT_EQ(workload_rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["allocationMode"], "Single");
  EXPECT_FALSE(workload_rct["spec"]["spec"]["devices"]["requests"][0]["exactly"].contains("selectors"));

  // No daemon yet: NotReady, and an Event says why.
  EXPECT_TRUE(cds_->WaitFor(CdKey("cd-a"), [](const auto& o) { return o && Str(*o, "/status/status") == "NotReady"; }));
  EXPECT_TRUE(WaitForEvent(uid, "NotReady", "0 of 3"));

  // Three daemons join (NotReady first): indexes 0, 1, 2.
  const std::string clique = uid + ".c1";
  const std::string clique_key = std::string(kDriverNs) + "/" + clique;
  std::vector<PlayedDaemon> daemons;
  for (const char* node : {"n1", "n2", "n3"}) {
    daemons.push_back(Daemon(uid, "c1", node));
    Apply(daemons.back(), "NotReady");
  }
  ASSERT_TRUE(cliques_->WaitFor(clique_key, [](const auto& o) {
    if (!o) return false;
    std::set<std::int64_t> indexes;
    for (const auto& [node, e] : Daemons(*o)) {
      if (e.contains("index")) indexes.insert(e["index"].template get<std::int64_t>());
    }
    return indexes == std::set<std::int64_t>{0, 1, 2};
  })) << cliques_->Get(clique_key).value_or(json()).dump();
  std::map<std::string, std::int64_t> given;
  for (const auto& [node, e] : Daemons(*cliques_->Get(clique_key))) given[node] = e["index"];
  EXPECT_TRUE(WaitForEvent(uid, "NotReady", "not ready on"));
  EXPECT_EQ(Str(*cds_->Get(CdKey("cd-a")), "/status/status"), "NotReady");

  // Daemons never own an index; the controller does.
  // The clique kept: a range-for over a member of the temporary Get returns
  // read freed memory (ThreadSanitizer caught it).
  const std::optional<json> clique_now = cliques_->Get(clique_key);
  ASSERT_TRUE(clique_now.has_value());
  for (const json& m : clique_now->at("metadata").at("managedFields")) {
    const std::string owned = m.value("fieldsV1", json::object()).dump();
    if (m.value("manager", "").starts_with("compute-domain-daemon")) {
      EXPECT_EQ(owned.find("f:index"), std::string::npos) << m.dump();
    }
  }

  // All Ready: the domain is Ready, with the clique's entries as status.nodes.
  for (auto& d : daemons) Apply(d, "Ready");
  const auto t_ready_written = std::chrono::steady_clock::now();
  ASSERT_TRUE(cds_->WaitFor(CdKey("cd-a"), [](const auto& o) { return o && Str(*o, "/status/status") == "Ready"; }));
  const auto t_ready = std::chrono::steady_clock::now();
  EXPECT_TRUE(WaitForEvent(uid, "Ready", "Ready (3 nodes)"));
  ASSERT_TRUE(cds_->WaitFor(CdKey("cd-a"), [&](const auto& o) {
    if (!o || !o->contains("/status/nodes"_json_pointer)) return false;
    const json& nodes = (*o)["status"]["nodes"];
    if (nodes.size() != 3) return false;
    for (const json& n : nodes) {
      if (n.value("status", "") != "Ready" || n.value("index", -1) != given[n.value("name", "")] ||
          n.value("cliqueID", "") != "c1") {
        return false;
      }
    }
    return true;
  })) << cds_->Get(CdKey("cd-a"))->dump();

  // Metrics: the domain counts as Ready (upstream's gauge), reconciles and writes are counted.
  httplib::Client http("127.0.0.1", metrics_port);
  auto scraped = http.Get("/metrics");
  ASSERT_TRUE(scraped) << "no metrics on port " << metrics_port;
  SaveMetricsScrape("compute-domain-controller", scraped->body);
  EXPECT_NE(scraped->body.find("nvidia_dra_compute_domain_info{status=\"Ready\"} 1"), std::string::npos)
      << scraped->body;
  EXPECT_NE(scraped->body.find("nvdra_compute_domain_controller_reconciles_total{result=\"success\"}"),
            std::string::npos);
  const std::size_t writes_at = scraped->body.find("\nnvdra_compute_domain_controller_api_writes_total ");
  ASSERT_NE(writes_at, std::string::npos) << scraped->body;
  std::printf("cd-a: %s API writes by the controller up to Ready with 3 daemons (finalizer, 3 objects, clique "
              "writes, status)\n",
              scraped->body.substr(writes_at + 50, scraped->body.find('\n', writes_at + 1) - writes_at - 50).c_str());

  // n2 leaves (its daemon says so, then its pod goes), n4 joins: n4 takes
  // n2's index, n1 and n3 keep theirs.
  k8s::DeleteOptions now;
  now.grace_period_seconds = 0;
  ASSERT_TRUE(daemons[1].membership->Leave().ok());
  ASSERT_TRUE(cliques_->WaitFor(clique_key, [](const auto& o) {
    return o && Daemons(*o).contains("n2") && Str(Daemons(*o)["n2"], "/status") == "NotReady";
  })) << "a leaving daemon is NotReady in its entry";
  ASSERT_TRUE(env_->client->Delete(k8s::resources::kPods, kDriverNs, DaemonPodName(uid, "n2"), now).ok());
  daemons.push_back(Daemon(uid, "c1", "n4"));
  Apply(daemons.back(), "Ready");
  ASSERT_TRUE(cliques_->WaitFor(clique_key, [&](const auto& o) {
    if (!o) return false;
    auto entries = Daemons(*o);
    return !entries.contains("n2") && entries.contains("n4") && entries["n4"].value("index", -1) == given["n2"];
  })) << cliques_->Get(clique_key).value_or(json()).dump();
  auto entries = Daemons(*cliques_->Get(clique_key));
  EXPECT_EQ(entries["n1"]["index"], given["n1"]);
  EXPECT_EQ(entries["n3"]["index"], given["n3"]);

  // A daemon that could not say goodbye (its pod is gone with its node):
  // the controller removes the entry; the others keep their indexes.
  ASSERT_TRUE(env_->client->Delete(k8s::resources::kPods, kDriverNs, DaemonPodName(uid, "n3"), now).ok());
  ASSERT_TRUE(cliques_->WaitFor(clique_key, [&](const auto& o) { return o && !Daemons(*o).contains("n3"); }));
  entries = Daemons(*cliques_->Get(clique_key));
  EXPECT_EQ(entries["n1"]["index"], given["n1"]);
  EXPECT_EQ(entries["n4"]["index"], given["n2"]);
  daemons.push_back(Daemon(uid, "c1", "n3"));
  Apply(daemons.back(), "Ready");
  ASSERT_TRUE(cliques_->WaitFor(clique_key, [&](const auto& o) {
    return o && IndexOf(*o, "n3") == given["n3"];
  })) << "the gap n3 left is filled again";

  // A successor pod on n1 (new IP) published before the old pod is deleted:
  // the entry stays, with the successor's IP once the old pod is gone. Then
  // n4's pod goes: that entry is removed.
  {
    const std::string old_pod = DaemonPodName(uid, "n1");
    json pod = PodObject(old_pod + "-b", {{kCdLabel, uid}}, "n1");
    auto created = env_->client->Create(k8s::resources::kPods, kDriverNs, pod);
    ASSERT_TRUE(created.ok()) << created.status();
    ASSERT_TRUE(env_->client->Patch(k8s::resources::kPods, kDriverNs, old_pod + "-b", k8s::PatchType::kMerge,
                                    {{"status", {{"podIP", "10.9.0.99"}}}}, StatusPatch()).ok());
    PlayedDaemon successor{"n1", nullptr};
    computedomain::DaemonIdentity identity = daemons[0].membership->identity();
    identity.pod_name = old_pod + "-b";
    identity.pod_uid = Str(*created, "/metadata/uid");
    identity.pod_ip = "10.9.0.99";
    successor.membership = std::make_unique<computedomain::CliqueMembership>(*env_->client, identity);
    Apply(successor, "Ready");
    ASSERT_TRUE(env_->client->Delete(k8s::resources::kPods, kDriverNs, old_pod, now).ok());
    ASSERT_TRUE(env_->client->Delete(k8s::resources::kPods, kDriverNs, DaemonPodName(uid, "n4"), now).ok());
    ASSERT_TRUE(cliques_->WaitFor(clique_key, [&](const auto& o) { return o && !Daemons(*o).contains("n4"); }));
    entries = Daemons(*cliques_->Get(clique_key));
    ASSERT_TRUE(entries.contains("n1")) << "the successor's entry was removed";
    EXPECT_EQ(entries["n1"]["ipAddress"], "10.9.0.99");
    EXPECT_EQ(entries["n1"]["index"], given["n1"]);
    daemons.push_back(Daemon(uid, "c1", "n4"));
    Apply(daemons.back(), "Ready");
    ASSERT_TRUE(cliques_->WaitFor(clique_key, [&](const auto& o) { return o && IndexOf(*o, "n4") == given["n2"]; }));
  }

  // A fifth node fills index 3; a sixth is beyond --max-nodes-per-imex-domain=4.
  daemons.push_back(Daemon(uid, "c1", "n5"));
  Apply(daemons.back(), "Ready");
  daemons.push_back(Daemon(uid, "c1", "n6"));
  Apply(daemons.back(), "NotReady");
  ASSERT_TRUE(cliques_->WaitFor(clique_key, [&](const auto& o) {
    return o && IndexOf(*o, "n5") == 3;
  }));
  EXPECT_TRUE(WaitForEvent(uid, "CliqueFull", "node n6 cannot join"));
  EXPECT_FALSE(Daemons(*cliques_->Get(clique_key))["n6"].contains("index"));
  EXPECT_TRUE(cds_->WaitFor(CdKey("cd-a"), [](const auto& o) { return o && Str(*o, "/status/status") == "NotReady"; }));
  ASSERT_TRUE(env_->client->Delete(k8s::resources::kPods, kDriverNs, DaemonPodName(uid, "n6"), now).ok());
  EXPECT_TRUE(cds_->WaitFor(CdKey("cd-a"), [](const auto& o) { return o && Str(*o, "/status/status") == "Ready"; }));

  // A daemon on a node without a fabric has no clique: its pod (empty
  // cliqueID label) is a status.nodes entry with index -1.
  EnsureNode("cdc-plain");
  json plain = PodObject("daemon-plain", {{kCdLabel, uid}, {"resource.nvidia.com/computeDomain.cliqueID", ""}},
                         "cdc-plain");
  ASSERT_TRUE(env_->client->Create(k8s::resources::kPods, kDriverNs, plain).ok());
  json ready = {{"status",
                 {{"podIP", "10.9.9.9"},
                  {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
  auto patched = env_->client->Patch(k8s::resources::kPods, kDriverNs, "daemon-plain", k8s::PatchType::kMerge, ready,
                                     StatusPatch());
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_TRUE(cds_->WaitFor(CdKey("cd-a"), [](const auto& o) {
    if (!o || !o->contains("/status/nodes"_json_pointer)) return false;
    for (const json& n : (*o)["status"]["nodes"]) {
      if (n.value("name", "") == "cdc-plain") {
        return n.value("index", 0) == -1 && n.value("cliqueID", "x").empty() && n.value("status", "") == "Ready" &&
               n.value("ipAddress", "") == "10.9.9.9";
      }
    }
    return false;
  })) << cds_->Get(CdKey("cd-a"))->dump();
  EXPECT_EQ(Str(*cds_->Get(CdKey("cd-a")), "/status/status"), "Ready");

  // A node labelled for the domain (as the kubelet plugin does) loses the label.
  CreateNode("cdc-node-a", uid);
  const auto t_deleting = std::chrono::steady_clock::now();
  DeleteCdAndExpectNothingLeft(cd);
  const auto t_gone = std::chrono::steady_clock::now();
  auto ms = [](auto d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
  std::printf("cd-a: create call %lld ms (controller starting meanwhile); objects seen %lld ms after it; "
              "status Ready seen %lld ms after the last Ready entry write; deletion cascade done %lld ms after "
              "the delete call\n",
              static_cast<long long>(ms(t_created - t0)), static_cast<long long>(ms(t_objects - t_created)),
              static_cast<long long>(ms(t_ready - t_ready_written)), static_cast<long long>(ms(t_gone - t_deleting)));
  controller->Stop();
  EXPECT_EQ(controller->WaitExit(1s), std::nullopt);  // already ended by Stop
}

// The whole path of a fabric fault with cliques (the default): a real
// daemon on a GB200 node (mock NVML) publishes NotReady with its reason on
// its pod; the controller writes it into the clique entry and the domain's
// status.nodes, and its NotReady Event names the node and the message.
// Healthy again: Ready, reason and message gone.
TEST_F(CdControllerTest, UnhealthyFabricOfADaemonsNodeShowsInTheDomainStatusWithItsReason) {
  auto controller = StartController("ctl-fabric");
  json cd = CreateCd("cd-fabric", 1);
  const std::string uid = Str(cd, "/metadata/uid");
  ASSERT_FALSE(uid.empty());
  PluginNodeDir driver;
  ASSERT_EQ(MakePluginNodeDir("cdc-fabric", NVDRA_MOCKNVML_MAKE_DRIVER_ROOT,
                              std::string(NVDRA_MOCKNVML_PROFILES_DIR) + "/gb200-tray.json", NVDRA_MOCKNVML_PATH,
                              &driver),
            "");
  const std::string gpu = "GPU-b200b200-0000-0000-0000-000000000002";
  const std::string clique_id = "9f2c41e7-58a3-4b6d-8e0a-3c5d7f1b2a94.32766";  // the profile's
  const std::string node = "gb200-3";
  // The simulated nvidia-imex binds the pod IP: a loopback address of this process's own.
  const std::string ip = "127.214." + std::to_string(getpid() % 250 + 1) + ".3";
  EnsureNode(node);
  const std::string pod = DaemonPodName(uid, node);
  auto created = env_->client->Create(k8s::resources::kPods, kDriverNs, PodObject(pod, {{kCdLabel, uid}}, node));
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(env_->client->Patch(k8s::resources::kPods, kDriverNs, pod, k8s::PatchType::kMerge,
                                  {{"status", {{"podIP", ip}}}}, StatusPatch()).ok());
  const std::string imex_bin = NVDRA_SIMIMEX_DIR;
  const std::filesystem::path imexd = driver.dir / "imexd";
  const std::filesystem::path hosts = driver.dir / "hosts";
  WriteFile(hosts, "127.0.0.1\tlocalhost\n");
  PluginProcess daemon({CD_DAEMON, "-v", "2", "run"},
                       {"PATH=" + imex_bin + ":/usr/bin:/bin", "KUBECONFIG=" + env_->cluster->kubeconfig().string(),
                        "CLIQUE_ID=" + clique_id, "COMPUTE_DOMAIN_UUID=" + uid, "COMPUTE_DOMAIN_NAME=cd-fabric",
                        "COMPUTE_DOMAIN_NAMESPACE=" + std::string(kUserNs), "NODE_NAME=" + node, "POD_IP=" + ip,
                        "POD_UID=" + Str(*created, "/metadata/uid"), "POD_NAME=" + pod,
                        "POD_NAMESPACE=" + std::string(kDriverNs), "MAX_NODES_PER_IMEX_DOMAIN=18",
                        "IMEXD_DIR=" + imexd.string(), "HOSTS_FILE=" + hosts.string(),
                        "IMEX_BINARY=" + imex_bin + "/nvidia-imex", "IMEX_CTL_BINARY=" + imex_bin + "/nvidia-imex-ctl",
                        "IMEX_CONFIG_TEMPLATE=" + std::string(NVDRA_SOURCE_DIR) +
                            "/templates/compute-domain-daemon-config.tmpl.cfg",
                        "IMEX_STOP_GRACE_SECONDS=5", "IMEX_READY_POLL_INTERVAL_MS=100",
                        "SIMIMEX_HOSTS_FILE=" + hosts.string(), "DRIVER_ROOT_CTR_PATH=" + driver.driver_root.string()},
                       driver.dir / "daemon.log");
  ASSERT_TRUE(daemon.Start());
  auto daemon_log = [&] { return "--- daemon log:\n" + ReadFile(driver.dir / "daemon.log"); };
  auto status_node = [&](const std::optional<json>& o) {
    if (!o || !o->contains("/status/nodes"_json_pointer)) return json::object();
    for (const json& n : (*o)["status"]["nodes"]) {
      if (n.value("name", "") == node) return n;
    }
    return json::object();
  };
  auto ready = [&](const std::optional<json>& o) {
    const json n = status_node(o);
    return o && Str(*o, "/status/status") == "Ready" && n.value("status", "") == "Ready" && !n.contains("reason") &&
           !n.contains("message");
  };
  ASSERT_TRUE(cds_->WaitFor(CdKey("cd-fabric"), ready)) << daemon_log() << cds_->Get(CdKey("cd-fabric"))->dump(1);

  ASSERT_EQ(SetMockFabric(driver.driver_root, {{gpu, {{"healthSummary", 2}, {"healthMask", 16}}}}), "");
  const std::string message =
      "NVLink fabric unhealthy: " + gpu + " (healthSummary Unhealthy, healthMask 0x10: route unhealthy)";
  ASSERT_TRUE(cds_->WaitFor(CdKey("cd-fabric"), [&](const std::optional<json>& o) {
    const json n = status_node(o);
    return o && Str(*o, "/status/status") == "NotReady" && n.value("status", "") == "NotReady" &&
           n.value("reason", "") == "FabricUnhealthy" && n.value("message", "") == message;
  })) << daemon_log() << cds_->Get(CdKey("cd-fabric"))->dump(1);
  const std::string clique_key = std::string(kDriverNs) + "/" + uid + "." + clique_id;
  auto clique_entry = [&](const std::optional<json>& o) {
    if (!o) return json::object();
    auto entries = Daemons(*o);
    return entries.contains(node) ? entries[node] : json::object();
  };
  EXPECT_TRUE(cliques_->WaitFor(clique_key, [&](const std::optional<json>& o) {
    const json e = clique_entry(o);
    return e.value("reason", "") == "FabricUnhealthy" && e.value("message", "") == message;
  })) << cliques_->Get(clique_key).value_or(json()).dump(1);
  EXPECT_TRUE(WaitForEvent(uid, "NotReady", "IMEX daemons not ready on: " + node + " (" + message + ")"));

  ASSERT_EQ(SetMockFabric(driver.driver_root, json::object()), "");  // the profile's: healthy
  ASSERT_TRUE(cds_->WaitFor(CdKey("cd-fabric"), ready)) << daemon_log() << cds_->Get(CdKey("cd-fabric"))->dump(1);
  EXPECT_TRUE(cliques_->WaitFor(clique_key, [&](const std::optional<json>& o) {
    const json e = clique_entry(o);
    return e.value("status", "") == "Ready" && !e.contains("reason") && !e.contains("message");
  })) << cliques_->Get(clique_key).value_or(json()).dump(1);
  auto annotations = env_->client->Get(k8s::resources::kPods, kDriverNs, pod);
  ASSERT_TRUE(annotations.ok());
  EXPECT_FALSE((*annotations)["metadata"]["annotations"].contains("resource.nvidia.com/computeDomain.daemonStatusReason"))
      << (*annotations)["metadata"].dump();

  ASSERT_EQ(kill(daemon.pid(), SIGTERM), 0);
  EXPECT_EQ(daemon.WaitExit(30s), std::optional<int>(0)) << daemon_log();
  k8s::DeleteOptions now;
  now.grace_period_seconds = 0;
  ASSERT_TRUE(env_->client->Delete(k8s::resources::kPods, kDriverNs, pod, now).ok());
  DeleteCdAndExpectNothingLeft(cd);
  controller->Stop();
  std::filesystem::remove_all(driver.dir);
}

TEST_F(CdControllerTest, RemovesObjectsOfVanishedDomainsAtStart) {
  const std::string ghost = "00000000-dead-4000-8000-000000000001";
  const json labels = {{kCdLabel, ghost}};
  ASSERT_TRUE(env_->client->Create(k8s::resources::kDaemonSets, kDriverNs, DomainDaemonSet(kDriverNs, ghost)).ok());
  json rct = {{"apiVersion", "resource.k8s.io/v1"},
              {"kind", "ResourceClaimTemplate"},
              {"metadata",
               {{"name", "ghost-channel"}, {"namespace", kUserNs}, {"labels", labels},
                {"finalizers", json::array({kFinalizer})}}},
              {"spec", {{"spec", {{"devices", {{"requests", json::array({{{"name", "channel"},
                                                                         {"exactly", {{"deviceClassName", "x"}}}}})}}}}}}}};
  auto created = env_->client->Create(k8s::resources::kResourceClaimTemplates, kUserNs, rct);
  ASSERT_TRUE(created.ok()) << created.status();
  PlayedDaemon d = Daemon(ghost, "c1", "n1");
  Apply(d, "Ready");
  CreateNode("cdc-node-ghost", ghost);
  ASSERT_TRUE(rcts_->WaitFor(std::string(kUserNs) + "/ghost-channel", [](const auto& o) { return o.has_value(); }));

  auto controller = StartController("ctl-stale");
  EXPECT_TRUE(dss_->WaitForGone(DaemonKey(ghost)));
  EXPECT_TRUE(rcts_->WaitForGone(std::string(kUserNs) + "/ghost-channel"));
  EXPECT_TRUE(cliques_->WaitForGone(std::string(kDriverNs) + "/" + ghost + ".c1"));
  EXPECT_TRUE(nodes_->WaitFor("cdc-node-ghost", [&](const auto& o) {
    return o && Str(*o, "/metadata/labels/resource.nvidia.com~1computeDomain").empty();
  }));
}

// --additional-namespaces (upstream's migration path): a DaemonSet of the
// domain that an earlier installation left in another namespace is used
// (none is created in the driver namespace) and goes with the domain.
TEST_F(CdControllerTest, UsesAndRemovesTheDomainsDaemonSetOfAnAdditionalNamespace) {
  constexpr const char* kLegacyNs = "cdc-legacy";
  (void)env_->client->Create(k8s::resources::kNamespaces, "",
                             {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", kLegacyNs}}}});
  json cd = CreateCd("cd-legacy", 0);
  const std::string uid = Str(cd, "/metadata/uid");
  const std::string name = "computedomain-daemon-" + uid;
  // Its pods' claim template, named otherwise than ours and unlabelled: the
  // controller finds it through the DaemonSet.
  json legacy_claim = {{"apiVersion", "resource.k8s.io/v1"},
                       {"kind", "ResourceClaimTemplate"},
                       {"metadata",
                        {{"name", "legacy-daemon-claim"}, {"namespace", kLegacyNs},
                         {"finalizers", json::array({kFinalizer})}}},
                       {"spec", {{"spec", {{"devices", {{"requests", json::array({{{"name", "daemon"},
                                                                                  {"exactly", {{"deviceClassName", "x"}}}}})}}}}}}}};
  auto claim_created = env_->client->Create(k8s::resources::kResourceClaimTemplates, kLegacyNs, legacy_claim);
  ASSERT_TRUE(claim_created.ok()) << claim_created.status();
  json ds = DomainDaemonSet(kLegacyNs, uid);
  ds["spec"]["template"]["spec"]["resourceClaims"] =
      json::array({{{"name", "daemon"}, {"resourceClaimTemplateName", "legacy-daemon-claim"}}});
  auto created = env_->client->Create(k8s::resources::kDaemonSets, kLegacyNs, ds);
  ASSERT_TRUE(created.ok()) << created.status();

  auto controller = StartController("ctl-legacy", {"--additional-namespaces=" + std::string(kLegacyNs)});
  // The workload template is written after the DaemonSet step.
  ASSERT_TRUE(rcts_->WaitFor(CdKey("cd-legacy-channel"), [](const auto& o) { return o.has_value(); }));
  auto ours = env_->client->Get(k8s::resources::kDaemonSets, kDriverNs, name);
  EXPECT_TRUE(!ours.ok() && k8s::IsNotFound(ours.status())) << "a second DaemonSet for the domain";

  ASSERT_TRUE(env_->client->Delete(k8s::resources::kComputeDomains, kUserNs, "cd-legacy").ok());
  EXPECT_TRUE(cds_->WaitForGone(CdKey("cd-legacy")));
  auto legacy = env_->client->Get(k8s::resources::kDaemonSets, kLegacyNs, name);
  EXPECT_TRUE(!legacy.ok() && k8s::IsNotFound(legacy.status())) << "the additional namespace's DaemonSet stayed";
  auto legacy_rct = env_->client->Get(k8s::resources::kResourceClaimTemplates, kLegacyNs, "legacy-daemon-claim");
  EXPECT_TRUE(!legacy_rct.ok() && k8s::IsNotFound(legacy_rct.status())) << "its claim template stayed";
}

TEST_F(CdControllerTest, KilledMidCascadeAndRestartedConverges) {
  auto first = StartController("ctl-first");
  json cd = CreateCd("cd-kill", 0);
  const std::string uid = Str(cd, "/metadata/uid");
  ASSERT_TRUE(dss_->WaitFor(DaemonKey(uid), [](const auto& o) { return o.has_value(); }));
  ASSERT_TRUE(rcts_->WaitFor(CdKey("cd-kill-channel"), [](const auto& o) { return o.has_value(); }));
  PlayedDaemon d = Daemon(uid, "c1", "n1");
  Apply(d, "Ready");
  // A finalizer of the test's holds the DaemonSet, so the cascade stops
  // half-way: workload template gone, DaemonSet deleting, domain still there.
  json hold = {{"metadata", {{"finalizers", json::array({kFinalizer, "test.nvdra.local/hold"})}}}};
  ASSERT_TRUE(env_->client->Patch(k8s::resources::kDaemonSets, kDriverNs, "computedomain-daemon-" + uid,
                                  k8s::PatchType::kMerge, hold).ok());
  ASSERT_TRUE(env_->client->Delete(k8s::resources::kComputeDomains, kUserNs, "cd-kill").ok());
  ASSERT_TRUE(rcts_->WaitForGone(CdKey("cd-kill-channel")));
  ASSERT_TRUE(dss_->WaitFor(DaemonKey(uid), [](const auto& o) {
    return o && o->contains("/metadata/deletionTimestamp"_json_pointer) && !HasFinalizer(*o);
  }));
  EXPECT_TRUE(cds_->Get(CdKey("cd-kill")).has_value());
  ASSERT_EQ(kill(first->pid(), SIGKILL), 0);
  EXPECT_EQ(first->WaitExit(30s), 128 + SIGKILL);

  // Released while no controller runs; a new one finishes the cascade.
  json release = {{"metadata", {{"finalizers", json::array()}}}};
  ASSERT_TRUE(env_->client->Patch(k8s::resources::kDaemonSets, kDriverNs, "computedomain-daemon-" + uid,
                                  k8s::PatchType::kMerge, release).ok());
  auto second = StartController("ctl-second");
  EXPECT_TRUE(cds_->WaitForGone(CdKey("cd-kill")));
  EXPECT_TRUE(dss_->WaitForGone(DaemonKey(uid)));
  EXPECT_TRUE(rcts_->WaitForGone(DaemonKey(uid)));
  EXPECT_TRUE(cliques_->WaitForGone(std::string(kDriverNs) + "/" + uid + ".c1"));
}

TEST_F(CdControllerTest, TwoControllersOneLeader) {
  const std::vector<std::string> election = {"--leader-election-enabled",
                                             "--leader-election-lease-lock-namespace=" + std::string(kDriverNs),
                                             "--leader-election-lease-lock-name=" + std::string(kLeaseName),
                                             "--leader-election-lease-duration=3s",
                                             "--leader-election-renew-deadline=2s",
                                             "--leader-election-retry-period=500ms"};
  std::map<std::string, std::unique_ptr<PluginProcess>> controllers;
  controllers["ctl-le-a"] = StartController("ctl-le-a", election);
  controllers["ctl-le-b"] = StartController("ctl-le-b", election);
  const std::string lease_key = std::string(kDriverNs) + "/" + kLeaseName;
  auto holder_pod = [&]() -> std::string {
    auto lease = leases_->Get(lease_key);
    if (!lease) return "";
    const std::string holder = Str(*lease, "/spec/holderIdentity");
    return holder.substr(0, holder.find('_'));
  };
  ASSERT_TRUE(leases_->WaitFor(lease_key, [&](const auto&) { return controllers.contains(holder_pod()); }));
  const std::string leader = holder_pod();

  // Only the leader reconciles: every Event about the domain is its.
  json cd = CreateCd("cd-le-1", 0);
  const std::string uid = Str(cd, "/metadata/uid");
  ASSERT_TRUE(cds_->WaitFor(CdKey("cd-le-1"), [](const auto& o) { return o && Str(*o, "/status/status") == "Ready"; }));
  ASSERT_TRUE(WaitForEvent(uid, "Ready", "Ready"));
  for (const json& e : events_->List()) {
    if (Str(e, "/regarding/uid") == uid) EXPECT_EQ(e.value("reportingInstance", ""), leader) << e.dump();
  }

  // The leader dies: the other takes over and reconciles new domains.
  ASSERT_EQ(kill(controllers[leader]->pid(), SIGKILL), 0);
  ASSERT_TRUE(leases_->WaitFor(lease_key, [&](const auto&) {
    return controllers.contains(holder_pod()) && holder_pod() != leader;
  }));
  const std::string successor = holder_pod();
  json cd2 = CreateCd("cd-le-2", 0);
  const std::string uid2 = Str(cd2, "/metadata/uid");
  ASSERT_TRUE(cds_->WaitFor(CdKey("cd-le-2"), [](const auto& o) { return o && Str(*o, "/status/status") == "Ready"; }));
  ASSERT_TRUE(WaitForEvent(uid2, "Ready", "Ready"));
  for (const json& e : events_->List()) {
    if (Str(e, "/regarding/uid") == uid2) EXPECT_EQ(e.value("reportingInstance", ""), successor) << e.dump();
  }
  DeleteCdAndExpectNothingLeft(cd);
  DeleteCdAndExpectNothingLeft(cd2);
}

TEST_F(CdControllerTest, ChannelIsolationGivesEachDomainItsOwnChannel) {
  auto controller = StartController("ctl-channel", {"--imex-isolation=channel", "--imex-channel-count=8"});
  json a = CreateCd("cd-ch-a", 0);
  json b = CreateCd("cd-ch-b", 0);
  std::map<std::string, int> channel;
  for (const char* name : {"cd-ch-a", "cd-ch-b"}) {
    ASSERT_TRUE(cds_->WaitFor(CdKey(name), [](const auto& o) {
      return o && o->contains("/status/imexChannelID"_json_pointer);
    }));
    channel[name] = (*cds_->Get(CdKey(name)))["status"]["imexChannelID"].get<int>();
    EXPECT_GE(channel[name], 1);
    EXPECT_LT(channel[name], 8);
    const std::string key = CdKey(std::string(name) + "-channel");
    ASSERT_TRUE(rcts_->WaitFor(key, [](const auto& o) { return o.has_value(); }));
    const json request = rcts_->Get(key)->at("/spec/spec/devices/requests/0/exactly"_json_pointer);
    ASSERT_TRUE(request.contains("selectors")) << request.dump();
    EXPECT_EQ(request["selectors"][0]["cel"]["expression"],
              "device.attributes[\"compute-domain.nvidia.com\"].id == " + std::to_string(channel[name]));
  }
  EXPECT_NE(channel["cd-ch-a"], channel["cd-ch-b"]);
  DeleteCdAndExpectNothingLeft(a);
  DeleteCdAndExpectNothingLeft(b);
}


// Switching from the Go driver's chart leaves its CRD (Helm never upgrades
// crds/), which prunes status.imexChannelID: the controller says so in an
// Event naming the fix instead of waiting silently, and proceeds once the
// chart's CRDs are applied.
TEST_F(CdControllerTest, ACrdThatDropsTheChannelGetsAnEventUntilTheChartsCrdsAreApplied) {
  const std::string crds = std::string(NVDRA_SOURCE_DIR) + "/deployments/helm/dra-driver-nvidia-gpu/crds";
  CommandResult old_schema = env_->cluster->Kubectl(
      {"patch", "crd", "computedomains.resource.nvidia.com", "--type=json", "-p",
       R"([{"op":"remove","path":"/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/imexChannelID"}])"});
  ASSERT_TRUE(old_schema.ok()) << old_schema.err;
  struct RestoreCrds {
    ClusterClient* env;
    std::string crds;
    ~RestoreCrds() { env->cluster->Kubectl({"apply", "--server-side", "--force-conflicts", "-f", crds}); }
  } restore{env_, crds};
  auto controller = StartController("ctl-old-crd", {"--imex-isolation=channel", "--imex-channel-count=8"});
  json cd = CreateCd("cd-old-crd", 0);
  const std::string uid = Str(cd, "/metadata/uid");
  EXPECT_TRUE(WaitForEvent(uid, "OutdatedCRD", "kubectl apply --server-side --force-conflicts -f <chart>/crds/"));
  EXPECT_FALSE(cds_->Get(CdKey("cd-old-crd"))->contains("/status/imexChannelID"_json_pointer));

  // As docs/install.md says: a client-side apply would see nothing to do,
  // since its last-applied annotation still holds the field.
  CommandResult applied = env_->cluster->Kubectl({"apply", "--server-side", "--force-conflicts", "-f", crds});
  ASSERT_TRUE(applied.ok()) << applied.err;
  // Awaited through the Event: a watch of ComputeDomains may go on serving
  // objects read with the old schema for a while after the CRD changes.
  EXPECT_TRUE(WaitForEvent(uid, "ChannelAssigned", "IMEX channel")) << "no channel once the chart's CRD is back";
  auto now = env_->client->Get(k8s::resources::kComputeDomains, kUserNs, "cd-old-crd");
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_TRUE(now->contains("/status/imexChannelID"_json_pointer)) << now->dump();
  ASSERT_TRUE(rcts_->WaitFor(CdKey("cd-old-crd-channel"), [](const auto& o) { return o.has_value(); }));
  DeleteCdAndExpectNothingLeft(cd);
}

TEST_F(CdControllerTest, HostManagedKeepsOnlyFinalizerWorkloadTemplateAndReady) {
  auto controller = StartController("ctl-host", {"--imex-mode=hostManaged", "--feature-gates=HostManagedIMEXDaemon=true"});
  json cd = {{"apiVersion", "resource.nvidia.com/v1beta1"},
             {"kind", "ComputeDomain"},
             {"metadata", {{"name", "cd-host"}, {"namespace", kUserNs}}},
             {"spec",
              {{"numNodes", 3},
               {"channel", {{"resourceClaimTemplate", {{"name", "cd-host-channel"}}}, {"allocationMode", "All"}}}}}};
  auto created = env_->client->Create(k8s::resources::kComputeDomains, kUserNs, cd);
  ASSERT_TRUE(created.ok()) << created.status();
  const std::string uid = Str(*created, "/metadata/uid");
  // Ready at once (no daemons to wait for), with the finalizer and the
  // workload template, which always asks for one channel.
  ASSERT_TRUE(cds_->WaitFor(CdKey("cd-host"), [](const auto& o) {
    return o && HasFinalizer(*o) && Str(*o, "/status/status") == "Ready";
  }));
  ASSERT_TRUE(rcts_->WaitFor(CdKey("cd-host-channel"), [](const auto& o) { return o.has_value(); }));
  EXPECT_EQ(rcts_->Get(CdKey("cd-host-channel"))
                ->at("/spec/spec/devices/config/0/opaque/parameters/allocationMode"_json_pointer),
            "Single");
  EXPECT_FALSE(dss_->Get(DaemonKey(uid)).has_value());
  EXPECT_FALSE(rcts_->Get(DaemonKey(uid)).has_value());
  DeleteCdAndExpectNothingLeft(*created);
}

TEST_F(CdControllerTest, WithoutCliquesIndexesAreAssignedPerCliqueInStatusNodes) {
  auto controller = StartController("ctl-nocliques", {"--feature-gates=ComputeDomainCliques=false"});
  json cd = CreateCd("cd-legacy", 3);
  const std::string uid = Str(cd, "/metadata/uid");
  ASSERT_TRUE(cds_->WaitFor(CdKey("cd-legacy"), [](const auto& o) { return o && Str(*o, "/status/status") == "NotReady"; }));
  // Daemons write status.nodes themselves (the legacy store); two cliques.
  std::vector<PlayedDaemon> daemons;
  for (auto [clique, node] : {std::pair{"c1", "n1"}, std::pair{"c2", "n2"}, std::pair{"c1", "n3"}}) {
    PlayedDaemon d = Daemon(uid, clique, node);
    computedomain::DaemonIdentity identity = d.membership->identity();
    d.membership = std::make_unique<computedomain::CliqueMembership>(
        *env_->client, identity, computedomain::MembershipStore::kComputeDomainStatus, "cd-legacy", kUserNs);
    Apply(d, "Ready");
    daemons.push_back(std::move(d));
  }
  ASSERT_TRUE(cds_->WaitFor(CdKey("cd-legacy"), [](const auto& o) {
    if (!o || !o->contains("/status/nodes"_json_pointer)) return false;
    std::map<std::string, std::int64_t> index;
    for (const json& n : (*o)["status"]["nodes"]) index[n.value("name", "")] = n.value("index", std::int64_t{-1});
    return index == std::map<std::string, std::int64_t>{{"n1", 0}, {"n2", 0}, {"n3", 1}} &&
           Str(*o, "/status/status") == "Ready";
  })) << cds_->Get(CdKey("cd-legacy"))->dump();
  // No clique objects in this mode.
  for (const json& c : cliques_->List()) EXPECT_FALSE(Str(c, "/metadata/name").starts_with(uid)) << c.dump();
  DeleteCdAndExpectNothingLeft(cd);
}


// A channel template name the API server refuses as an object name is not
// only a retry in the controller's log: the domain gets a Warning Event that
// names the field.
TEST_F(CdControllerTest, AnInvalidChannelTemplateNameGetsAnEvent) {
  auto controller = StartController("ctl-bad-name");
  json cd = {{"apiVersion", "resource.nvidia.com/v1beta1"},
             {"kind", "ComputeDomain"},
             {"metadata", {{"name", "cd-bad-name"}, {"namespace", kUserNs}}},
             {"spec", {{"numNodes", 0}, {"channel", {{"resourceClaimTemplate", {{"name", "Bad_Name"}}}}}}}};
  auto created = env_->client->Create(k8s::resources::kComputeDomains, kUserNs, cd);
  ASSERT_TRUE(created.ok()) << created.status();
  const std::string uid = Str(*created, "/metadata/uid");
  EXPECT_TRUE(WaitForEvent(uid, "InvalidObject", "set spec.channel.resourceClaimTemplate.name to a lowercase"));
  DeleteCdAndExpectNothingLeft(*created);
}

TEST_F(CdControllerTest, ForeignClaimTemplateOfTheSameNameIsLeftAloneWithAnEvent) {
  json rct = {{"apiVersion", "resource.k8s.io/v1"},
              {"kind", "ResourceClaimTemplate"},
              {"metadata", {{"name", "cd-taken-channel"}, {"namespace", kUserNs}}},
              {"spec", {{"spec", {{"devices", {{"requests", json::array({{{"name", "mine"},
                                                                         {"exactly", {{"deviceClassName", "x"}}}}})}}}}}}}};
  ASSERT_TRUE(env_->client->Create(k8s::resources::kResourceClaimTemplates, kUserNs, rct).ok());
  auto controller = StartController("ctl-conflict");
  json cd = CreateCd("cd-taken", 0);
  const std::string uid = Str(cd, "/metadata/uid");
  EXPECT_TRUE(WaitForEvent(uid, "NameConflict", "cd-taken-channel exists and does not belong"));
  auto still = env_->client->Get(k8s::resources::kResourceClaimTemplates, kUserNs, "cd-taken-channel");
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_EQ((*still)["spec"]["spec"]["devices"]["requests"][0]["name"], "mine");
  EXPECT_FALSE(still->contains("/metadata/labels"_json_pointer)) << still->dump();
  // Deleting the domain does not delete the user's template.
  ASSERT_TRUE(env_->client->Delete(k8s::resources::kComputeDomains, kUserNs, "cd-taken").ok());
  EXPECT_TRUE(cds_->WaitForGone(CdKey("cd-taken")));
  EXPECT_TRUE(env_->client->Get(k8s::resources::kResourceClaimTemplates, kUserNs, "cd-taken-channel").ok());
}


TEST_F(CdControllerTest, DeletedRightAfterCreateLeavesNothing) {
  auto controller = StartController("ctl-quick");
  // Ready first, so the controller runs; then create-and-delete races the
  // controller's own creates against its caches.
  json warm = CreateCd("cd-quick-warm", 0);
  ASSERT_TRUE(cds_->WaitFor(CdKey("cd-quick-warm"), [](const auto& o) { return o && Str(*o, "/status/status") == "Ready"; }));
  for (int i = 0; i < 10; ++i) {
    json cd = CreateCd("cd-quick-" + std::to_string(i), 0);
    DeleteCdAndExpectNothingLeft(cd);
  }
  DeleteCdAndExpectNothingLeft(warm);
}

// Daemons publish only to their own pods; the controller alone writes the
// clique. Many daemons joining and turning Ready at once: one entry per node,
// with the pod's IP and status, distinct indexes, one owner reference per
// pod, and far fewer clique writes than daemon status changes (coalesced).
TEST_F(CdControllerTest, ManyDaemonsAtOnceAreWrittenByTheControllerAlone) {
  const int metrics_port = FreeLocalPort();
  ASSERT_GT(metrics_port, 0);
  auto controller = StartController("ctl-many", {"--http-endpoint=127.0.0.1:" + std::to_string(metrics_port)});
  constexpr int kNodes = 12;
  json cd = CreateCd("cd-many", kNodes);
  const std::string uid = Str(cd, "/metadata/uid");
  ASSERT_FALSE(uid.empty());
  ASSERT_TRUE(dss_->WaitFor(DaemonKey(uid), [](const auto& o) { return o.has_value(); }));
  const std::string clique_key = std::string(kDriverNs) + "/" + uid + ".cm";

  std::vector<PlayedDaemon> daemons;
  for (int i = 0; i < kNodes; ++i) daemons.push_back(Daemon(uid, "cm", std::string("m") + char('a' + i)));
  auto all_at_once = [&](std::string_view status) {
    std::vector<std::thread> publishers;
    std::vector<common::Status> results(kNodes);
    for (int i = 0; i < kNodes; ++i) {
      publishers.emplace_back([&, i] { results[i] = daemons[i].membership->Publish(status).status(); });
    }
    for (auto& p : publishers) p.join();
    for (int i = 0; i < kNodes; ++i) EXPECT_TRUE(results[i].ok()) << daemons[i].node << ": " << results[i];
  };
  all_at_once("NotReady");
  ASSERT_TRUE(cliques_->WaitFor(clique_key, [&](const auto& o) {
    if (!o) return false;
    std::set<std::int64_t> indexes;
    for (const auto& [node, e] : Daemons(*o)) {
      if (e.contains("index")) indexes.insert(e["index"].template get<std::int64_t>());
    }
    return indexes.size() == static_cast<size_t>(kNodes) && *indexes.rbegin() == kNodes - 1;
  })) << cliques_->Get(clique_key).value_or(json()).dump();
  const std::map<std::string, json> joined = Daemons(*cliques_->Get(clique_key));
  all_at_once("Ready");
  ASSERT_TRUE(cds_->WaitFor(CdKey("cd-many"), [](const auto& o) { return o && Str(*o, "/status/status") == "Ready"; }));
  // The domain counts a pod's Ready before the clique write, which follows.
  ASSERT_TRUE(cliques_->WaitFor(clique_key, [&](const auto& o) {
    if (!o) return false;
    const auto entries = Daemons(*o);
    return entries.size() == static_cast<size_t>(kNodes) &&
           std::all_of(entries.begin(), entries.end(), [](const auto& e) { return Str(e.second, "/status") == "Ready"; });
  })) << cliques_->Get(clique_key).value_or(json()).dump();

  const json clique = *cliques_->Get(clique_key);
  EXPECT_EQ(clique["daemons"].size(), static_cast<size_t>(kNodes)) << clique.dump();
  const auto entries = Daemons(clique);
  for (const PlayedDaemon& d : daemons) {
    const json& e = entries.at(d.node);
    EXPECT_EQ(Str(e, "/ipAddress"), d.membership->identity().pod_ip) << d.node;
    EXPECT_EQ(Str(e, "/cliqueID"), "cm") << d.node;
    EXPECT_EQ(Str(e, "/status"), "Ready") << d.node;
    EXPECT_EQ(e["index"], joined.at(d.node)["index"]) << d.node << ": index moved";
  }
  std::map<std::string, int> refs;
  for (const json& r : clique["metadata"].value("ownerReferences", json::array())) ++refs[Str(r, "/uid")];
  for (const PlayedDaemon& d : daemons) EXPECT_EQ(refs[d.membership->identity().pod_uid], 1) << d.node;
  for (const json& m : clique["metadata"]["managedFields"]) {
    EXPECT_FALSE(m.value("manager", "").starts_with("compute-domain-daemon")) << "a daemon wrote the clique: " << m.dump();
  }

  // 24 status changes of daemons; how many writes the controller made for
  // them (clique writes, domain status, its objects) is printed, not
  // asserted: how many changes one write coalesces depends on timing.
  httplib::Client http("127.0.0.1", metrics_port);
  auto scraped = http.Get("/metrics");
  ASSERT_TRUE(scraped) << "no metrics on port " << metrics_port;
  const std::string name = "\nnvdra_compute_domain_controller_api_writes_total ";
  const std::size_t at = scraped->body.find(name);
  ASSERT_NE(at, std::string::npos) << scraped->body;
  const double writes = std::stod(scraped->body.substr(at + name.size()));
  std::printf("cd-many: %d daemons joined and turned Ready at once: %.0f API writes by the controller\n", kNodes,
              writes);
  DeleteCdAndExpectNothingLeft(cd);
}

// The kubelet reports a pod's IP with its next status update, under load
// up to a second after the daemon started and published: the entry (and its
// index, which the daemon waits for) is written from the IP the daemon
// published, and stays when the kubelet's report agrees.
TEST_F(CdControllerTest, EntryIsWrittenBeforeTheKubeletReportsThePodIp) {
  auto controller = StartController("ctl-early-ip");
  json cd = CreateCd("cd-early-ip", 1);
  const std::string uid = Str(cd, "/metadata/uid");
  ASSERT_FALSE(uid.empty());
  const std::string clique_key = std::string(kDriverNs) + "/" + uid + ".ce";
  PlayedDaemon d = Daemon(uid, "ce", "ea", /*kubelet_reported_ip=*/false);
  Apply(d, "NotReady");
  const std::string ip = d.membership->identity().pod_ip;
  ASSERT_TRUE(cliques_->WaitFor(clique_key, [&](const auto& o) {
    if (!o) return false;
    const auto entries = Daemons(*o);
    auto it = entries.find("ea");
    return it != entries.end() && Str(it->second, "/ipAddress") == ip && it->second.contains("index");
  })) << cliques_->Get(clique_key).value_or(json()).dump();
  const std::string written = Str(*cliques_->Get(clique_key), "/metadata/resourceVersion");
  auto reported = env_->client->Patch(k8s::resources::kPods, kDriverNs, DaemonPodName(uid, "ea"),
                                      k8s::PatchType::kMerge, {{"status", {{"podIP", ip}}}}, StatusPatch());
  ASSERT_TRUE(reported.ok()) << reported.status();
  Apply(d, "Ready");
  ASSERT_TRUE(cds_->WaitFor(CdKey("cd-early-ip"), [](const auto& o) { return o && Str(*o, "/status/status") == "Ready"; }));
  // The domain's status may count the pod's Ready before the clique write
  // (it reads the live pod), so the entry is awaited, not read at once.
  ASSERT_TRUE(cliques_->WaitFor(clique_key, [](const auto& o) {
    return o && Str(Daemons(*o)["ea"], "/status") == "Ready";
  })) << cliques_->Get(clique_key).value_or(json()).dump();
  const auto entries = Daemons(*cliques_->Get(clique_key));
  EXPECT_EQ(Str(entries.at("ea"), "/ipAddress"), ip) << "the entry kept the published IP";
  EXPECT_NE(Str(*cliques_->Get(clique_key), "/metadata/resourceVersion"), written) << "Ready was written";
  DeleteCdAndExpectNothingLeft(cd);
}

// A workload claim made from the domain's template (it carries the
// template's labels) is allocated by the scheduler: the controller labels
// the allocated node for the domain at once, before any kubelet prepares
// the claim; a node that serves another domain keeps its label; a claim
// without consumers (its pod gone) labels nothing. Teardown removes the
// label it set.
TEST_F(CdControllerTest, NodeIsLabelledWhenAWorkloadChannelIsAllocated) {
  // One worker: the queue's items are handled in the order they came, so when
  // the last claim's node is labelled the earlier ones were decided.
  auto controller = StartController("ctl-alloc", {"--workers=1"});
  auto intruder_ns = env_->client->Create(
      k8s::resources::kNamespaces, "",
      {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", "cdc-intruder"}}}});
  ASSERT_TRUE(intruder_ns.ok()) << intruder_ns.status();
  json cd = CreateCd("cd-alloc", 1);
  const std::string uid = Str(cd, "/metadata/uid");
  ASSERT_FALSE(uid.empty());
  ASSERT_TRUE(dss_->WaitFor(DaemonKey(uid), [](const auto& o) { return o.has_value(); }));
  EnsureNode("alloc-free");
  CreateNode("alloc-busy", "another-domain");
  auto allocate = [&](const std::string& claim, const std::string& node, const std::string& ns = kUserNs,
                      bool consumed = true) {
    const json request = {{"name", "channel"},
                          {"exactly", {{"deviceClassName", "compute-domain-default-channel.nvidia.com"}}}};
    json object = {
        {"apiVersion", "resource.k8s.io/v1"},
        {"kind", "ResourceClaim"},
        {"metadata",
         {{"name", claim}, {"namespace", ns}, {"labels", {{kCdLabel, uid}, {kTargetLabel, "Workload"}}}}},
        {"spec", {{"devices", {{"requests", json::array({request})}}}}}};
    auto created = env_->client->Create(k8s::resources::kResourceClaims, ns, object);
    ASSERT_TRUE(created.ok()) << created.status();
    // As the scheduler writes it for a device of the node's own pool.
    const json result = {
        {"request", "channel"}, {"driver", "compute-domain.nvidia.com"}, {"pool", node}, {"device", "channel-0"}};
    const json field = {{"key", "metadata.name"}, {"operator", "In"}, {"values", json::array({node})}};
    json allocation = {
        {"devices", {{"results", json::array({result})}}},
        {"nodeSelector", {{"nodeSelectorTerms", json::array({{{"matchFields", json::array({field})}}})}}}};
    json status = {{"allocation", allocation}};
    if (consumed) {
      // A real (never scheduled) pod that uses the claim: kube-controller-
      // manager's claim controller drops reservedFor entries of pods that do
      // not exist, and on a busy machine it could do so before the
      // controller under test looked at the claim.
      json pod = {{"apiVersion", "v1"},
                  {"kind", "Pod"},
                  {"metadata", {{"name", claim + "-pod"}, {"namespace", ns}}},
                  {"spec",
                   {{"containers", json::array({{{"name", "c"}, {"image", "none"}, {"resources", {{"claims", json::array({{{"name", "ch"}}})}}}}})},
                    {"resourceClaims", json::array({{{"name", "ch"}, {"resourceClaimName", claim}}})}}}};
      auto consumer = env_->client->Create(k8s::resources::kPods, ns, pod);
      ASSERT_TRUE(consumer.ok()) << consumer.status();
      status["reservedFor"] = json::array(
          {{{"resource", "pods"}, {"name", claim + "-pod"}, {"uid", Str(*consumer, "/metadata/uid")}}});
    }
    auto patched = env_->client->Patch(k8s::resources::kResourceClaims, ns, claim, k8s::PatchType::kMerge,
                                       {{"status", status}}, StatusPatch());
    ASSERT_TRUE(patched.ok()) << patched.status();
  };
  constexpr char kNodeLabel[] = "/metadata/labels/resource.nvidia.com~1computeDomain";
  // A claim allocated with no consumer left: the resource-claim controller
  // empties reservedFor once the claim's pod is gone, after the kubelet
  // plugin's Unprepare removed the node's label; that update must not label
  // the node again (its daemon would stay there for good).
  EnsureNode("alloc-left");
  allocate("worker-left-channel", "alloc-left", kUserNs, /*consumed=*/false);
  allocate("worker-busy-channel", "alloc-busy");
  // Another namespace's claim with the domain's labels (anyone can set them)
  // places no daemon.
  EnsureNode("alloc-intruded");
  allocate("intruder-channel", "alloc-intruded", "cdc-intruder");
  allocate("worker-free-channel", "alloc-free");
  ASSERT_TRUE(nodes_->WaitFor("alloc-free", [&](const auto& o) { return o && Str(*o, kNodeLabel) == uid; }))
      << nodes_->Get("alloc-free").value_or(json()).dump();
  EXPECT_EQ(Str(*nodes_->Get("alloc-busy"), kNodeLabel), "another-domain");
  EXPECT_EQ(Str(*nodes_->Get("alloc-intruded"), kNodeLabel), "") << "labelled for another namespace's claim";
  EXPECT_EQ(Str(*nodes_->Get("alloc-left"), kNodeLabel), "") << "labelled for a claim no pod uses";
  for (const char* claim : {"worker-left-channel", "worker-busy-channel", "worker-free-channel"}) {
    EXPECT_TRUE(env_->client->Delete(k8s::resources::kResourceClaims, kUserNs, claim).ok());
    (void)env_->client->Delete(k8s::resources::kPods, kUserNs, std::string(claim) + "-pod");
  }
  EXPECT_TRUE(env_->client->Delete(k8s::resources::kResourceClaims, "cdc-intruder", "intruder-channel").ok());
  (void)env_->client->Delete(k8s::resources::kPods, "cdc-intruder", "intruder-channel-pod");
  DeleteCdAndExpectNothingLeft(cd);
  EXPECT_TRUE(nodes_->WaitFor("alloc-free", [&](const auto& o) { return o && Str(*o, kNodeLabel).empty(); }));
  EXPECT_EQ(Str(*nodes_->Get("alloc-busy"), kNodeLabel), "another-domain");
}

}  // namespace
}  // namespace nvdra::testing
