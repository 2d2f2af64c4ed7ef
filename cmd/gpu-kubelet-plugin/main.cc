// gpu-kubelet-plugin: the per-node DRA plugin for GPUs, MIG devices and VFIO
// functions (driver gpu.nvidia.com): flags, then gpu::GpuKubeletPlugin until
// SIGTERM or SIGINT.

#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "common/allocator.h"
#include "common/feature_gates.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/signals.h"
#include "gpu/config.h"
#include "gpu/plugin.h"

int main(int argc, char** argv) {
  using namespace nvdra;
  CLI::App app("Kubernetes DRA kubelet plugin for NVIDIA GPUs (driver gpu.nvidia.com)",
               std::string(gpu::kBinaryName));
  common::CommonFlags common_flags;
  gpu::PluginConfig config;
  common::AddCommonFlags(app, common_flags, gpu::kBinaryName);
  gpu::AddFlags(app, config);
  if (auto exit_code = common::ParseFlags(app, argc, argv)) return *exit_code;
  common::LimitMallocArenas();

  common::StatusOr<common::FeatureGates> gates = common::ApplyCommonFlags(common_flags);
  if (!gates.ok()) return common::ExitForBadFlags(app, gates.status());
  if (common::Status status = config.Validate(*gates); !status.ok()) {
    return common::ExitForBadFlags(app, status);
  }

  auto signals = common::ShutdownSignals::Install();
  if (!signals.ok()) {
    LOG_ERROR("cannot watch shutdown signals", {{"err", signals.status()}});
    return 1;
  }
  common::LogStartup(gpu::kBinaryName, app, *gates);
  auto plugin = gpu::GpuKubeletPlugin::Start(config, *gates, gpu::PluginEnvironmentFromEnv());
  if (!plugin.ok()) {
    LOG_ERROR("gpu-kubelet-plugin cannot start", {{"err", plugin.status()}});
    common::FlushLogs();
    return 1;
  }
  std::jthread reconciler([&](std::stop_token stop) { (*plugin)->Run(stop); });
  const int signal_number = (*signals)->WaitForShutdown();
  reconciler.request_stop();
  reconciler.join();
  plugin->reset();
  LOG_INFO(0, "shutdown complete", {{"signal", signal_number}});
  common::FlushLogs();
  return 0;
}
