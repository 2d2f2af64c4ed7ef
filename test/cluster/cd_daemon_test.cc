// compute-domain-daemon as processes against a real control plane, with the
// simulated nvidia-imex (test/simimex) on distinct loopback addresses and a
// folder per simulated node (imexd dir, hosts file). The test plays the
// controller, the only writer of clique entries (issue 9): informer handlers
// turn the daemons' pods (clique label, status annotation) into entries with
// indexes 0..n-1 by server-side apply. Pods are plain objects that no
// scheduler or kubelet picks up: the daemon only patches its pod.
//
// Checks: a daemon never writes the clique and waits for its index, all
// become Ready, nodes.cfg and hosts content, a SIGKILLed nvidia-imex is seen
// (NotReady) and restarted (Ready), SIGTERM turns only the daemon's own entry
// NotReady, a daemon of domain A never touches domain B's clique, `check`
// exit codes, empty clique ID, missing COMPUTE_DOMAIN_UUID, and (with a mock
// NVML driver root) a GPU whose NVLink fabric turns unhealthy makes the
// entry NotReady with its reason until it is healthy again. The other
// daemons run without NVML (none on this machine): no fabric check. Two
// daemons serve metrics (--http-endpoint): nvidia-imex's state, starts by
// reason (a crash counted), clique entries, peers, file writes, the first
// READY, published readiness and unhealthy GPUs; one scrape is saved for
// chart.monitoring_queries. A malformed endpoint or path stops `run` naming
// the flag. Prints the time from daemon start to Ready entry.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cluster_client.h"
#include "gpu_plugin_harness.h"
#include "k8s/cache/informer.h"
#include "k8s/rest_list_watch.h"
#include "mock_fabric.h"

namespace nvdra::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr char kNamespace[] = "cd-daemon-test";
constexpr char kClique[] = "a1b2c3d4-0000-4000-8000-000000000001.1";
constexpr char kIndexWriter[] = "test-index-writer";
const json kStatusSchema = {{"type", "string"}, {"enum", json::array({"Ready", "NotReady"})}, {"default", "NotReady"}};

// STAND-IN for the chart's computedomaincliques CRD until issue 9 lands it:
// only what the daemon relies on — namespaced, resource.nvidia.com/v1beta1,
// `daemons` a list-map keyed by nodeName (server-side apply merges per
// entry), `index` optional, everything else preserved. Other suites may
// install their own stand-in; this one is kept in this file on purpose.
json StandInCliqueCrd() {
  json entry = {{"type", "object"},
                {"required", json::array({"nodeName", "ipAddress", "cliqueID"})},
                {"properties",
                 {{"nodeName", {{"type", "string"}}},
                  {"ipAddress", {{"type", "string"}}},
                  {"cliqueID", {{"type", "string"}}},
                  {"index", {{"type", "integer"}}},
                  {"status", kStatusSchema},
                  {"reason", {{"type", "string"}}},
                  {"message", {{"type", "string"}}}}}};
  json schema = {{"type", "object"},
                 {"x-kubernetes-preserve-unknown-fields", true},
                 {"properties",
                  {{"daemons",
                    {{"type", "array"},
                     {"x-kubernetes-list-type", "map"},
                     {"x-kubernetes-list-map-keys", json::array({"nodeName"})},
                     {"items", entry}}}}}};
  return {{"apiVersion", "apiextensions.k8s.io/v1"},
          {"kind", "CustomResourceDefinition"},
          {"metadata", {{"name", "computedomaincliques.resource.nvidia.com"}}},
          {"spec",
           {{"group", "resource.nvidia.com"},
            {"scope", "Namespaced"},
            {"names",
             {{"kind", "ComputeDomainClique"},
              {"listKind", "ComputeDomainCliqueList"},
              {"plural", "computedomaincliques"},
              {"singular", "computedomainclique"}}},
            {"versions", json::array({{{"name", "v1beta1"},
                                       {"served", true},
                                       {"storage", true},
                                       {"schema", {{"openAPIV3Schema", schema}}}}})}}}};
}

// Bounded wait on something without an event (files written by daemons).
bool Eventually(const std::function<bool()>& condition, std::chrono::milliseconds bound = 30s) {
  const auto deadline = Clock::now() + bound;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return condition();
}

// The value of `series` (written exactly as served, labels sorted) in a
// /metrics body; nullopt when absent.
std::optional<double> Sample(const std::string& body, const std::string& series) {
  const std::string text = "\n" + body;
  const std::size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return std::nullopt;
  const std::size_t begin = at + 1 + series.size() + 1;
  return std::stod(text.substr(begin, text.find('\n', begin) - begin));
}

std::string Slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The daemons of a clique as nodeName -> entry.
// For a ComputeDomain: its status.nodes as name -> entry.
std::map<std::string, json> Entries(const json& clique) {
  std::map<std::string, json> out;
  if (clique.value("kind", "") == "ComputeDomain") {
    if (!clique.contains("status") || !clique["status"].contains("nodes")) return out;
    for (const json& e : clique["status"]["nodes"]) out[e.value("name", "")] = e;
    return out;
  }
  if (!clique.contains("daemons")) return out;
  for (const json& e : clique["daemons"]) out[e.value("nodeName", "")] = e;
  return out;
}

// STAND-IN for the chart's computedomains CRD (issue 9): status subresource,
// status.nodes a list-map keyed by name with `index`, `reason` and `message`
// optional.
json StandInComputeDomainCrd() {
  json node = {{"type", "object"},
               {"required", json::array({"name", "ipAddress", "cliqueID"})},
               {"properties",
                {{"name", {{"type", "string"}}},
                 {"ipAddress", {{"type", "string"}}},
                 {"cliqueID", {{"type", "string"}}},
                 {"index", {{"type", "integer"}}},
                 {"status", kStatusSchema},
                 {"reason", {{"type", "string"}}},
                 {"message", {{"type", "string"}}}}}};
  json schema = {{"type", "object"},
                 {"x-kubernetes-preserve-unknown-fields", true},
                 {"properties",
                  {{"status",
                    {{"type", "object"},
                     {"x-kubernetes-preserve-unknown-fields", true},
                     {"properties",
                      {{"nodes",
                        {{"type", "array"},
                         {"x-kubernetes-list-type", "map"},
                         {"x-kubernetes-list-map-keys", json::array({"name"})},
                         {"items", node}}}}}}}}}};
  return {{"apiVersion", "apiextensions.k8s.io/v1"},
          {"kind", "CustomResourceDefinition"},
          {"metadata", {{"name", "computedomains.resource.nvidia.com"}}},
          {"spec",
           {{"group", "resource.nvidia.com"},
            {"scope", "Namespaced"},
            {"names",
             {{"kind", "ComputeDomain"},
              {"listKind", "ComputeDomainList"},
              {"plural", "computedomains"},
              {"singular", "computedomain"}}},
            {"versions", json::array({{{"name", "v1beta1"},
                                       {"served", true},
                                       {"storage", true},
                                       {"subresources", {{"status", json::object()}}},
                                       {"schema", {{"openAPIV3Schema", schema}}}}})}}}};
}

