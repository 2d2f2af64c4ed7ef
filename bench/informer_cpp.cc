// informer-cpp: the nvdra side of the informer benchmark (bench/informer/run).
// Same command line and JSON lines as informer-go's `informer` command: lists
// and watches every ResourceSlice with our informer, prints
// {"event":"synced",...} once its cache holds them all, then
// {"event":"done",...} after it has seen `--updates` updates, with the CPU
// spent between the two.

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "k8s/cache/informer.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/rest_list_watch.h"

namespace {

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// A "Vm...:" line of /proc/self/status in bytes: VmRSS now, VmHWM the peak.
long long StatusBytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == field) {
      long long kb = 0;
      status >> kb;
      return kb * 1024;
    }
    status.ignore(1 << 16, '\n');
  }
  return -1;
}

long long RssBytes() { return StatusBytes("VmRSS:"); }
long long PeakRssBytes() { return StatusBytes("VmHWM:"); }

void Emit(const nlohmann::json& line) { std::cout << line.dump() << std::endl; }

}  // namespace

int main(int argc, char** argv) {
  using namespace nvdra;
  CLI::App app("nvdra informer benchmark (the C++ side of bench/informer/run)", "informer-cpp");
  std::string kubeconfig;
  int slices = 10000;
  int updates = 1000;
  app.add_option("--kubeconfig", kubeconfig, "kubeconfig of the cluster")->required();
  app.add_option("--slices", slices, "ResourceSlices expected in the cache");
  app.add_option("--updates", updates, "updates to wait for");
  // The handler reads neither object, as informer-go's; by default it says so
  // (EventHandler::needs_old_object), so the cache does not decode the old
  // object for it. This flag measures the cost of a handler that reads it.
  bool old_object = false;
  app.add_flag("--old-object", old_object, "the update handler asks for the old object");
  CLI11_PARSE(app, argc, argv);

  const auto start = std::chrono::steady_clock::now();
  k8s::ConfigSources sources;
  sources.kubeconfig = kubeconfig;
  // As informer-go: the API server, not a client-side limit, is measured.
  sources.qps = 2000;
  sources.burst = 4000;
  auto config = k8s::LoadConfig(sources);
  if (!config.ok()) {
    std::cerr << "informer-cpp: " << config.status() << "\n";
    return 1;
  }
  auto client = k8s::Client::New(*config);
  if (!client.ok()) {
    std::cerr << "informer-cpp: " << client.status() << "\n";
    return 1;
  }

  std::mutex mutex;
  std::condition_variable changed;
  std::atomic<int> updates_seen = 0;
  k8s::cache::InformerOptions options;
  options.description = "resource.k8s.io/v1/resourceslices";
  k8s::cache::Informer informer(
      std::make_unique<k8s::RestListWatch>(**client, k8s::resources::kResourceSlices, ""), options);
  k8s::cache::EventHandler handler;
  // As informer-go: a counter, and main is woken once, by the last update
  // (a wake-up per update would be the benchmark's cost, not the informer's).
  handler.on_update = [&](const k8s::cache::ObjectPtr&, const k8s::cache::ObjectPtr&) {
    if (updates_seen.fetch_add(1) + 1 != updates) return;
    std::lock_guard lock(mutex);
    changed.notify_all();
  };
  handler.needs_old_object = old_object;
  informer.AddEventHandler(std::move(handler));
  informer.Start();
  if (!informer.WaitForSync(std::stop_token())) {
    std::cerr << "informer-cpp: cache did not sync\n";
    return 1;
  }
  const double sync_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::size_t objects = informer.store().size();
  if (objects < static_cast<std::size_t>(slices)) {
    std::cerr << "informer-cpp: synced with " << objects << " slices, want " << slices << "\n";
    return 1;
  }
  const double cpu_at_sync = CpuSeconds();
  Emit({{"event", "synced"}, {"sync_seconds", sync_seconds}, {"rss_bytes", RssBytes()},
        {"peak_rss_bytes", PeakRssBytes()}, {"objects", objects}});
  {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return updates_seen.load() >= updates; });
  }
  const double cpu = CpuSeconds() - cpu_at_sync;
  Emit({{"event", "done"},
        {"updates", updates},
        {"cpu_seconds", cpu},
        {"cpu_seconds_per_1000_updates", cpu * 1000 / updates},
        {"rss_bytes", RssBytes()},
        {"peak_rss_bytes", PeakRssBytes()}});
  informer.Stop();
  return 0;
}
