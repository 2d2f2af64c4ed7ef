#pragma once

// What the gpu-kubelet-plugin cluster test (gpu_plugin_test.cc) and the
// plugin benchmark (bench/plugin_prepare.cc) share: the plugin as a child
// process, a node folder with a mock NVML driver root laid out by
// test/mocknvml/make-driver-root, the plugin's command line for that folder,
// and a ResourceClaim allocated to one device as the scheduler would write it.
//
// Defines: ReadFile, WriteFile, PluginProcess, PluginNodeDir,
// MakePluginNodeDir, StartSimSysfs, GpuPluginArgv, CreateAllocatedClaim,
// ClaimRef.
// Thread-compatible: one PluginProcess per thread of control.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "k8s/client.h"
#include "pkg/apis/dra/v1/api.pb.h"

namespace nvdra::testing {

// The whole file, "" when it cannot be read.
std::string ReadFile(const std::filesystem::path& path);
// Replaces the file's content; best effort (tests check what they rely on).
void WriteFile(const std::filesystem::path& path, const std::string& text);

// A child process with its stdout and stderr appended to a log file.
// Destruction stops it (SIGTERM, then SIGKILL after 20 s). Start may be
// called again once the process has ended.
class PluginProcess {
 public:
  PluginProcess(std::vector<std::string> argv, std::vector<std::string> env, std::filesystem::path log);
  ~PluginProcess();
  PluginProcess(const PluginProcess&) = delete;
  PluginProcess& operator=(const PluginProcess&) = delete;

  // Starts argv with env (plus NVDRA_TEST_CRASH_AT=crash_at when not empty).
  bool Start(const std::string& crash_at = "");
  // Waits for the process to end by itself; its exit status (128 + signal
  // when killed) or nullopt when it still runs after `timeout`.
  std::optional<int> WaitExit(std::chrono::milliseconds timeout);
  // SIGTERM, then SIGKILL; waits for the end. Idempotent.
  void Stop();

  bool running() const { return pid_ > 0; }
  // The running process' id, -1 when none.
  pid_t pid() const { return pid_; }
  // A pidfd of the running process (readable once it has ended), -1 when none.
  int pidfd() const { return pidfd_; }

 private:
  void Reset();

  std::vector<std::string> argv_;
  std::vector<std::string> env_;
  std::filesystem::path log_;
  pid_t pid_ = -1;
  int pidfd_ = -1;
};

// A node's folders for one plugin, all below `dir`.
struct PluginNodeDir {
  std::filesystem::path dir;          // a fresh /tmp/<prefix>-XXXXXX
  std::filesystem::path driver_root;  // dir/driver-root: the mock NVML driver root
  std::filesystem::path cdi;          // dir/cdi
  std::filesystem::path boot_id;      // dir/boot_id (NVDRA_BOOT_ID_FILE)
  std::filesystem::path log;          // dir/plugin.log
  // <dir>/plugins/<driver>: dra.sock and checkpoint.json.
  std::filesystem::path PluginDir(const std::string& driver) const { return dir / "plugins" / driver; }
  std::filesystem::path DraSocket(const std::string& driver) const { return PluginDir(driver) / "dra.sock"; }
};

// Makes a fresh node folder under /tmp: runs make-driver-root with
// `profile_json` and `mock_library` into driver_root, creates cdi/ and writes
// a boot id. Returns "" on success, else what failed.
std::string MakePluginNodeDir(const std::string& prefix, const std::string& make_driver_root,
                              const std::string& profile_json, const std::string& mock_library,
                              PluginNodeDir* out);

// Starts test/simsysfs (the simulated PCI driver core) on node.driver_root,
// whose mock sysfs make-driver-root laid out, and waits until it watches
// every bind, unbind and driver_override file (its ready file names it; an
// inotify wait, up to 20 s). Its log is <dir>/simsysfs.log. Destroying the
// handle stops it. nullptr, after saying why on stderr, when it ended or was
// not ready in time.
std::unique_ptr<PluginProcess> StartSimSysfs(const PluginNodeDir& node);

// The gpu-kubelet-plugin command line for a node folder (driver root as both
// host and container root, registrar and plugins folders inside it).
std::vector<std::string> GpuPluginArgv(const std::string& binary, const PluginNodeDir& node,
                                       const std::string& node_name, const std::string& kubeconfig,
                                       int verbosity = 4);
// Its environment: the boot id file and a PATH.
std::vector<std::string> GpuPluginEnv(const PluginNodeDir& node);

// Creates a ResourceClaim `name` with one request "gpu" of class
// gpu.nvidia.com and writes an allocation of `device` (or of each of a
// comma-separated list, for a request of that many) in pool `node_name`
// into its status, as the scheduler would. `config` is an optional opaque
// config's parameters for driver `driver`. Returns the claim as updated.
k8s::ApiResult<nlohmann::json> CreateAllocatedClaim(k8s::Client& client, const std::string& ns,
                                                    const std::string& node_name, const std::string& driver,
                                                    const std::string& name, const std::string& device,
                                                    const std::optional<nlohmann::json>& config = std::nullopt);

// The kubelet's reference to a claim in DRAPlugin v1 requests.
::k8s::io::kubelet::pkg::apis::dra::v1::Claim ClaimRef(const nlohmann::json& claim);

}  // namespace nvdra::testing