// Follows every clique of the namespace; waits are woken by watch events.
// For the cliques it is told to serve it also plays the controller, the only
// writer of clique entries: from the daemons' pods (the clique label and the
// status annotation each daemon publishes; node and IP as registered, since
// these pods never run) it writes every entry with the lowest free index,
// stable once given (one server-side apply per change, field manager
// kIndexWriter). Entries of pods that are gone or unpublished are dropped.
class CliqueWatch {
 public:
  explicit CliqueWatch(k8s::Client& client, const k8s::ResourceRef& resource = k8s::resources::kComputeDomainCliques)
      : client_(client) {
    k8s::cache::InformerOptions options;
    options.description = resource.resource;
    informer_ = std::make_unique<k8s::cache::Informer>(
        std::make_unique<k8s::RestListWatch>(client, resource, kNamespace),
        std::move(options));
    auto changed = [this](const k8s::cache::ObjectPtr& object) { OnChange(*object, false); };
    informer_->AddEventHandler(
        {.on_add = changed,
         .on_update = [changed](const k8s::cache::ObjectPtr&, const k8s::cache::ObjectPtr& now) { changed(now); },
         .on_delete = [this](const k8s::cache::ObjectPtr& last) { OnChange(*last, true); }});
    informer_->Start();
    if (&resource == &k8s::resources::kComputeDomainCliques) {
      k8s::cache::InformerOptions pod_options;
      pod_options.description = "pods";
      pods_ = std::make_unique<k8s::cache::Informer>(
          std::make_unique<k8s::RestListWatch>(client, k8s::resources::kPods, kNamespace), std::move(pod_options));
      auto pod_changed = [this](const k8s::cache::ObjectPtr&) { WriteServed(); };
      pods_->AddEventHandler({.on_add = pod_changed,
                              .on_update = [pod_changed](const k8s::cache::ObjectPtr&,
                                                         const k8s::cache::ObjectPtr& now) { pod_changed(now); },
                              .on_delete = pod_changed});
      pods_->Start();
    }
  }
  ~CliqueWatch() {
    if (pods_) pods_->Stop();
    informer_->Stop();
  }

  // The daemon pod `pod` runs on `node` with `ip` and belongs to `clique`.
  void Register(const std::string& pod, const std::string& node, const std::string& ip, const std::string& clique) {
    {
      std::lock_guard lock(mutex_);
      pods_by_name_[pod] = {node, ip, clique};
    }
    WriteServed();
  }

  // From now on, writes the entries of `clique` (at once for pods already published).
  void ServeIndexes(const std::string& clique) {
    {
      std::lock_guard lock(mutex_);
      served_.insert({clique, {}});
    }
    WriteServed();
  }

  // Waits until `pred` holds for the clique (nullopt: absent).
  bool WaitFor(const std::string& name, const std::function<bool(const std::optional<json>&)>& pred,
               std::chrono::milliseconds bound = 30s) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, bound, [&] { return pred(Current(name)); });
  }
  std::optional<json> Get(const std::string& name) {
    std::lock_guard lock(mutex_);
    return Current(name);
  }
  // When each node's entry was first seen Ready.
  std::optional<Clock::time_point> ReadySince(const std::string& clique, const std::string& node) {
    std::lock_guard lock(mutex_);
    auto it = first_ready_.find(clique + "/" + node);
    if (it == first_ready_.end()) return std::nullopt;
    return it->second;
  }

 private:
  struct RegisteredPod {
    std::string node, ip, clique;
  };

  std::optional<json> Current(const std::string& name) {
    auto it = cliques_.find(name);
    if (it == cliques_.end()) return std::nullopt;
    return it->second;
  }

  void OnChange(const json& object, bool deleted) {
    const std::string name = object["metadata"]["name"];
    {
      std::lock_guard lock(mutex_);
      if (deleted) {
        cliques_.erase(name);
      } else {
        cliques_[name] = object;
        for (const auto& [node, entry] : Entries(object)) {
          if (entry.value("status", "") == "Ready") first_ready_.insert({name + "/" + node, Clock::now()});
        }
      }
    }
    changed_.notify_all();
  }

  // Writes each served clique from the pods (one writer: calls are serialised).
  void WriteServed() {
    std::lock_guard write_lock(write_mutex_);
    std::map<std::string, json> intents;
    {
      std::lock_guard lock(mutex_);
      for (auto& [clique, given] : served_) {
        std::map<std::string, std::pair<std::string, std::string>> members;  // node -> (ip, status)
        for (const auto& [pod_name, reg] : pods_by_name_) {
          if (reg.clique != clique) continue;
          k8s::cache::ObjectPtr pod = pods_->store().Get(std::string(kNamespace) + "/" + pod_name);
          if (!pod || !(*pod)["metadata"].contains("labels")) continue;
          const json& labels = (*pod)["metadata"]["labels"];
          if (!labels.contains("resource.nvidia.com/computeDomain.cliqueID")) continue;
          const json annotations = (*pod)["metadata"].value("annotations", json::object());
          members[reg.node] = {reg.ip, annotations.value("resource.nvidia.com/computeDomain.daemonStatus", "NotReady")};
        }
        // Pods that left give their index back (gap-filling); newcomers get the lowest free one.
        for (auto it = given.begin(); it != given.end();) it = members.contains(it->first) ? std::next(it) : given.erase(it);
        for (const auto& [node, _] : members) {
          if (given.contains(node)) continue;
          std::int64_t index = 0;
          while (std::any_of(given.begin(), given.end(), [&](const auto& g) { return g.second == index; })) ++index;
          given[node] = index;
        }
        json daemons = json::array();
        for (const auto& [node, m] : members) {
          daemons.push_back({{"nodeName", node}, {"ipAddress", m.first}, {"cliqueID", clique.substr(clique.rfind('.') + 1)},
                             {"status", m.second}, {"index", given[node]}});
        }
        auto current = Current(clique);
        if (current && current->value("daemons", json::array()) == daemons) continue;
        if (!current && daemons.empty()) continue;
        intents[clique] = {{"apiVersion", "resource.nvidia.com/v1beta1"},
                           {"kind", "ComputeDomainClique"},
                           {"metadata", {{"name", clique}, {"namespace", kNamespace}}},
                           {"daemons", daemons}};
      }
    }
    for (const auto& [clique, intent] : intents) {
      k8s::PatchOptions options;
      options.field_manager = kIndexWriter;
      options.force = true;
      auto result = client_.Apply(k8s::resources::kComputeDomainCliques, kNamespace, intent, options);
      if (!result.ok()) ADD_FAILURE() << "stand-in controller: " << result.status();
    }
  }

  k8s::Client& client_;
  std::mutex write_mutex_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, json> cliques_;
  std::map<std::string, std::map<std::string, std::int64_t>> served_;
  std::map<std::string, RegisteredPod> pods_by_name_;
  std::map<std::string, Clock::time_point> first_ready_;
  std::unique_ptr<k8s::cache::Informer> informer_;
  std::unique_ptr<k8s::cache::Informer> pods_;
};

