// gpu-kubelet-plugin: the per-node DRA plugin for GPUs and MIG devices
// (driver gpu.nvidia.com): the shared kubelet-plugin main with the GPU
// plugin's flags and parts.

#include <memory>
#include <utility>

#include "gpu/config.h"
#include "gpu/plugin.h"
#include "kubeletplugin/plugin_main.h"

int main(int argc, char** argv) {
  using namespace nvdra;
  gpu::PluginConfig config;
  return kubeletplugin::RunPluginMain(
      {.binary_name = gpu::kBinaryName,
       .description = "Kubernetes DRA kubelet plugin for NVIDIA GPUs (driver gpu.nvidia.com)",
       .add_flags = [&](CLI::App& app) { gpu::AddFlags(app, config); },
       .validate = [&](const common::FeatureGates& gates) { return config.Validate(gates); },
       .start = [&](const common::FeatureGates& gates) -> common::StatusOr<kubeletplugin::RunningPluginPtr> {
         ASSIGN_OR_RETURN(auto plugin, gpu::GpuKubeletPlugin::Start(config, gates, gpu::PluginEnvironmentFromEnv()));
         return kubeletplugin::RunningPluginPtr(std::move(plugin));
       }},
      argc, argv);
}
