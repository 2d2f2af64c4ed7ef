#pragma once

// A real Kubernetes control plane for C++ tests: etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler started by cluster-launcher
// (test/cluster/launcher) on loopback, in a fresh temporary directory.
//
// Owns: the launcher process and the state directory. The launcher runs with
// --die-with-parent, so a test binary that crashes leaves no servers behind;
// the destructor stops it in order and removes the directory.
// Thread-compatible: share one TestCluster between tests of a suite (see
// TestClusterEnvironment), not between threads without synchronization.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nvdra::testing {

// What a finished command printed and how it ended.
struct CommandResult {
  int exit_code = -1;  // -1 when the command did not run or was killed
  std::string out;
  std::string err;
  bool ok() const { return exit_code == 0; }
};

// Runs argv[0] (looked up in PATH when it has no '/') with `input` on stdin
// and returns its output. Kills it after `timeout`. Never throws.
CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& input = "",
                         std::chrono::milliseconds timeout = std::chrono::seconds(120));

// A loopback TCP port nobody listens on now (bound and released, for a
// process under test to bind next); -1 when none could be had.
int FreeLocalPort();

// Keeps a /metrics body a test scraped from a running binary as
// $NVDRA_METRICS_SCRAPE_DIR/<component>.prom (nothing when unset): ctest
// chart.monitoring_queries checks every metric the chart's alerts and
// dashboard name against what the binaries really served.
void SaveMetricsScrape(const std::string& component, const std::string& body);

class TestCluster {
 public:
  // Starts a cluster and waits until it takes workloads (API server ready,
  // controllers and scheduler healthy, default ServiceAccount created).
  // Retries with new ports when a start fails (another process may take a
  // port between the launcher picking it and a server binding it). Returns
  // nullptr and fills `error` (the launcher's and components' logs of every
  // attempt) when all attempts failed.
  // `bin_dir` holds cluster-launcher and the servers; empty means the
  // directory CMake configured (NVDRA_CLUSTER_BIN).
  static std::unique_ptr<TestCluster> Start(std::string* error, const std::string& bin_dir = "");

  ~TestCluster();
  TestCluster(const TestCluster&) = delete;
  TestCluster& operator=(const TestCluster&) = delete;

  const std::filesystem::path& kubeconfig() const { return kubeconfig_; }
  const std::filesystem::path& dir() const { return dir_; }
  const std::filesystem::path& bin_dir() const { return bin_dir_; }

  // kubectl against this cluster.
  CommandResult Kubectl(const std::vector<std::string>& args, const std::string& input = "",
                        std::chrono::milliseconds timeout = std::chrono::seconds(120)) const;
  // `kubectl apply -f -` of one JSON object.
  CommandResult Apply(const nlohmann::json& object) const;
  // `kubectl get -o json`; nullopt when the object does not exist or the
  // output is not JSON.
  std::optional<nlohmann::json> Get(const std::vector<std::string>& args) const;

  // Restarts kube-apiserver alone (etcd and the other servers keep running)
  // on the same port with the same flags plus `extra_flags` (later flags win,
  // e.g. "--default-watch-cache-size=0"), and blocks until it is ready again
  // (/readyz) or `timeout` passes. Clients see broken watches and refused
  // connections meanwhile, and afterwards a server whose watch caches start
  // at the current etcd revision. Extra flags apply to this start only.
  // Returns false and fills `error` on failure.
  bool RestartApiServer(std::string* error, const std::vector<std::string>& extra_flags = {},
                        std::chrono::milliseconds timeout = std::chrono::seconds(180));

  // Stops the control plane (SIGTERM, then waits). Idempotent.
  void Stop();

 private:
  TestCluster() = default;
  // One start attempt (Start retries it).
  static std::unique_ptr<TestCluster> StartOnce(std::string* error, const std::string& bin_dir);

  std::filesystem::path dir_;
  std::filesystem::path bin_dir_;
  std::filesystem::path kubeconfig_;
  pid_t launcher_pid_ = -1;
  // The launcher's stdout: after "ready", it answers each restart on it.
  int launcher_out_ = -1;
};

}  // namespace nvdra::testing