// One simulated node: a pod object, a folder and a daemon process.
struct DaemonNode {
  std::string node;
  std::string ip;
  std::string pod;
  std::string pod_uid;
  fs::path dir;
  std::unique_ptr<PluginProcess> process;
  Clock::time_point started;

  fs::path imexd() const { return dir / "imexd"; }
  fs::path hosts() const { return dir / "hosts"; }
  fs::path log() const { return dir / "daemon.log"; }
};

class CdDaemonTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    env_ = new ClusterClient();
    const std::string error = StartClusterClient(*env_, kNamespace);
    ASSERT_EQ(error, "") << error;
    ASSERT_TRUE(env_->cluster->Apply(StandInCliqueCrd()).ok());
    ASSERT_TRUE(env_->cluster->Apply(StandInComputeDomainCrd()).ok());
    ASSERT_TRUE(Eventually([] {
      return env_->client->List(k8s::resources::kComputeDomainCliques, kNamespace).ok() &&
             env_->client->List(k8s::resources::kComputeDomains, kNamespace).ok();
    }, 60s));
    watch_ = new CliqueWatch(*env_->client);
    cd_watch_ = new CliqueWatch(*env_->client, k8s::resources::kComputeDomains);
  }
  static void TearDownTestSuite() {
    delete watch_;
    watch_ = nullptr;
    delete cd_watch_;
    cd_watch_ = nullptr;
    delete env_;
    env_ = nullptr;
  }

  // A fresh address block per test process: the simulated daemons bind
  // <ip>:50000 and <ip>:50005, and other suites may run beside this one.
  static std::string Ip(int host) {
    return "127.213." + std::to_string(getpid() % 250 + 1) + "." + std::to_string(host);
  }

  std::unique_ptr<DaemonNode> MakeNode(const std::string& node, const std::string& ip) {
    auto n = std::make_unique<DaemonNode>();
    n->node = node;
    n->ip = ip;
    n->pod = "daemon-" + node;
    std::string pattern = "/tmp/cd-daemon-" + node + "-XXXXXX";
    EXPECT_NE(mkdtemp(pattern.data()), nullptr);
    n->dir = pattern;
    WriteFile(n->hosts(), "127.0.0.1\tlocalhost\n");
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", n->pod}, {"namespace", kNamespace}}},
                // No scheduler serves this name: the pod stays an object.
                {"spec",
                 {{"schedulerName", "no-scheduler"},
                  {"containers", json::array({{{"name", "daemon"}, {"image", "unused"}}})}}}};
    auto created = env_->client->Create(k8s::resources::kPods, kNamespace, pod);
    EXPECT_TRUE(created.ok()) << created.status();
    if (created.ok()) n->pod_uid = (*created)["metadata"]["uid"];
    return n;
  }

  static std::vector<std::string> DaemonEnv(const DaemonNode& n, const std::string& cd_uid, const std::string& clique) {
    const std::string bin = NVDRA_SIMIMEX_DIR;
    return {"PATH=" + bin + ":/usr/bin:/bin",
            "KUBECONFIG=" + env_->cluster->kubeconfig().string(),
            "CLIQUE_ID=" + clique,
            "COMPUTE_DOMAIN_UUID=" + cd_uid,
            "COMPUTE_DOMAIN_NAME=cd",
            "COMPUTE_DOMAIN_NAMESPACE=user-ns",
            "NODE_NAME=" + n.node,
            "POD_IP=" + n.ip,
            "POD_UID=" + n.pod_uid,
            "POD_NAME=" + n.pod,
            "POD_NAMESPACE=" + std::string(kNamespace),
            "MAX_NODES_PER_IMEX_DOMAIN=18",
            "IMEXD_DIR=" + n.imexd().string(),
            "HOSTS_FILE=" + n.hosts().string(),
            "IMEX_BINARY=" + bin + "/nvidia-imex",
            "IMEX_CTL_BINARY=" + bin + "/nvidia-imex-ctl",
            "IMEX_CONFIG_TEMPLATE=" + std::string(NVDRA_SOURCE_DIR) +
                "/templates/compute-domain-daemon-config.tmpl.cfg",
            "IMEX_STOP_GRACE_SECONDS=5",
            // The simulator resolves the DNS names through this node's hosts file.
            "SIMIMEX_HOSTS_FILE=" + n.hosts().string()};
  }

  void StartDaemon(DaemonNode& n, const std::string& cd_uid, const std::string& clique = "1",
                   const std::vector<std::string>& extra_env = {}) {
    std::vector<std::string> env = DaemonEnv(n, cd_uid, clique);
    // An extra entry replaces the default of the same name.
    for (const std::string& e : extra_env) {
      const std::string key = e.substr(0, e.find('=') + 1);
      std::erase_if(env, [&](const std::string& x) { return x.starts_with(key); });
      env.push_back(e);
    }
    if (!clique.empty()) watch_->Register(n.pod, n.node, n.ip, cd_uid + "." + clique);
    n.process = std::make_unique<PluginProcess>(std::vector<std::string>{CD_DAEMON, "-v", "4", "run"}, env, n.log());
    n.started = Clock::now();
    ASSERT_TRUE(n.process->Start());
  }

  int Check(const DaemonNode& n, const std::string& clique = "1") {
    PluginProcess check({CD_DAEMON, "check"}, DaemonEnv(n, "unused", clique), n.dir / "check.log");
    if (!check.Start()) return -1;
    return check.WaitExit(30s).value_or(-1);
  }

  // nvidia-imex's pid: the daemon's main thread spawns it (ctl runs from the
  // poller thread, so it is not in this list).
  static pid_t ImexPid(const DaemonNode& n) {
    std::istringstream children(
        Slurp("/proc/" + std::to_string(n.process->pid()) + "/task/" + std::to_string(n.process->pid()) + "/children"));
    pid_t pid = 0;
    children >> pid;
    return pid;
  }

  static std::string Log(const DaemonNode& n) { return "--- " + n.log().string() + ":\n" + Slurp(n.log()); }

  static ClusterClient* env_;
  static CliqueWatch* watch_;
  static CliqueWatch* cd_watch_;
};

ClusterClient* CdDaemonTest::env_ = nullptr;
CliqueWatch* CdDaemonTest::watch_ = nullptr;
CliqueWatch* CdDaemonTest::cd_watch_ = nullptr;

