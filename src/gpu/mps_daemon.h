#pragma once

// MPS control daemons for claims that share GPUs with sharing.strategy MPS
// (gate MPSSupport), one per claim and device group, as upstream's
// MpsManager (upstream-inventory.md section 4.2):
//
//   id          <claimUID>-<first 5 hex digits of sha256("uuid1,uuid2,...")>
//   folders     <plugin dir>/mps/<id>/{pipe,shm,log}; shm is a tmpfs
//   Deployment  mps-control-daemon-<id> in the driver namespace, label
//               app=<its name>, pinned to this node (spec.nodeName), rendered
//               from templates/mps-control-daemon.tmpl.yaml
//   GPUs        compute mode EXCLUSIVE_PROCESS while the daemon runs
//
// Start is idempotent and ordered so that a crash at any step leaves
// something Stop (or the sweep) removes: folders and a record of the GPUs
// first (<id>/gpus), then the tmpfs, the compute mode, the Deployment.
// Readiness (status.readyReplicas >= 1) comes from a watch on the driver
// namespace's Deployments: WaitReady blocks on its events, never a timer.
//
// The containers of the claim get CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps,
// the pipe folder there and the shm folder at /dev/shm (CdiEdits).
//
// Ownership: MpsDaemons borrows the Deployment API and the compute policy,
// which must outlive it. Thread-safety: MpsDaemons is called by the GPU
// device state one call at a time, except WaitReady (concurrently with the
// others); ApiMpsDeployments is thread-safe.

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/opaque_config.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "gpu/compute_policy.h"
#include "k8s/cache/informer.h"
#include "kubeletplugin/cdi_spec.h"

namespace nvdra::k8s {
class Client;
}  // namespace nvdra::k8s

namespace nvdra::gpu {

inline constexpr std::string_view kMpsDaemonNamePrefix = "mps-control-daemon-";
inline constexpr std::string_view kMpsDaemonTemplate = "mps-control-daemon.tmpl.yaml";
// Where the claim's containers find the daemon's pipes.
inline constexpr std::string_view kMpsPipeContainerPath = "/tmp/nvidia-mps";

// The daemons' Deployments as the API server has them.
class MpsDeployments {
 public:
  virtual ~MpsDeployments() = default;
  // Creates it; an existing one of that name is fine (a retry, a restart).
  virtual common::Status Create(const nlohmann::json& deployment) = 0;
  // Deletes it (foreground: its pod goes first); absent is fine.
  virtual common::Status Delete(const std::string& name) = 0;
  // Whether it exists / has a Ready replica, from the watch cache.
  virtual bool Exists(const std::string& name) const = 0;
  virtual bool Ready(const std::string& name) const = 0;
  // Names of the daemon Deployments (kMpsDaemonNamePrefix) pinned to `node`.
  virtual std::vector<std::string> NamesOnNode(const std::string& node) const = 0;
  // Blocks until every name is Ready, `deadline` or Cancel; returns whether all are.
  virtual bool WaitReady(const std::vector<std::string>& names, std::chrono::steady_clock::time_point deadline) = 0;
  virtual void Cancel() = 0;
};

// MpsDeployments over the API server: a Deployment informer on the driver
// namespace (label `app`), writes through the client.
class ApiMpsDeployments final : public MpsDeployments {
 public:
  // Starts the informer and waits for its first list (kDeadlineExceeded
  // naming the RBAC rule when it does not sync within `sync_timeout`).
  static common::StatusOr<std::unique_ptr<ApiMpsDeployments>> Start(k8s::Client& client, std::string ns,
                                                                    std::chrono::seconds sync_timeout);
  ~ApiMpsDeployments() override;

  common::Status Create(const nlohmann::json& deployment) override;
  common::Status Delete(const std::string& name) override;
  bool Exists(const std::string& name) const override;
  bool Ready(const std::string& name) const override;
  std::vector<std::string> NamesOnNode(const std::string& node) const override;
  bool WaitReady(const std::vector<std::string>& names, std::chrono::steady_clock::time_point deadline) override
      EXCLUDES(mu_);
  void Cancel() override EXCLUDES(mu_);

