// plugin-prepare-bench: NodePrepareResources / NodeUnprepareResources latency
// of the real gpu-kubelet-plugin process, called directly over its DRAPlugin
// v1 socket as the kubelet would (one channel, one claim at a time), and the
// plugin's memory while it does that.
//
// It starts a control plane (test/cluster), a Node object, a node folder with
// the mock NVML driver root (h100-sxm), the plugin, and one ResourceClaim
// allocated to gpu-0 (or --device); then runs `--cycles` prepare + unprepare pairs, timing
// each call with a monotonic clock on this side of the socket. Every call is
// checked (no gRPC error, no per-claim error, one device on prepare). The
// plugin's memory is read from /proc/<pid>/status (VmRSS, RssAnon, RssFile,
// RssShmem) and /proc/<pid>/smaps_rollup (Pss, Pss_Anon, Pss_File) when idle
// after start-up, after a warm-up cycle, and every tenth of the run.
//
// Prints a table and writes --json (read by bench/collect.py):
//   {"cycles","verbosity","first_prepare_ms","prepare":{p50_ms,p99_ms,max_ms,mean_ms},
//    "unprepare":{...},"api_get_claim":{...},"memory":[{"label","cycles","vmrss_kib",...}]}
// With --fabric (FabricManagerPartitioning on hgx-h100), the claim is a
// 4-GPU partition's GPUs and every prepare activates it in the mock Fabric
// Manager, every unprepare deactivates it.
// With --vfio (PassthroughSupport over the mock sysfs, served by the
// simulated PCI driver core), also "republish_withdrawn" and
// "republish_restored": from the start of a Prepare (Unprepare) to the
// moment a watch of the node's ResourceSlices sees the GPU's full device
// leave (come back), per cycle.
// Exit status 0 on success, 1 when anything failed (with the plugin log).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "cluster_client.h"
#include "gpu_plugin_harness.h"
#include "pkg/apis/dra/v1/api.grpc.pb.h"

namespace {

namespace fs = std::filesystem;
namespace drav1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
using nlohmann::json;
using nvdra::testing::ReadFile;

constexpr const char* kNamespace = "plugin-bench";
constexpr const char* kNodeName = "bench-node";
constexpr const char* kDriver = "gpu.nvidia.com";

// KiB figures of /proc/<pid>/status and smaps_rollup; -1 when absent.
std::map<std::string, long long> ReadMemory(pid_t pid) {
  std::map<std::string, long long> out;
  auto scan = [&](const std::string& path, const std::map<std::string, std::string>& keys) {
    std::istringstream in(ReadFile(path));
    std::string line;
    while (std::getline(in, line)) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      auto key = keys.find(line.substr(0, colon));
      if (key == keys.end()) continue;
      out[key->second] = std::stoll(line.substr(colon + 1));
    }
  };
  const std::string proc = "/proc/" + std::to_string(pid);
  scan(proc + "/status", {{"VmRSS", "vmrss_kib"},
                          {"RssAnon", "rss_anon_kib"},
                          {"RssFile", "rss_file_kib"},
                          {"RssShmem", "rss_shmem_kib"},
                          {"VmHWM", "vmhwm_kib"},
                          {"Threads", "threads"}});
  scan(proc + "/smaps_rollup", {{"Pss", "pss_kib"}, {"Pss_Anon", "pss_anon_kib"}, {"Pss_File", "pss_file_kib"}});
  return out;
}

struct Stats {
  double p50_ms = 0, p99_ms = 0, max_ms = 0, mean_ms = 0;
};

// Nearest-rank percentiles of the samples (milliseconds).
Stats Summarize(std::vector<double> ms) {
  Stats s;
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  auto rank = [&](double p) {
    const auto n = ms.size();
    auto i = static_cast<size_t>(p * static_cast<double>(n) + 0.999999);  // ceil(p*n)
    return ms[std::clamp<size_t>(i, 1, n) - 1];
  };
  s.p50_ms = rank(0.50);
  s.p99_ms = rank(0.99);
  s.max_ms = ms.back();
  double sum = 0;
  for (double v : ms) sum += v;
  s.mean_ms = sum / static_cast<double>(ms.size());
  return s;
}

