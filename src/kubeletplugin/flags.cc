#include "kubeletplugin/flags.h"

#include <utility>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/flags.h"

namespace nvdra::kubeletplugin {

using common::InvalidArgumentError;
using common::OkStatus;
using common::WithEnv;

common::Status KubeletPluginFlags::Validate() const {
  if (node_name.empty()) return InvalidArgumentError("--node-name (NODE_NAME) is required");
  if (driver_namespace.empty()) return InvalidArgumentError("--namespace must not be empty");
  const std::pair<const char*, const std::string*> directories[] = {
      {"--cdi-root", &cdi_root},
      {"--nvidia-driver-root", &nvidia_driver_root},
      {"--container-driver-root", &container_driver_root},
      {"--kubelet-registrar-directory-path", &kubelet_registrar_directory_path},
      {"--kubelet-plugins-directory-path", &kubelet_plugins_directory_path},
  };
  for (const auto& [flag, value] : directories) {
    if (value->empty() || value->front() != '/') {
      return InvalidArgumentError(
          fmt::format("{}: \"{}\" must be an absolute path", flag, *value));
    }
  }
  if (!nvidia_cdi_hook_path.empty() && nvidia_cdi_hook_path.front() != '/') {
    return InvalidArgumentError(fmt::format("--nvidia-cdi-hook-path: \"{}\" must be an absolute path",
                                            nvidia_cdi_hook_path));
  }
  if (healthcheck_port > 65535) {
    return InvalidArgumentError(fmt::format(
        "--healthcheck-port: {} is not a port (use <0 to disable, 0 for any free port)",
        healthcheck_port));
  }
  return OkStatus();
}

void AddKubeletPluginFlags(CLI::App& app, KubeletPluginFlags& flags) {
  WithEnv(app.add_option("--node-name", flags.node_name, "Name of the node this plugin runs on"),
          {"NODE_NAME"});
  WithEnv(app.add_option("--namespace", flags.driver_namespace, "Namespace of the driver")
              ->capture_default_str(),
          {"NAMESPACE"});
  WithEnv(app.add_option("--cdi-root", flags.cdi_root, "Directory for generated CDI specs")
              ->capture_default_str(),
          {"CDI_ROOT"});
  WithEnv(app.add_option("--nvidia-driver-root,--host_driver-root", flags.nvidia_driver_root,
                         "Root of the NVIDIA driver installation on the host")
              ->capture_default_str(),
          {"NVIDIA_DRIVER_ROOT", "HOST_DRIVER_ROOT"});
  WithEnv(app.add_option("--container-driver-root", flags.container_driver_root,
                         "Where the host driver root is mounted in this container")
              ->capture_default_str(),
          {"DRIVER_ROOT_CTR_PATH"});
  WithEnv(app.add_option("--nvidia-cdi-hook-path", flags.nvidia_cdi_hook_path,
                         "Host path of nvidia-cdi-hook; empty: copy the bundled one into the "
                         "plugin directory"),
          {"NVIDIA_CDI_HOOK_PATH"});
  WithEnv(app.add_option("--kubelet-registrar-directory-path",
                         flags.kubelet_registrar_directory_path,
                         "Kubelet plugin registration directory")
              ->capture_default_str(),
          {"KUBELET_REGISTRAR_DIRECTORY_PATH"});
  WithEnv(app.add_option("--kubelet-plugins-directory-path", flags.kubelet_plugins_directory_path,
                         "Kubelet plugins directory (sockets, checkpoint)")
              ->capture_default_str(),
          {"KUBELET_PLUGINS_DIRECTORY_PATH"});
  WithEnv(app.add_option("--healthcheck-port", flags.healthcheck_port,
                         "Port of the gRPC health service: <0 off, 0 any free port")
              ->capture_default_str(),
          {"HEALTHCHECK_PORT"});
}

}  // namespace nvdra::kubeletplugin
