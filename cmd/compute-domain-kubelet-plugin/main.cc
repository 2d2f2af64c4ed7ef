// compute-domain-kubelet-plugin: the per-node DRA plugin for ComputeDomain IMEX
// channels and daemons (driver compute-domain.nvidia.com): the shared
// kubelet-plugin main with the compute-domain plugin's flags and parts.

#include <memory>
#include <utility>

#include "computedomain/config.h"
#include "computedomain/plugin.h"
#include "kubeletplugin/plugin_main.h"

int main(int argc, char** argv) {
  using namespace nvdra;
  computedomain::PluginConfig config;
  return kubeletplugin::RunPluginMain(
      {.binary_name = computedomain::kPluginBinaryName,
       .description = "Kubernetes DRA kubelet plugin for IMEX channels (driver compute-domain.nvidia.com)",
       .add_flags = [&](CLI::App& app) { computedomain::AddPluginFlags(app, config); },
       .validate = [&](const common::FeatureGates& gates) { return config.Validate(gates); },
       .start = [&](const common::FeatureGates& gates) -> common::StatusOr<kubeletplugin::RunningPluginPtr> {
         ASSIGN_OR_RETURN(auto plugin, computedomain::ComputeDomainKubeletPlugin::Start(
                                           config, gates, computedomain::PluginEnvironmentFromEnv()));
         return kubeletplugin::RunningPluginPtr(std::move(plugin));
       }},
      argc, argv);
}