json ToJson(const Stats& s) {
  auto r = [](double v) { return static_cast<double>(static_cast<long long>(v * 1000.0 + 0.5)) / 1000.0; };
  return {{"p50_ms", r(s.p50_ms)}, {"p99_ms", r(s.p99_ms)}, {"max_ms", r(s.max_ms)}, {"mean_ms", r(s.mean_ms)}};
}

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

class Bench {
 public:
  explicit Bench(std::shared_ptr<grpc::Channel> channel) : stub_(drav1::DRAPlugin::NewStub(std::move(channel))) {}

  // One NodePrepareResources of `claim`. `ms` is the call's latency; false
  // with `error` set when the call or the claim failed.
  bool Prepare(const json& claim, double* ms, std::string* error) {
    const int want = static_cast<int>(claim["status"]["allocation"]["devices"]["results"].size());
    drav1::NodePrepareResourcesRequest request;
    *request.add_claims() = nvdra::testing::ClaimRef(claim);
    drav1::NodePrepareResourcesResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(45));
    const auto start = std::chrono::steady_clock::now();
    grpc::Status status = stub_->NodePrepareResources(&context, request, &response);
    *ms = Ms(std::chrono::steady_clock::now() - start);
    if (!status.ok()) return Fail(error, "NodePrepareResources: " + status.error_message());
    const std::string uid = claim["metadata"]["uid"].get<std::string>();
    auto it = response.claims().find(uid);
    if (it == response.claims().end()) return Fail(error, "NodePrepareResources: no answer for the claim");
    if (!it->second.error().empty()) return Fail(error, "NodePrepareResources: " + it->second.error());
    if (it->second.devices_size() != want) {
      return Fail(error, "NodePrepareResources: " + std::to_string(it->second.devices_size()) + " devices, not " +
                             std::to_string(want));
    }
    return true;
  }

  bool Unprepare(const json& claim, double* ms, std::string* error) {
    drav1::NodeUnprepareResourcesRequest request;
    *request.add_claims() = nvdra::testing::ClaimRef(claim);
    drav1::NodeUnprepareResourcesResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(45));
    const auto start = std::chrono::steady_clock::now();
    grpc::Status status = stub_->NodeUnprepareResources(&context, request, &response);
    *ms = Ms(std::chrono::steady_clock::now() - start);
    if (!status.ok()) return Fail(error, "NodeUnprepareResources: " + status.error_message());
    const std::string uid = claim["metadata"]["uid"].get<std::string>();
    auto it = response.claims().find(uid);
    if (it == response.claims().end()) return Fail(error, "NodeUnprepareResources: no answer for the claim");
    if (!it->second.error().empty()) return Fail(error, "NodeUnprepareResources: " + it->second.error());
    return true;
  }

 private:
  static bool Fail(std::string* error, std::string what) {
    *error = std::move(what);
    return false;
  }
  std::unique_ptr<drav1::DRAPlugin::Stub> stub_;
};

std::string MiB(long long kib) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(kib) / 1024.0);
  return buf;
}

// Watches the node's ResourceSlices of the driver and remembers when the
// device `name` was last seen to leave and to come back (steady clock), so
// that a cycle can await the republished slice after its call.
class SliceWatcher {
 public:
  SliceWatcher(nvdra::k8s::Client& client, std::string device) : client_(client), device_(std::move(device)) {
    thread_ = std::jthread([this](std::stop_token stop) { Run(stop); });
  }
  // Waits until the device was seen absent (present) at or after `since`;
  // the time seen, or nullopt after `timeout`.
  std::optional<std::chrono::steady_clock::time_point> AwaitSeen(bool present,
                                                                 std::chrono::steady_clock::time_point since,
                                                                 std::chrono::seconds timeout) {
    std::unique_lock lock(mu_);
    const bool ok = changed_.wait_for(lock, timeout, [&] { return present_ == present && seen_at_ >= since; });
    return ok ? std::optional(seen_at_) : std::nullopt;
  }

