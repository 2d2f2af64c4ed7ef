#pragma once

// gpu-kubelet-plugin assembled: NVML discovery, the ResourceSlice publisher,
// the claim preparation engine with the GPU device state, the kubelet gRPC
// server, and the stale-claim reconciliation loop. main() parses flags and
// calls Start, then Run until a shutdown signal.
//
// Ownership: GpuKubeletPlugin owns every part; destruction stops the gRPC
// server first (no new calls), then the publisher (slices stay published:
// a restarting plugin adopts them).
// Thread-safety: Start and the destructor from one thread; Run blocks.

#include <chrono>
#include <filesystem>
#include <memory>
#include <stop_token>
#include <string>

#include "common/feature_gates.h"
#include "common/status.h"
#include "kubeletplugin/plugin_main.h"
#include "gpu/config.h"

namespace nvdra::gpu {

// What differs between a real node and a test: where the boot id is read.
struct PluginEnvironment {
  // NVDRA_BOOT_ID_FILE overrides it (simulated nodes "reboot" by changing it).
  std::filesystem::path boot_id_file = "/proc/sys/kernel/random/boot_id";
  std::filesystem::path sysfs_root = "/sys";
  std::chrono::minutes reconcile_interval{10};
  // Where the image ships templates/ (the MPS control daemon's Deployment).
  std::filesystem::path templates_dir = "/templates";
};

// Reads the environment variables that tests use (NVDRA_BOOT_ID_FILE,
// NVDRA_TEMPLATES_DIR).
PluginEnvironment PluginEnvironmentFromEnv();

class GpuKubeletPlugin final : public kubeletplugin::RunningPlugin {
 public:
  using Config = PluginConfig;  // for kubeletplugin::RunPluginMain
  // `environment` defaults to the process's (PluginEnvironmentFromEnv).
  static common::StatusOr<std::unique_ptr<GpuKubeletPlugin>> Start(
      const PluginConfig& config, const common::FeatureGates& gates,
      const PluginEnvironment& environment = PluginEnvironmentFromEnv());
  ~GpuKubeletPlugin() override;
  GpuKubeletPlugin(const GpuKubeletPlugin&) = delete;
  GpuKubeletPlugin& operator=(const GpuKubeletPlugin&) = delete;

  // Reconciles checkpointed claims with the API server every
  // reconcile_interval until `stop`.
  void Run(std::stop_token stop) override;

  // What the plugin is made of (plugin.cc); opaque outside it.
  struct Parts;

 private:
  explicit GpuKubeletPlugin(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> parts_;
};

}  // namespace nvdra::gpu
