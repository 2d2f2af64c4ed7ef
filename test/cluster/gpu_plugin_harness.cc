#include "gpu_plugin_harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <system_error>

#include "ready_file.h"  // test/simsysfs

namespace nvdra::testing {

namespace fs = std::filesystem;
using nlohmann::json;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

PluginProcess::PluginProcess(std::vector<std::string> argv, std::vector<std::string> env, fs::path log)
    : argv_(std::move(argv)), env_(std::move(env)), log_(std::move(log)) {}

PluginProcess::~PluginProcess() { Stop(); }

bool PluginProcess::Start(const std::string& crash_at) {
  std::vector<std::string> env = env_;
  if (!crash_at.empty()) env.push_back("NVDRA_TEST_CRASH_AT=" + crash_at);
  // argv and envp are built before fork: the child only execs.
  std::vector<char*> args;
  for (auto& a : argv_) args.push_back(a.data());
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_ = fork();
  if (pid_ == 0) {
    int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  if (pid_ < 0) return false;
  pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
  return pidfd_ >= 0;
}

std::optional<int> PluginProcess::WaitExit(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return std::nullopt;
  pollfd p{pidfd_, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return std::nullopt;
  int status = 0;
  waitpid(pid_, &status, 0);
  Reset();
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void PluginProcess::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  if (!WaitExit(std::chrono::seconds(20))) {
    kill(pid_, SIGKILL);
    WaitExit(std::chrono::seconds(20));
  }
}

void PluginProcess::Reset() {
  if (pidfd_ >= 0) close(pidfd_);
  pidfd_ = -1;
  pid_ = -1;
}

std::string MakePluginNodeDir(const std::string& prefix, const std::string& make_driver_root,
                              const std::string& profile_json, const std::string& mock_library,
                              PluginNodeDir* out) {
  std::string pattern = "/tmp/" + prefix + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) return "mkdtemp " + pattern + " failed";
  out->dir = pattern;
  out->driver_root = out->dir / "driver-root";
  out->cdi = out->dir / "cdi";
  out->boot_id = out->dir / "boot_id";
  out->log = out->dir / "plugin.log";
  const std::string make = make_driver_root + " " + out->driver_root.string() + " " + profile_json + " " + mock_library;
  if (std::system(make.c_str()) != 0) return "failed: " + make;
  std::error_code ec;
  fs::create_directories(out->cdi, ec);
  if (ec) return "mkdir " + out->cdi.string() + ": " + ec.message();
  WriteFile(out->boot_id, "11111111-2222-3333-4444-555555555555\n");
  return "";
}

std::unique_ptr<PluginProcess> StartSimSysfs(const PluginNodeDir& node) {
  // A ready file left by an instance that was killed would pass for ours.
  std::error_code ec;
  fs::remove(simsysfs::ReadyFile(node.driver_root), ec);
  auto process = std::make_unique<PluginProcess>(std::vector<std::string>{NVDRA_SIMSYSFS, node.driver_root.string()},
                                                 std::vector<std::string>{"PATH=/usr/bin:/bin"},
                                                 node.dir / "simsysfs.log");
  if (!process->Start()) {
    std::fprintf(stderr, "StartSimSysfs: cannot start %s\n", NVDRA_SIMSYSFS);
    return nullptr;
  }
  const common::Status ready =
      simsysfs::AwaitReady(node.driver_root, process->pid(), process->pidfd(), std::chrono::seconds(20));
  if (!ready.ok()) {
    std::fprintf(stderr, "StartSimSysfs: %s; its log (%s):\n%s\n", ready.message().c_str(),
                 (node.dir / "simsysfs.log").c_str(), ReadFile(node.dir / "simsysfs.log").c_str());
    return nullptr;
  }
  return process;
}

std::vector<std::string> GpuPluginArgv(const std::string& binary, const PluginNodeDir& node,
                                       const std::string& node_name, const std::string& kubeconfig,
                                       int verbosity) {
  return {binary,
          "--node-name",
          node_name,
          "--kubeconfig",
          kubeconfig,
          "--cdi-root",
          node.cdi.string(),
          "--nvidia-driver-root",
          node.driver_root.string(),
          "--container-driver-root",
          node.driver_root.string(),
          "--kubelet-registrar-directory-path",
          (node.dir / "registry").string(),
          "--kubelet-plugins-directory-path",
          (node.dir / "plugins").string(),
          "--image-name",
          "test/image:v1",
          "-v",
          std::to_string(verbosity)};
}

std::vector<std::string> GpuPluginEnv(const PluginNodeDir& node) {
  return {"NVDRA_BOOT_ID_FILE=" + node.boot_id.string(), "PATH=/usr/bin:/bin"};
}

k8s::ApiResult<json> CreateAllocatedClaim(k8s::Client& client, const std::string& ns, const std::string& node_name,
                                          const std::string& driver, const std::string& name,
                                          const std::string& device, const std::optional<json>& config) {
  // "gpu-0,gpu-1": one request for that many devices.
  std::vector<std::string> devices;
  for (std::size_t start = 0; start <= device.size();) {
    const std::size_t comma = std::min(device.find(',', start), device.size());
    devices.push_back(device.substr(start, comma - start));
    start = comma + 1;
  }
  json exactly = {{"deviceClassName", "gpu.nvidia.com"}};
  if (devices.size() > 1) {
    exactly["allocationMode"] = "ExactCount";
    exactly["count"] = devices.size();
  }
  json claim = {{"apiVersion", "resource.k8s.io/v1"},
                {"kind", "ResourceClaim"},
                {"metadata", {{"name", name}, {"namespace", ns}}},
                {"spec", {{"devices", {{"requests", json::array({{{"name", "gpu"}, {"exactly", exactly}}})}}}}}};
  if (config) {
    claim["spec"]["devices"]["config"] = json::array(
        {{{"requests", json::array({"gpu"})}, {"opaque", {{"driver", driver}, {"parameters", *config}}}}});
  }
  auto created = client.Create(k8s::resources::kResourceClaims, ns, claim);
  if (!created.ok()) return created;
  json status_claim = *created;
  json results = json::array();
  for (const std::string& one : devices) {
    results.push_back({{"request", "gpu"}, {"driver", driver}, {"pool", node_name}, {"device", one}});
  }
  json allocation = {
      {"devices", {{"results", std::move(results)}}},
      {"nodeSelector",
       {{"nodeSelectorTerms",
         json::array({{{"matchFields", json::array({{{"key", "metadata.name"},
                                                      {"operator", "In"},
                                                      {"values", json::array({node_name})}}})}}})}}}};
  if (config) {
    allocation["devices"]["config"] =
        json::array({{{"source", "FromClaim"},
                      {"requests", json::array({"gpu"})},
                      {"opaque", {{"driver", driver}, {"parameters", *config}}}}});
  }
  status_claim["status"] = {{"allocation", allocation}};
  k8s::WriteOptions options;
  options.subresource = "status";
  return client.Update(k8s::resources::kResourceClaims, ns, status_claim, options);
}

::k8s::io::kubelet::pkg::apis::dra::v1::Claim ClaimRef(const json& claim) {
  ::k8s::io::kubelet::pkg::apis::dra::v1::Claim ref;
  ref.set_namespace_(claim["metadata"]["namespace"].get<std::string>());
  ref.set_name(claim["metadata"]["name"].get<std::string>());
  ref.set_uid(claim["metadata"]["uid"].get<std::string>());
  return ref;
}

}  // namespace nvdra::testing