 private:
  void Run(std::stop_token stop) {
    const std::string selector = std::string("spec.nodeName=") + kNodeName + ",spec.driver=" + kDriver;
    while (!stop.stop_requested()) {
      nvdra::k8s::ListOptions list_options;
      list_options.field_selector = selector;
      auto list = client_.List(nvdra::k8s::resources::kResourceSlices, "", list_options);
      if (!list.ok()) continue;
      for (const json& slice : (*list)["items"]) Observe(slice);
      nvdra::k8s::WatchOptions options;
      options.field_selector = selector;
      options.resource_version = (*list)["metadata"]["resourceVersion"].get<std::string>();
      options.timeout_seconds = 5;
      auto stream = client_.Watch(nvdra::k8s::resources::kResourceSlices, "", options);
      if (!stream.ok()) continue;
      while (!stop.stop_requested()) {
        auto event = (*stream)->Next();
        if (!event.ok() || !event->has_value()) break;
        Observe((*event)->object);
      }
    }
  }
  void Observe(const json& slice) {
    bool present = false;
    for (const json& device : slice["spec"].value("devices", json::array())) {
      present = present || device.value("name", "") == device_;
    }
    {
      std::lock_guard lock(mu_);
      if (present == present_ && seen_at_ != std::chrono::steady_clock::time_point{}) return;
      present_ = present;
      seen_at_ = std::chrono::steady_clock::now();
    }
    changed_.notify_all();
  }

  nvdra::k8s::Client& client_;
  const std::string device_;
  std::mutex mu_;
  std::condition_variable changed_;
  bool present_ = false;
  std::chrono::steady_clock::time_point seen_at_{};
  std::jthread thread_;  // last: stops before the members it uses go
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("gpu-kubelet-plugin prepare/unprepare latency and memory over its DRA socket", "plugin-prepare-bench");
  int cycles = 1000;
  bool quick = false;
  int verbosity = 4;
  std::string plugin = GPU_KUBELET_PLUGIN;
  std::string json_out;
  std::vector<std::string> plugin_args;
  bool keep = false;
  std::string smaps_dir;
  std::string claim_config;
  std::string device = "gpu-0";
  bool vfio = false;
  std::string vfio_sibling = "gpu-0";
  app.add_flag("--vfio", vfio,
               "PassthroughSupport: the claim gets --device (default gpu-vfio-0) over the mock sysfs, served by the "
               "simulated PCI driver core, and each cycle also times the republished slice (--vfio-sibling leaves, "
               "then comes back)");
  bool fabric = false;
  app.add_flag("--fabric", fabric,
               "FabricManagerPartitioning on a simulated HGX H100 (hgx-h100) with the mock Fabric Manager: the claim "
               "gets --device (default the 4-GPU partition gpu-0,gpu-1,gpu-2,gpu-3), whose partition each prepare "
               "activates and each unprepare deactivates");
  app.add_option("--vfio-sibling", vfio_sibling, "the full GPU the VFIO device withdraws (default gpu-0)");
  app.add_option("--device", device,
                 "the device the claim is allocated (default gpu-0; a MIG device such as gpu-0-mig-1g10gb-19-0 "
                 "with --plugin-arg=--feature-gates=DynamicMIG=true)");
  app.add_option("--cycles", cycles, "prepare + unprepare pairs to time")->check(CLI::PositiveNumber);
  app.add_flag("--quick", quick, "100 cycles (a smoke run)");
  app.add_option("--verbosity", verbosity, "the plugin's -v (4 is the Helm chart's default)");
  app.add_option("--plugin", plugin, "gpu-kubelet-plugin binary, or a wrapper script that execs it");
  app.add_option("--json", json_out, "write the figures there as JSON");
  app.add_option("--plugin-arg", plugin_args,
                 "an extra plugin argument (repeatable), e.g. --plugin-arg=--kube-api-qps=50");
  app.add_option("--claim-config", claim_config,
                 "the claim's opaque gpu.nvidia.com config parameters as JSON (for example a time-sliced "
                 "GpuConfig; the plugin then needs the gate, --plugin-arg=--feature-gates=...)");
  app.add_flag("--keep", keep, "keep the node folder (plugin.log, checkpoint, CDI specs)");
  app.add_option("--smaps-dir", smaps_dir,
                 "copy the plugin's /proc/<pid>/smaps there as idle.smaps and end.smaps (per-mapping breakdown; "
                 "bench/smaps_summary.py sums it per file)");
  CLI11_PARSE(app, argc, argv);
  if (quick) cycles = 100;
  if (vfio && app.count("--device") == 0) device = "gpu-vfio-0";
  if (fabric && app.count("--device") == 0) device = "gpu-0,gpu-1,gpu-2,gpu-3";