 private:
  ApiMpsDeployments(k8s::Client& client, std::string ns);
  void Notify() EXCLUDES(mu_);
  bool AllReady(const std::vector<std::string>& names) const;

  k8s::Client& client_;
  const std::string namespace_;
  common::Mutex mu_;
  std::condition_variable changed_;
  bool cancelled_ GUARDED_BY(mu_) = false;
  std::unique_ptr<k8s::cache::Informer> informer_;  // last: stops before the members above go
};

// One daemon to run: what the claim's group asked for.
struct MpsDaemonSpec {
  std::string claim_uid;
  std::vector<std::string> device_uuids;  // CUDA_VISIBLE_DEVICES: GPU or MIG UUIDs, allocation order
  std::vector<std::string> gpu_uuids;     // the physical GPUs (compute mode), no repeats
  std::vector<std::string> gpus_without_volta;  // multiUser needs compute capability 7.0: these lack it
  api::MpsSharing settings;
};

struct MpsOptions {
  std::string node_name;
  std::string driver_namespace;
  std::string image_name;             // --image-name
  std::string image_pull_policy;      // --image-pull-policy; empty: the cluster's default
  std::vector<std::string> image_pull_secrets;
  std::string service_account_name;   // empty: the namespace's default
  std::string feature_gates;          // the plugin's, for the daemon's FEATURE_GATES
  // <plugin dir>/mps: the same path in the plugin's container and on the
  // host (the chart mounts the plugins folder at its host path).
  std::filesystem::path control_files_root;
  std::string host_driver_root;                  // --nvidia-driver-root: the daemon's hostPath
  std::filesystem::path container_driver_root;   // where this process sees it (dev/shm check)
  std::string template_text;                     // mps-control-daemon.tmpl.yaml
  // The tmpfs for <id>/shm; defaults mount(2) and umount2(2). Tests replace them.
  std::function<common::Status(const std::filesystem::path&)> mount_shm;
  std::function<common::Status(const std::filesystem::path&)> unmount_shm;
};

class MpsDaemons {
 public:
  MpsDaemons(MpsOptions options, MpsDeployments& deployments, ComputePolicy& compute_policy);

  static std::string DaemonId(const std::string& claim_uid, const std::vector<std::string>& device_uuids);
  static std::string DeploymentName(const std::string& id) { return std::string(kMpsDaemonNamePrefix) + id; }

  // Folders, tmpfs, compute mode and Deployment for `spec`; returns its id.
  // Does nothing but check when the Deployment exists already.
  // kInvalidArgument for settings that do not fit the devices (a per-device
  // limit naming no device of the group, multiUser on a GPU before Volta).
  common::StatusOr<std::string> Start(const MpsDaemonSpec& spec);
  bool Ready(const std::string& id) const;
  bool WaitReady(const std::vector<std::string>& ids, std::chrono::steady_clock::time_point deadline);

  // Deletes the Deployment, sets the GPUs recorded in <id>/gpus back to
  // DEFAULT, unmounts the tmpfs and removes the folder. Absent pieces are
  // fine; nothing at all is a no-op.
  common::Status Stop(const std::string& id);

  // Removes daemons (folders and this node's Deployments) whose claim is not
  // in `claim_uids`: leftovers of a crash, a discarded checkpoint or a claim
  // unprepared by hand. Returns how many it removed.
  common::StatusOr<int> Sweep(const std::set<std::string>& claim_uids);

  // The claim containers' edits for daemon `id`.
  kubeletplugin::CdiContainerEdits CdiEdits(const std::string& id) const;

  // The Deployment for `spec` (tests read it).
  common::StatusOr<nlohmann::json> RenderDeployment(const MpsDaemonSpec& spec, const std::string& id) const;

 private:
  std::filesystem::path RootOf(const std::string& id) const { return options_.control_files_root / id; }

  const MpsOptions options_;
  MpsDeployments& deployments_;
  ComputePolicy& compute_policy_;
};

// Half of MemTotal from /proc/meminfo in its unit ("32768000k"), as upstream
// sizes the shm tmpfs; "65536k" when it cannot be read.
std::string DefaultShmSize(const std::filesystem::path& meminfo = "/proc/meminfo");

}  // namespace nvdra::gpu
