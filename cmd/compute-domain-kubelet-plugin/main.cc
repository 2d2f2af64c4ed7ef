// compute-domain-kubelet-plugin: the per-node DRA plugin for ComputeDomain IMEX
// channels and daemons (driver compute-domain.nvidia.com): the shared
// kubelet-plugin main with the compute-domain plugin's flags and parts.

#include "computedomain/plugin.h"
#include "kubeletplugin/plugin_main.h"

int main(int argc, char** argv) {
  return nvdra::kubeletplugin::RunPluginMain<nvdra::computedomain::ComputeDomainKubeletPlugin>(
      nvdra::computedomain::kPluginBinaryName,
      "Kubernetes DRA kubelet plugin for IMEX channels (driver compute-domain.nvidia.com)", argc, argv);
}