  nvdra::testing::ClusterClient cluster;
  std::cerr << "starting a control plane\n";
  if (std::string error = nvdra::testing::StartClusterClient(cluster, kNamespace); !error.empty()) {
    std::cerr << error << "\n";
    return 1;
  }
  json node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", kNodeName}}}};
  if (auto created = cluster.client->Create(nvdra::k8s::resources::kNodes, "", node); !created.ok()) {
    std::cerr << "node: " << created.status().ToString() << "\n";
    return 1;
  }
  nvdra::testing::PluginNodeDir dir;
  if (std::string error = nvdra::testing::MakePluginNodeDir(
          "plugin-bench", NVDRA_MOCKNVML_MAKE_DRIVER_ROOT,
          std::string(NVDRA_MOCKNVML_PROFILES_DIR) + (fabric ? "/hgx-h100.json" : "/h100-sxm.json"), NVDRA_MOCKNVML_PATH,
          &dir);
      !error.empty()) {
    std::cerr << error << "\n";
    return 1;
  }
  std::vector<std::string> plugin_argv =
      nvdra::testing::GpuPluginArgv(plugin, dir, kNodeName, cluster.cluster->kubeconfig().string(), verbosity);
  std::unique_ptr<nvdra::testing::PluginProcess> kernel;
  if (vfio) {
    kernel = nvdra::testing::StartSimSysfs(dir);
    if (kernel == nullptr) return 1;
    plugin_argv.push_back("--feature-gates=PassthroughSupport=true");
    plugin_argv.push_back("--host-root=" + dir.driver_root.string());
  }
  if (fabric) {
    plugin_argv.push_back("--feature-gates=FabricManagerPartitioning=true");
    plugin_argv.push_back("--host-root=" + dir.driver_root.string());
  }
  plugin_argv.insert(plugin_argv.end(), plugin_args.begin(), plugin_args.end());
  // The driver root's /proc stand-in (nvidia-caps major, MIG capability
  // files), as the chart passes it on simulated nodes.
  std::vector<std::string> plugin_env = nvdra::testing::GpuPluginEnv(dir);
  plugin_env.push_back("ALT_PROC_DEVICES_PATH=" + (dir.driver_root / "proc/devices").string());
  if (fabric) plugin_env.push_back("NVIDIA_FABRICMANAGER_ADDRESS=127.0.0.1");
  nvdra::testing::PluginProcess process(plugin_argv, plugin_env, dir.log);
  auto fail = [&](const std::string& what) {
    std::cerr << what << "\n--- plugin log (tail) ---\n";
    const std::string log = ReadFile(dir.log);
    std::cerr << log.substr(log.size() > 8000 ? log.size() - 8000 : 0) << "\n";
    process.Stop();
    std::cerr << "kept " << dir.dir << "\n";
    return 1;
  };

