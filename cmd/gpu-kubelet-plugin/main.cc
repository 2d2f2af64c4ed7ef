// gpu-kubelet-plugin: the per-node DRA plugin for GPUs and MIG devices
// (driver gpu.nvidia.com): the shared kubelet-plugin main with the GPU
// plugin's flags and parts.

#include "gpu/plugin.h"
#include "kubeletplugin/plugin_main.h"

int main(int argc, char** argv) {
  return nvdra::kubeletplugin::RunPluginMain<nvdra::gpu::GpuKubeletPlugin>(
      nvdra::gpu::kBinaryName, "Kubernetes DRA kubelet plugin for NVIDIA GPUs (driver gpu.nvidia.com)", argc, argv);
}
