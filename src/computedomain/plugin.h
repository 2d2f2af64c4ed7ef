#pragma once

// compute-domain-kubelet-plugin assembled: NVML (GPU minors, driver version,
// the node's clique id), the CDI base spec, the ComputeDomain and clique
// informers (DomainWatch), the claim preparation engine with the CD device
// state (PrepareAborted on), the ResourceSlice publisher (one pool named
// after the node: channel-0, or channel-0..channel-<N-1> with
// --imex-isolation=channel, split into slices by the publisher's limits;
// unless hostManaged, daemon-0; attributes "type" and "id"), the optional
// nvidia.com/gpu.clique node label, and the
// kubelet gRPC server. Run() re-reads the clique id every
// clique_refresh_interval, reconciles checkpointed claims (stale claims,
// expired PrepareAborted entries) every reconcile_interval and releases a
// node label no claim uses (an early label whose pod went before its
// Prepare) every unused_label_check_interval.
//
// Ownership: owns every part. Destruction first cancels claims waiting for
// readiness (so the server's drain is quick), stops the gRPC server, the
// publisher and the informers, then removes the clique label when it set it.
// Thread-safety: Start and the destructor from one thread; Run blocks.

#include <chrono>
#include <filesystem>
#include <memory>
#include <stop_token>
#include <string>

#include "common/feature_gates.h"
#include "common/status.h"
#include "kubeletplugin/plugin_main.h"
#include "computedomain/config.h"
#include "drivercdi/driver_edits.h"

namespace nvdra::computedomain {

inline constexpr std::string_view kGpuCliqueNodeLabel = "nvidia.com/gpu.clique";

// What differs between a real node and a test.
struct PluginEnvironment {
  std::filesystem::path boot_id_file = "/proc/sys/kernel/random/boot_id";  // NVDRA_BOOT_ID_FILE
  // NVDRA_CD_DAEMON_CONFIG_TEMPLATE
  std::filesystem::path daemon_config_template = "/templates/compute-domain-daemon-config.tmpl.cfg";
  drivercdi::ProcPaths proc;  // ALT_PROC_DEVICES_PATH (upstream's mock switch)
  std::chrono::minutes reconcile_interval{10};
  std::chrono::minutes clique_refresh_interval{10};
  // How often a node label whose domain's daemon runs here but no claim
  // uses is looked for; it goes on the second look in a row
  // (CdDeviceState::ReleaseUnusedNodeLabel). NVDRA_UNUSED_LABEL_CHECK_MS;
  // tests shorten it.
  std::chrono::milliseconds unused_label_check_interval = std::chrono::minutes(1);
  // How long one Prepare call waits for a domain's readiness
  // (NVDRA_PREPARE_READY_WAIT_MS; tests shorten it).
  std::chrono::milliseconds ready_wait = std::chrono::seconds(40);
  // hostManaged readiness check (NVDRA_IMEX_CTL_PATH, a test hook): run this
  // nvidia-imex-ctl directly instead of `chroot <devRoot> nvidia-imex-ctl`.
  std::string imex_ctl_path;
};

// Reads the environment variables named above.
PluginEnvironment PluginEnvironmentFromEnv();

class ComputeDomainKubeletPlugin final : public kubeletplugin::RunningPlugin {
 public:
  using Config = PluginConfig;  // for kubeletplugin::RunPluginMain
  // `environment` defaults to the process's (PluginEnvironmentFromEnv).
  static common::StatusOr<std::unique_ptr<ComputeDomainKubeletPlugin>> Start(
      const PluginConfig& config, const common::FeatureGates& gates,
      const PluginEnvironment& environment = PluginEnvironmentFromEnv());
  ~ComputeDomainKubeletPlugin() override;
  ComputeDomainKubeletPlugin(const ComputeDomainKubeletPlugin&) = delete;
  ComputeDomainKubeletPlugin& operator=(const ComputeDomainKubeletPlugin&) = delete;

  // Periodic clique-id refresh and reconciliation until `stop`.
  void Run(std::stop_token stop) override;

 private:
  struct Parts;
  explicit ComputeDomainKubeletPlugin(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> parts_;
};

}  // namespace nvdra::computedomain