  const auto launched = std::chrono::steady_clock::now();
  if (!process.Start()) return fail("could not start " + plugin);
  auto channel = grpc::CreateChannel("unix://" + dir.DraSocket(kDriver).string(), grpc::InsecureChannelCredentials());
  // The socket is served once start-up (discovery, slices, reconciliation)
  // is done; gRPC retries the connection until then.
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(60))) {
    return fail("plugin did not serve " + dir.DraSocket(kDriver).string());
  }
  const double startup_ms = Ms(std::chrono::steady_clock::now() - launched);

  json memory = json::array();
  auto sample = [&](const std::string& label, int done) {
    json m = {{"label", label}, {"cycles", done}};
    for (const auto& [key, value] : ReadMemory(process.pid())) m[key] = value;
    memory.push_back(m);
    if (!smaps_dir.empty() && (label == "idle" || label == "end")) {
      std::ofstream f(fs::path(smaps_dir) / (label + ".smaps"), std::ios::trunc);
      f << ReadFile("/proc/" + std::to_string(process.pid()) + "/smaps");
      if (!f) std::cerr << "cannot write " << smaps_dir << "/" << label << ".smaps\n";
    }
  };
  sample("idle", 0);

  std::optional<json> config;
  if (!claim_config.empty()) {
    config = json::parse(claim_config, nullptr, /*allow_exceptions=*/false);
    if (config->is_discarded()) return fail("--claim-config: not valid JSON");
  }
  auto claim = nvdra::testing::CreateAllocatedClaim(*cluster.client, kNamespace, kNodeName, kDriver, "one-gpu",
                                                    device, config);
  if (!claim.ok()) return fail("claim: " + claim.status().ToString());

  Bench bench(channel);
  std::string error;
  double first_prepare = 0, first_unprepare = 0;
  if (!bench.Prepare(*claim, &first_prepare, &error) || !bench.Unprepare(*claim, &first_unprepare, &error)) {
    return fail(error);
  }
  sample("warm", 1);

  std::optional<SliceWatcher> slices;
  if (vfio) {
    slices.emplace(*cluster.client, vfio_sibling);
    if (!slices->AwaitSeen(true, {}, std::chrono::seconds(30))) return fail(vfio_sibling + " is not published");
  }
  std::vector<double> prepare_ms, unprepare_ms, withdrawn_ms, restored_ms;
  prepare_ms.reserve(static_cast<size_t>(cycles));
  unprepare_ms.reserve(static_cast<size_t>(cycles));
  const int step = std::max(1, cycles / 10);
  for (int i = 1; i <= cycles; ++i) {
    double ms = 0;
    auto started = std::chrono::steady_clock::now();
    if (!bench.Prepare(*claim, &ms, &error)) return fail("cycle " + std::to_string(i) + ": " + error);
    prepare_ms.push_back(ms);
    if (slices) {
      auto seen = slices->AwaitSeen(false, started, std::chrono::seconds(30));
      if (!seen) return fail("cycle " + std::to_string(i) + ": " + vfio_sibling + " stayed in the slice");
      withdrawn_ms.push_back(Ms(*seen - started));
    }
    started = std::chrono::steady_clock::now();
    if (!bench.Unprepare(*claim, &ms, &error)) return fail("cycle " + std::to_string(i) + ": " + error);
    unprepare_ms.push_back(ms);
    if (slices) {
      auto seen = slices->AwaitSeen(true, started, std::chrono::seconds(30));
      if (!seen) return fail("cycle " + std::to_string(i) + ": " + vfio_sibling + " did not come back");
      restored_ms.push_back(Ms(*seen - started));
    }
    if (i % step == 0 || i == cycles) sample(i == cycles ? "end" : "during", i);
  }
  slices.reset();

  // For reading the figures: what the one GET of the claim that every
  // prepare makes costs from here (our client, same API server, no limit).
  std::vector<double> get_ms;
  for (int i = 0; i < std::min(cycles, 200); ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto got = cluster.client->Get(nvdra::k8s::resources::kResourceClaims, kNamespace, "one-gpu");
    get_ms.push_back(Ms(std::chrono::steady_clock::now() - start));
    if (!got.ok()) return fail("GET claim: " + got.status().ToString());
  }
  const Stats api_get = Summarize(get_ms);

  const Stats prepare = Summarize(prepare_ms);
  const Stats unprepare = Summarize(unprepare_ms);
  json out = {{"cycles", cycles},
              {"verbosity", verbosity},
              {"plugin_args", plugin_args},
              {"claim_config", config ? *config : json()},
              {"startup_ms", static_cast<long long>(startup_ms)},
              {"first_prepare_ms", first_prepare},
              {"first_unprepare_ms", first_unprepare},
              {"prepare", ToJson(prepare)},
              {"unprepare", ToJson(unprepare)},
              {"api_get_claim", ToJson(api_get)},
              {"memory", memory}};
  if (vfio) {
    out["republish_withdrawn"] = ToJson(Summarize(withdrawn_ms));
    out["republish_restored"] = ToJson(Summarize(restored_ms));
  }

  std::string extra;
  for (const std::string& a : plugin_args) extra += " " + a;
  std::printf("gpu-kubelet-plugin over its DRA socket: %d cycles, -v %d%s, socket served %.0f ms after launch\n",
              cycles, verbosity, extra.c_str(), startup_ms);
  std::printf("  first prepare %.2f ms, first unprepare %.2f ms\n", first_prepare, first_unprepare);
  std::printf("  %-22s %8s %8s %8s %8s\n", "call (ms)", "p50", "p99", "max", "mean");
  std::printf("  %-22s %8.3f %8.3f %8.3f %8.3f\n", "NodePrepareResources", prepare.p50_ms, prepare.p99_ms,
              prepare.max_ms, prepare.mean_ms);
  std::printf("  %-22s %8.3f %8.3f %8.3f %8.3f\n", "NodeUnprepareResources", unprepare.p50_ms, unprepare.p99_ms,
              unprepare.max_ms, unprepare.mean_ms);
  std::printf("  %-22s %8.3f %8.3f %8.3f %8.3f  (this client, for reference)\n", "GET of the claim",
              api_get.p50_ms, api_get.p99_ms, api_get.max_ms, api_get.mean_ms);
  if (vfio) {
    for (const auto& [label, values] : {std::pair{"prepare->slice w/o GPU", &withdrawn_ms},
                                        std::pair{"unprepare->GPU back", &restored_ms}}) {
      const Stats stats = Summarize(*values);
      std::printf("  %-22s %8.3f %8.3f %8.3f %8.3f  (seen by a watch of the API)\n", label, stats.p50_ms,
                  stats.p99_ms, stats.max_ms, stats.mean_ms);
    }
  }
  std::printf("  %-8s %6s %8s %8s %8s %8s %8s %8s  (MiB)\n", "memory", "cycles", "VmRSS", "RssAnon", "RssFile",
              "Pss", "PssAnon", "PssFile");
  for (const json& m : memory) {
    auto get = [&](const char* key) { return MiB(m.value(key, -1LL)); };
    std::printf("  %-8s %6d %8s %8s %8s %8s %8s %8s\n", m["label"].get<std::string>().c_str(), m["cycles"].get<int>(),
                get("vmrss_kib").c_str(), get("rss_anon_kib").c_str(), get("rss_file_kib").c_str(),
                get("pss_kib").c_str(), get("pss_anon_kib").c_str(), get("pss_file_kib").c_str());
  }
  if (!json_out.empty()) {
    std::ofstream f(json_out, std::ios::trunc);
    f << out.dump(2) << "\n";
    if (!f) return fail("cannot write " + json_out);
  }

  (void)cluster.client->Delete(nvdra::k8s::resources::kResourceClaims, kNamespace, "one-gpu");
  process.Stop();
  if (keep) {
    std::cerr << "kept " << dir.dir << "\n";
  } else {
    std::error_code ec;  // best effort: a plugin wrapper's child may still be writing there
    fs::remove_all(dir.dir, ec);
    if (ec) std::cerr << "could not remove " << dir.dir << ": " << ec.message() << "\n";
  }
  return 0;
}
