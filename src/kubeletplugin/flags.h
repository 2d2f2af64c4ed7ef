#pragma once

// Flags both kubelet plugins share (node identity, CDI and driver roots,
// kubelet directories, health port), with upstream's names and env twins.
// Ownership: plain values. Thread-safety: thread-compatible.

#include <string>

#include "common/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace nvdra::kubeletplugin {

struct KubeletPluginFlags {
  std::string node_name;  // --node-name (NODE_NAME), required
  std::string driver_namespace = "default";  // --namespace (NAMESPACE)
  std::string cdi_root = "/etc/cdi";  // --cdi-root (CDI_ROOT)
  // --nvidia-driver-root, alias --host_driver-root (NVIDIA_DRIVER_ROOT, HOST_DRIVER_ROOT)
  std::string nvidia_driver_root = "/";
  std::string container_driver_root = "/driver-root";  // --container-driver-root (DRIVER_ROOT_CTR_PATH)
  std::string nvidia_cdi_hook_path;  // --nvidia-cdi-hook-path (NVIDIA_CDI_HOOK_PATH)
  // --kubelet-registrar-directory-path (KUBELET_REGISTRAR_DIRECTORY_PATH)
  std::string kubelet_registrar_directory_path = "/var/lib/kubelet/plugins_registry";
  // --kubelet-plugins-directory-path (KUBELET_PLUGINS_DIRECTORY_PATH)
  std::string kubelet_plugins_directory_path = "/var/lib/kubelet/plugins";
  int healthcheck_port = -1;  // --healthcheck-port (HEALTHCHECK_PORT): <0 off, 0 any free port

  // kInvalidArgument naming the flag: a missing node name, an empty or
  // relative directory, a port above 65535.
  [[nodiscard]] common::Status Validate() const;
};

void AddKubeletPluginFlags(CLI::App& app, KubeletPluginFlags& flags);

}  // namespace nvdra::kubeletplugin