TEST_F(CdDaemonTest, FourDaemonsFormADomainSurviveAnImexCrashAndLeaveAlone) {
  const std::string cd_a = "a1b2c3d4-0000-4000-8000-000000000001";
  const std::string cd_b = "b1b2c3d4-0000-4000-8000-000000000002";
  const std::string clique_b = cd_b + ".1";
  std::vector<std::unique_ptr<DaemonNode>> nodes;
  for (int i = 0; i < 4; ++i) nodes.push_back(MakeNode("node-" + std::to_string(i), Ip(i + 1)));
  auto all_logs = [&] {
    std::string out;
    for (auto& n : nodes) out += Log(*n);
    return out;
  };

  // Domain B's clique names node-0 with node-0's IP (as after a move between
  // domains, upstream #1447): nothing of domain A may write it.
  json b = {{"apiVersion", "resource.nvidia.com/v1beta1"},
            {"kind", "ComputeDomainClique"},
            {"metadata", {{"name", clique_b}, {"namespace", kNamespace}}},
            {"daemons", json::array({{{"nodeName", "node-0"}, {"ipAddress", nodes[0]->ip}, {"cliqueID", "1"},
                                      {"index", 0}, {"status", "Ready"}}})}};
  auto created_b = env_->client->Create(k8s::resources::kComputeDomainCliques, kNamespace, b);
  ASSERT_TRUE(created_b.ok()) << created_b.status();
  const std::string b_version = (*created_b)["metadata"]["resourceVersion"];

  // The index writer serves from the start, as the controller would.
  watch_->ServeIndexes(kClique);
  // node-1 (the one whose nvidia-imex is killed below) serves its metrics.
  const int metrics_port = FreeLocalPort();
  ASSERT_GT(metrics_port, 0);
  for (auto& n : nodes) {
    if (n.get() == nodes[1].get()) {
      StartDaemon(*n, cd_a, "1", {"HTTP_ENDPOINT=127.0.0.1:" + std::to_string(metrics_port)});
    } else {
      StartDaemon(*n, cd_a);
    }
  }
  auto scrape = [&] {
    httplib::Client http("127.0.0.1", metrics_port);
    auto response = http.Get("/metrics");
    return response && response->status == 200 ? response->body : std::string();
  };
  const std::string d = "nvdra_compute_domain_daemon_";
  auto all_ready = [](const std::optional<json>& c) {
    if (!c) return false;
    auto entries = Entries(*c);
    return entries.size() == 4 && std::all_of(entries.begin(), entries.end(), [](const auto& e) {
             return e.second.value("status", "") == "Ready" && e.second.contains("index");
           });
  };
  ASSERT_TRUE(watch_->WaitFor(kClique, all_ready, 60s)) << all_logs() << watch_->Get(kClique)->dump(1);

  json clique = *watch_->Get(kClique);
  std::map<std::string, std::int64_t> index_of;
  for (const auto& [node, entry] : Entries(clique)) index_of[node] = entry["index"];
  std::set<std::int64_t> indexes;
  for (const auto& [node, index] : index_of) indexes.insert(index);
  EXPECT_EQ(indexes, (std::set<std::int64_t>{0, 1, 2, 3}));
  // Daemons never write the clique (the controller does, from their pods);
  // each pod carries its clique label and its daemon's status.
  for (const json& m : clique["metadata"]["managedFields"]) {
    EXPECT_FALSE(m["manager"].get<std::string>().starts_with("compute-domain-daemon")) << m.dump();
  }
  for (auto& n : nodes) {
    auto pod = env_->client->Get(k8s::resources::kPods, kNamespace, n->pod);
    ASSERT_TRUE(pod.ok()) << pod.status();
    EXPECT_EQ((*pod)["metadata"]["labels"]["resource.nvidia.com/computeDomain.cliqueID"], "1") << n->node;
    EXPECT_EQ((*pod)["metadata"]["annotations"]["resource.nvidia.com/computeDomain.daemonStatus"], "Ready") << n->node;
  }

  // The benchmark figure: daemon start to its Ready entry (includes the
  // stand-in controller's round trips, as the controller's would).
  std::vector<double> ms;
  for (auto& n : nodes) {
    auto ready = watch_->ReadySince(kClique, n->node);
    ASSERT_TRUE(ready.has_value());
    ms.push_back(std::chrono::duration<double, std::milli>(*ready - n->started).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("BENCH cd_daemon.start_to_ready_ms min=%.1f median=%.1f max=%.1f (n=%zu)\n", ms.front(),
              (ms[1] + ms[2]) / 2, ms.back(), ms.size());

  // node-1's metrics once all are Ready: nvidia-imex READY, started once,
  // the whole clique Ready as its daemon saw it, its files written. The
  // daemon's view trails the test's watch by a poll or an event: no event
  // reaches the test from a scrape, so it is asked until it agrees (bounded).
  std::string body;
  EXPECT_TRUE(Eventually([&] {
    body = scrape();
    return Sample(body, d + "imex_state{state=\"READY\"}") == 1 &&
           Sample(body, d + "clique_daemons{status=\"Ready\"}") == 4 && Sample(body, d + "imex_peers") == 4 &&
           Sample(body, d + "ready") == 1;
  })) << body;
  EXPECT_EQ(Sample(body, d + "imex_state{state=\"NOT_RUNNING\"}"), 0) << body;
  EXPECT_EQ(Sample(body, d + "clique_daemons{status=\"NotReady\"}"), 0) << body;
  EXPECT_EQ(Sample(body, d + "imex_starts_total{reason=\"initial\"}"), 1) << body;
  // An unexpected exit is logged with its status: print the daemons' logs.
  EXPECT_EQ(Sample(body, d + "imex_starts_total{reason=\"exited\"}"), 0) << body << all_logs();
  EXPECT_EQ(Sample(body, d + "file_writes_total{file=\"imexd.cfg\",result=\"success\"}"), 1) << body;
  EXPECT_EQ(Sample(body, d + "file_writes_total{file=\"nodes.cfg\",result=\"success\"}"), 1) << body;
  EXPECT_GE(Sample(body, d + "file_writes_total{file=\"hosts\",result=\"success\"}").value_or(0), 1) << body;
  const std::optional<double> first_ready = Sample(body, d + "imex_first_ready_seconds");
  ASSERT_TRUE(first_ready.has_value()) << body;
  EXPECT_GT(*first_ready, 0);
  EXPECT_LE(*first_ready, std::chrono::duration<double>(Clock::now() - nodes[1]->started).count());
  EXPECT_NE(body.find("\nprocess_resident_memory_bytes "), std::string::npos) << body;
  EXPECT_EQ(Sample(body, d + "api_errors_total{verb=\"patch\"}"), 0) << body;

  // Files: the static nodes file, hosts mapping every peer by its index.
  for (auto& n : nodes) {
    std::string expected_nodes;
    for (int i = 0; i < 18; ++i) {
      expected_nodes += "compute-domain-daemon-" + std::string(i < 10 ? "000" : "00") + std::to_string(i) + "\n";
    }
    EXPECT_EQ(Slurp(n->imexd() / "nodes.cfg"), expected_nodes);
    EXPECT_NE(Slurp(n->imexd() / "imexd.cfg").find("IMEX_CMD_BIND_INTERFACE_IP=" + n->ip + "\n"), std::string::npos);
    EXPECT_TRUE(Eventually([&] {
      const std::string hosts = Slurp(n->hosts());
      bool ok = hosts.starts_with("127.0.0.1\tlocalhost\n# Compute Domain Daemon mappings\n");
      for (auto& peer : nodes) {
        char name[64];
        std::snprintf(name, sizeof name, "%s\tcompute-domain-daemon-%04lld\n", peer->ip.c_str(),
                      static_cast<long long>(index_of[peer->node]));
        ok = ok && hosts.find(name) != std::string::npos;
      }
      return ok;
    })) << n->node << ":\n" << Slurp(n->hosts());
    EXPECT_EQ(Check(*n), 0) << n->node;
  }
  EXPECT_EQ(Check(*nodes[0], ""), 0) << "empty clique ID: the probe passes";

  // A crash of nvidia-imex: NotReady at once (pidfd), then restarted and Ready.
  DaemonNode& victim = *nodes[1];
  const pid_t old_pid = ImexPid(victim);
  ASSERT_GT(old_pid, 0);
  const std::string victim_node = victim.node;
  auto victim_status = [&](const std::string& want) {
    return [=](const std::optional<json>& c) {
      if (!c) return false;
      auto entries = Entries(*c);
      return entries.contains(victim_node) && entries[victim_node].value("status", "") == want;
    };
  };
  const auto killed_at = Clock::now();
  ASSERT_EQ(kill(old_pid, SIGKILL), 0);
  ASSERT_TRUE(watch_->WaitFor(kClique, victim_status("NotReady"))) << Log(victim);
  const double not_ready_ms = std::chrono::duration<double, std::milli>(Clock::now() - killed_at).count();
  ASSERT_TRUE(watch_->WaitFor(kClique, victim_status("Ready"))) << Log(victim);
  const double recovered_ms = std::chrono::duration<double, std::milli>(Clock::now() - killed_at).count();
  std::printf("BENCH cd_daemon.imex_kill_to_not_ready_ms=%.1f kill_to_ready_again_ms=%.1f\n", not_ready_ms,
              recovered_ms);
  EXPECT_NE(ImexPid(victim), old_pid);
  EXPECT_EQ(Entries(*watch_->Get(kClique))[victim_node]["index"], index_of[victim_node]) << "index kept";
  // The restart is counted, the state READY again, the first READY kept.
  EXPECT_TRUE(Eventually([&] {
    body = scrape();
    return Sample(body, d + "imex_state{state=\"READY\"}") == 1 && Sample(body, d + "ready") == 1;
  })) << body;
  EXPECT_EQ(Sample(body, d + "imex_starts_total{reason=\"exited\"}"), 1) << body << all_logs();
  EXPECT_EQ(Sample(body, d + "imex_starts_total{reason=\"initial\"}"), 1) << body;
  EXPECT_EQ(Sample(body, d + "imex_first_ready_seconds"), first_ready) << body;
  SaveMetricsScrape("compute-domain-daemon", body);

  // SIGTERM: the daemon says NotReady, stops nvidia-imex, exits 0; its
  // entry turns NotReady, the others are untouched. Its pod then goes: the
  // entry goes, and the others drop it from their hosts files.
  DaemonNode& leaver = *nodes[3];
  const pid_t leaver_imex = ImexPid(leaver);
  ASSERT_EQ(kill(leaver.process->pid(), SIGTERM), 0);
  EXPECT_EQ(leaver.process->WaitExit(30s), std::optional<int>(0)) << Log(leaver);
  EXPECT_NE(kill(leaver_imex, 0), 0) << "nvidia-imex of the stopped daemon still runs";
  const std::string leaver_node = leaver.node;
  ASSERT_TRUE(watch_->WaitFor(kClique, [&](const std::optional<json>& c) {
    return c && Entries(*c).contains(leaver_node) && Entries(*c)[leaver_node].value("status", "") == "NotReady";
  }));
  k8s::DeleteOptions now;
  now.grace_period_seconds = 0;
  ASSERT_TRUE(env_->client->Delete(k8s::resources::kPods, kNamespace, leaver.pod, now).ok());
  ASSERT_TRUE(watch_->WaitFor(kClique, [&](const std::optional<json>& c) {
    return c && Entries(*c).size() == 3 && !Entries(*c).contains(leaver_node);
  }));
  for (const auto& [node, entry] : Entries(*watch_->Get(kClique))) {
    EXPECT_EQ(entry["index"], index_of[node]) << node << ": no index changed";
    EXPECT_EQ(entry.value("status", ""), "Ready") << node;
  }
  EXPECT_TRUE(Eventually([&] { return Slurp(nodes[0]->hosts()).find(leaver.ip + "\t") == std::string::npos; }))
      << Slurp(nodes[0]->hosts());
  EXPECT_EQ(Check(leaver), 1) << "its nvidia-imex is gone";

  // Stop node-0 as well: domain B's clique, which names node-0 with the same
  // IP, is untouched (not even a no-op write).
  ASSERT_EQ(kill(nodes[0]->process->pid(), SIGTERM), 0);
  EXPECT_EQ(nodes[0]->process->WaitExit(30s), std::optional<int>(0)) << Log(*nodes[0]);
  auto b_now = env_->client->Get(k8s::resources::kComputeDomainCliques, kNamespace, clique_b);
  ASSERT_TRUE(b_now.ok());
  EXPECT_EQ((*b_now)["metadata"]["resourceVersion"], b_version) << b_now->dump(1);
  EXPECT_EQ(Entries(*b_now).size(), 1u);

  for (auto& n : nodes) n->process->Stop();
  if (!std::getenv("CD_DAEMON_TEST_KEEP")) for (auto& n : nodes) fs::remove_all(n->dir);
}

TEST_F(CdDaemonTest, DaemonWaitsForItsIndexBeforeStartingImex) {
  const std::string cd = "d1b2c3d4-0000-4000-8000-000000000004";
  const std::string clique = cd + ".1";
  auto n = MakeNode("node-waits", Ip(43));
  StartDaemon(*n, cd);
  const std::string node = n->node;
  // It publishes NotReady on its pod; without an entry (no controller
  // serves the clique yet) it does not start nvidia-imex.
  ASSERT_TRUE(Eventually([&] {
    auto pod = env_->client->Get(k8s::resources::kPods, kNamespace, n->pod);
    return pod.ok() && (*pod)["metadata"].value("annotations", json::object())
                               .value("resource.nvidia.com/computeDomain.daemonStatus", "") == "NotReady";
  })) << Log(*n);
  EXPECT_FALSE(watch_->Get(clique).has_value()) << "a daemon wrote the clique";
  EXPECT_EQ(ImexPid(*n), 0) << "nvidia-imex started without an index";
  const auto assigned_at = Clock::now();
  watch_->ServeIndexes(clique);
  ASSERT_TRUE(watch_->WaitFor(clique, [&](const std::optional<json>& c) {
    return c && Entries(*c)[node].value("status", "") == "Ready";
  })) << Log(*n);
  std::printf("BENCH cd_daemon.index_assigned_to_ready_ms=%.1f\n",
              std::chrono::duration<double, std::milli>(Clock::now() - assigned_at).count());
  EXPECT_EQ(Entries(*watch_->Get(clique))[node]["index"], 0);
  EXPECT_EQ(Entries(*watch_->Get(clique))[node]["ipAddress"], n->ip);
  ASSERT_EQ(kill(n->process->pid(), SIGTERM), 0);
  EXPECT_EQ(n->process->WaitExit(30s), std::optional<int>(0)) << Log(*n);
  ASSERT_TRUE(watch_->WaitFor(clique, [&](const std::optional<json>& c) {
    return c && Entries(*c)[node].value("status", "") == "NotReady";
  }));
  fs::remove_all(n->dir);
}

// Gates IMEXDaemonsWithDNSNames and ComputeDomainCliques off (upstream's
// legacy path): entries in the ComputeDomain's status.nodes, nodes.cfg lists
// the peers' IPs, and nvidia-imex restarts when that list changes.
// A peer's entry that arrives while this node's nvidia-imex is still
// starting changes the hosts file at once, but the SIGUSR1 that asks for a
// reload waits until the process answers a query: sent earlier, it would end
// the process (the signal's default action) and cost a restart.
TEST_F(CdDaemonTest, AReloadWaitsUntilAStartingImexAnswers) {
  const std::string cd = "e1b2c3d4-0000-4000-8000-000000000005";
  const std::string clique = cd + ".1";
  constexpr auto kSlowStart = 3s;
  auto slow = MakeNode("node-slow-start", Ip(51));
  auto peer = MakeNode("node-late-peer", Ip(52));
  watch_->ServeIndexes(clique);
  StartDaemon(*slow, cd, "1", {"SIMIMEX_START_DELAY_MS=" + std::to_string(std::chrono::milliseconds(kSlowStart).count())});
  ASSERT_TRUE(Eventually([&] { return ImexPid(*slow) > 0; })) << Log(*slow);
  const auto imex_started = Clock::now();
  const pid_t imex_pid = ImexPid(*slow);
  StartDaemon(*peer, cd);
  ASSERT_TRUE(Eventually([&] { return Slurp(slow->hosts()).find(peer->ip) != std::string::npos; })) << Log(*slow);
  // The premise: the mapping changed while nvidia-imex was still starting.
  ASSERT_LT(Clock::now() - imex_started, kSlowStart) << "the peer's entry came too late to test the reload's wait";
  ASSERT_TRUE(watch_->WaitFor(clique, [&](const std::optional<json>& c) {
    if (!c) return false;
    auto entries = Entries(*c);
    return entries[slow->node].value("status", "") == "Ready" && entries[peer->node].value("status", "") == "Ready";
  }, 60s)) << Log(*slow) << Log(*peer);
  EXPECT_EQ(ImexPid(*slow), imex_pid) << "nvidia-imex was restarted\n" << Log(*slow);
  // The reload still went, once the process answered.
  EXPECT_TRUE(Eventually([&] { return Slurp(slow->log()).find("asking nvidia-imex to reload") != std::string::npos; }))
      << Log(*slow);
  EXPECT_EQ(Slurp(slow->log()).find("exited unexpectedly"), std::string::npos) << Log(*slow);
  for (auto* n : {slow.get(), peer.get()}) {
    ASSERT_EQ(kill(n->process->pid(), SIGTERM), 0);
    EXPECT_EQ(n->process->WaitExit(30s), std::optional<int>(0)) << Log(*n);
    fs::remove_all(n->dir);
  }
}

TEST_F(CdDaemonTest, IpModeListsPeerIpsInTheDomainStatusAndRestartsImexOnChange) {
  json cd = {{"apiVersion", "resource.nvidia.com/v1beta1"},
             {"kind", "ComputeDomain"},
             {"metadata", {{"name", "cd-ip"}, {"namespace", kNamespace}}},
             {"spec", {{"numNodes", 3}, {"channel", {{"resourceClaimTemplate", {{"name", "cd-ip-channel"}}}}}}}};
  auto created = env_->client->Create(k8s::resources::kComputeDomains, kNamespace, cd);
  ASSERT_TRUE(created.ok()) << created.status();
  const std::string uid = (*created)["metadata"]["uid"];
  const std::vector<std::string> gates = {"FEATURE_GATES=IMEXDaemonsWithDNSNames=false,ComputeDomainCliques=false",
                                          "COMPUTE_DOMAIN_NAME=cd-ip",
                                          "COMPUTE_DOMAIN_NAMESPACE=" + std::string(kNamespace)};
  std::vector<std::unique_ptr<DaemonNode>> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(MakeNode("node-ip-" + std::to_string(i), Ip(50 + i)));
  for (auto& n : nodes) StartDaemon(*n, uid, "1", gates);
  auto ready_count = [](size_t want) {
    return [want](const std::optional<json>& c) {
      if (!c) return false;
      auto entries = Entries(*c);
      return entries.size() == want && std::all_of(entries.begin(), entries.end(), [](const auto& e) {
               return e.second.value("status", "") == "Ready";
             });
    };
  };
  ASSERT_TRUE(cd_watch_->WaitFor("cd-ip", ready_count(3), 60s))
      << Log(*nodes[0]) << Log(*nodes[1]) << Log(*nodes[2]);
  for (auto& n : nodes) {
    EXPECT_TRUE(Eventually([&] {
      return Slurp(n->imexd() / "nodes.cfg") == nodes[0]->ip + "\n" + nodes[1]->ip + "\n" + nodes[2]->ip + "\n";
    })) << Slurp(n->imexd() / "nodes.cfg");
    EXPECT_EQ(Slurp(n->hosts()), "127.0.0.1\tlocalhost\n") << "IP mode leaves the hosts file alone";
  }
  // One node leaves: with 2 of numNodes=3 listed nothing is reconfigured
  // (upstream); a replacement node completes the set with a new IP, and
  // nvidia-imex restarts with it.
  const pid_t before = ImexPid(*nodes[0]);
  ASSERT_EQ(kill(nodes[2]->process->pid(), SIGTERM), 0);
  EXPECT_EQ(nodes[2]->process->WaitExit(30s), std::optional<int>(0)) << Log(*nodes[2]);
  ASSERT_TRUE(cd_watch_->WaitFor("cd-ip", ready_count(2), 60s)) << Log(*nodes[0]);
  EXPECT_EQ(ImexPid(*nodes[0]), before);
  nodes.push_back(MakeNode("node-ip-3", Ip(53)));
  StartDaemon(*nodes[3], uid, "1", gates);
  ASSERT_TRUE(cd_watch_->WaitFor("cd-ip", ready_count(3), 60s)) << Log(*nodes[3]);
  EXPECT_TRUE(Eventually([&] {
    return Slurp(nodes[0]->imexd() / "nodes.cfg") == nodes[0]->ip + "\n" + nodes[1]->ip + "\n" + nodes[3]->ip + "\n";
  })) << Slurp(nodes[0]->imexd() / "nodes.cfg");
  EXPECT_TRUE(Eventually([&] { return ImexPid(*nodes[0]) != before && ImexPid(*nodes[0]) != 0; }))
      << "nvidia-imex was not restarted for the new peer list";
  EXPECT_TRUE(cd_watch_->WaitFor("cd-ip", ready_count(3))) << "Ready again after the restart";
  for (auto& n : nodes) n->process->Stop();
  ASSERT_TRUE(cd_watch_->WaitFor("cd-ip", ready_count(0)));
  for (auto& n : nodes) fs::remove_all(n->dir);
}

// A GB200 node (mock NVML, gb200-tray) whose GPU 1 reports its NVLink fabric
// unhealthy while nvidia-imex stays READY: the daemon's entry in the
// domain's status (gate ComputeDomainCliques off: the daemon writes it
// itself) turns NotReady with reason FabricUnhealthy and a message naming
// the GPU, summary and mask; healthy again: Ready, reason and message gone.
// LIMITED_CAPACITY keeps it Ready and only warns.
TEST_F(CdDaemonTest, UnhealthyFabricTurnsTheEntryNotReadyWithItsReasonUntilHealthyAgain) {
  PluginNodeDir driver;
  const std::string made = MakePluginNodeDir("cd-daemon-fabric", NVDRA_MOCKNVML_MAKE_DRIVER_ROOT,
                                             std::string(NVDRA_MOCKNVML_PROFILES_DIR) + "/gb200-tray.json",
                                             NVDRA_MOCKNVML_PATH, &driver);
  ASSERT_EQ(made, "");
  const std::string gpu = "GPU-b200b200-0000-0000-0000-000000000001";
  json cd = {{"apiVersion", "resource.nvidia.com/v1beta1"},
             {"kind", "ComputeDomain"},
             {"metadata", {{"name", "cd-fabric"}, {"namespace", kNamespace}}},
             {"spec", {{"numNodes", 1}, {"channel", {{"resourceClaimTemplate", {{"name", "cd-fabric-channel"}}}}}}}};
  auto created = env_->client->Create(k8s::resources::kComputeDomains, kNamespace, cd);
  ASSERT_TRUE(created.ok()) << created.status();
  auto n = MakeNode("node-fabric", Ip(60));
  const int metrics_port = FreeLocalPort();
  ASSERT_GT(metrics_port, 0);
  // IP mode with numNodes 1: nvidia-imex starts without an index writer.
  StartDaemon(*n, (*created)["metadata"]["uid"], "1",
              {"FEATURE_GATES=IMEXDaemonsWithDNSNames=false,ComputeDomainCliques=false",
               "COMPUTE_DOMAIN_NAME=cd-fabric", "COMPUTE_DOMAIN_NAMESPACE=" + std::string(kNamespace),
               "DRIVER_ROOT_CTR_PATH=" + driver.driver_root.string(), "IMEX_READY_POLL_INTERVAL_MS=100",
               "HTTP_ENDPOINT=127.0.0.1:" + std::to_string(metrics_port), "METRICS_PATH=/daemon-metrics"});
  // The daemon's metrics follow its published status (bounded asking: a
  // scrape has no event to wait on).
  const std::string d = "nvdra_compute_domain_daemon_";
  std::string body;
  auto metrics_say = [&](double ready, double unhealthy_gpus) {
    return Eventually([&] {
      httplib::Client http("127.0.0.1", metrics_port);
      auto response = http.Get("/daemon-metrics");
      body = response && response->status == 200 ? response->body : "";
      return Sample(body, d + "ready") == ready && Sample(body, d + "fabric_unhealthy_gpus") == unhealthy_gpus &&
             Sample(body, d + "imex_state{state=\"READY\"}") == 1;
    });
  };
  const std::string node = n->node;
  auto entry = [&](const std::optional<json>& c) {
    if (!c) return json::object();
    auto entries = Entries(*c);
    auto it = entries.find(node);
    return it == entries.end() ? json::object() : it->second;
  };
  auto is_ready = [&](const std::optional<json>& c) {
    const json e = entry(c);
    return e.value("status", "") == "Ready" && !e.contains("reason") && !e.contains("message");
  };
  ASSERT_TRUE(cd_watch_->WaitFor("cd-fabric", is_ready, 60s)) << Log(*n);
  EXPECT_NE(Slurp(n->log()).find("NVML loaded"), std::string::npos) << Log(*n);
  EXPECT_TRUE(metrics_say(1, 0)) << body;
  // IP mode: the nodes file lists the one peer; gate off, the entry is applied.
  EXPECT_EQ(Sample(body, d + "imex_peers"), 1) << body;
  EXPECT_EQ(Sample(body, d + "file_writes_total{file=\"nodes.cfg\",result=\"success\"}"), 1) << body;
  EXPECT_EQ(Sample(body, d + "imex_starts_total{reason=\"initial\"}"), 1) << body;
  const pid_t imex = ImexPid(*n);
  ASSERT_GT(imex, 0);

  const auto unhealthy_at = Clock::now();
  ASSERT_EQ(SetMockFabric(driver.driver_root, {{gpu, {{"healthSummary", "unhealthy"}, {"healthMask", 16}}}}), "");
  ASSERT_TRUE(cd_watch_->WaitFor("cd-fabric", [&](const std::optional<json>& c) {
    return entry(c).value("status", "") == "NotReady";
  })) << Log(*n);
  std::printf("BENCH cd_daemon.fabric_unhealthy_to_not_ready_ms=%.1f (ready poll 100 ms)\n",
              std::chrono::duration<double, std::milli>(Clock::now() - unhealthy_at).count());
  const json sick = entry(cd_watch_->Get("cd-fabric"));
  EXPECT_EQ(sick.value("reason", ""), "FabricUnhealthy") << sick;
  EXPECT_EQ(sick.value("message", ""),
            "NVLink fabric unhealthy: " + gpu + " (healthSummary Unhealthy, healthMask 0x10: route unhealthy)")
      << sick;
  EXPECT_EQ(ImexPid(*n), imex) << "nvidia-imex is left running";
  EXPECT_TRUE(metrics_say(0, 1)) << "NotReady with nvidia-imex READY: " << body;
  EXPECT_EQ(Check(*n), 0) << "nvidia-imex itself is still READY";
  // Logged once per change, not per poll.
  std::this_thread::sleep_for(500ms);
  const std::string log = Slurp(n->log());
  const auto first = log.find("NVLink fabric unhealthy: this node's entry says NotReady");
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("NVLink fabric unhealthy: this node's entry says NotReady", first + 1), std::string::npos) << log;
  EXPECT_NE(log.find(gpu, first), std::string::npos) << log;

  ASSERT_EQ(SetMockFabric(driver.driver_root, {{gpu, {{"healthSummary", "healthy"}, {"healthMask", 0}}}}), "");
  ASSERT_TRUE(cd_watch_->WaitFor("cd-fabric", is_ready)) << Log(*n) << cd_watch_->Get("cd-fabric")->dump(1);
  EXPECT_NE(Slurp(n->log()).find("NVLink fabric healthy again"), std::string::npos) << Log(*n);
  EXPECT_TRUE(metrics_say(1, 0)) << body;

  // Limited capacity: a warning, the entry stays Ready.
  ASSERT_EQ(SetMockFabric(driver.driver_root, {{gpu, {{"healthSummary", "limited_capacity"}, {"healthMask", 1}}}}),
            "");
  EXPECT_TRUE(Eventually([&] { return Slurp(n->log()).find("limited capacity") != std::string::npos; })) << Log(*n);
  EXPECT_TRUE(is_ready(cd_watch_->Get("cd-fabric"))) << cd_watch_->Get("cd-fabric")->dump(1);

  ASSERT_EQ(kill(n->process->pid(), SIGTERM), 0);
  EXPECT_EQ(n->process->WaitExit(30s), std::optional<int>(0)) << Log(*n);
  ASSERT_TRUE(cd_watch_->WaitFor("cd-fabric", [&](const std::optional<json>& c) {
    return c && !Entries(*c).contains(node);
  }));
  fs::remove_all(n->dir);
  fs::remove_all(driver.dir);
}

TEST_F(CdDaemonTest, EmptyCliqueIdOnlyLabelsThePodAndWaitsForSigterm) {
  auto n = MakeNode("node-noclique", Ip(40));
  const int metrics_port = FreeLocalPort();
  ASSERT_GT(metrics_port, 0);
  StartDaemon(*n, "c1b2c3d4-0000-4000-8000-000000000003", "",
              {"HTTP_ENDPOINT=127.0.0.1:" + std::to_string(metrics_port)});
  ASSERT_TRUE(Eventually([&] {
    auto pod = env_->client->Get(k8s::resources::kPods, kNamespace, n->pod);
    return pod.ok() && (*pod)["metadata"].contains("labels") &&
           (*pod)["metadata"]["labels"].contains("resource.nvidia.com/computeDomain.cliqueID");
  })) << Log(*n);
  auto pod = env_->client->Get(k8s::resources::kPods, kNamespace, n->pod);
  EXPECT_EQ((*pod)["metadata"]["labels"]["resource.nvidia.com/computeDomain.cliqueID"], "");
  EXPECT_FALSE(fs::exists(n->imexd() / "imexd.cfg"));
  EXPECT_FALSE(watch_->Get("c1b2c3d4-0000-4000-8000-000000000003.").has_value());
  // Metrics without IMEX: process_* and no nvidia-imex, but no readiness
  // series (nothing to be ready for: the not-ready alert must not fire).
  httplib::Client http("127.0.0.1", metrics_port);
  auto scraped = http.Get("/metrics");
  ASSERT_TRUE(scraped) << "no metrics on port " << metrics_port << Log(*n);
  EXPECT_NE(scraped->body.find("\nprocess_open_fds "), std::string::npos) << scraped->body;
  EXPECT_EQ(Sample(scraped->body, "nvdra_compute_domain_daemon_imex_state{state=\"NOT_RUNNING\"}"), 1)
      << scraped->body;
  EXPECT_EQ(Sample(scraped->body, "nvdra_compute_domain_daemon_ready"), std::nullopt) << scraped->body;
  ASSERT_EQ(kill(n->process->pid(), SIGTERM), 0);
  EXPECT_EQ(n->process->WaitExit(30s), std::optional<int>(0)) << Log(*n);
  fs::remove_all(n->dir);
}

TEST_F(CdDaemonTest, RunFailsFastWithoutComputeDomainUuid) {
  auto n = MakeNode("node-nocdi", Ip(41));
  StartDaemon(*n, "");
  EXPECT_EQ(n->process->WaitExit(10s), std::optional<int>(1)) << Log(*n);
  EXPECT_NE(Slurp(n->log()).find("COMPUTE_DOMAIN_UUID"), std::string::npos) << Log(*n);
  fs::remove_all(n->dir);
}

TEST_F(CdDaemonTest, RunRefusesAMalformedMetricsEndpointOrPath) {
  int host = 43;
  for (const auto& [setting, named] : std::vector<std::pair<std::string, std::string>>{
           {"HTTP_ENDPOINT=8082", "--http-endpoint"}, {"HTTP_ENDPOINT=[::1:8082", "--http-endpoint"},
           {"METRICS_PATH=metrics", "--metrics-path"}}) {
    auto n = MakeNode("node-badmetrics-" + std::to_string(host), Ip(host));
    ++host;
    StartDaemon(*n, "e1b2c3d4-0000-4000-8000-000000000005", "1", {setting});
    EXPECT_EQ(n->process->WaitExit(10s), std::optional<int>(1)) << setting << Log(*n);
    const std::string log = Slurp(n->log());
    const std::size_t error_at = log.find("stopped on an error");
    ASSERT_NE(error_at, std::string::npos) << Log(*n);
    EXPECT_NE(log.find(named, error_at), std::string::npos) << "the error names " << named << Log(*n);
    EXPECT_EQ(log.find("joining clique"), std::string::npos) << "refused before joining: " << Log(*n);
    fs::remove_all(n->dir);
  }
}

TEST_F(CdDaemonTest, CheckFailsWithoutARunningImexDaemon) {
  auto n = MakeNode("node-check", Ip(42));
  fs::create_directories(n->imexd());
  WriteFile(n->imexd() / "imexd.cfg", "IMEX_CMD_BIND_INTERFACE_IP=" + n->ip + "\nIMEX_CMD_PORT=50005\n");
  EXPECT_EQ(Check(*n), 1);
  EXPECT_EQ(Check(*n, ""), 0);
  fs::remove_all(n->dir);
}

}  // namespace
}  // namespace nvdra::testing
