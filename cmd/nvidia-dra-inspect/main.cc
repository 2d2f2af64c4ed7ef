// nvidia-dra-inspect: prints, as JSON, what the GPU plugin would discover and
// publish on this node (and the node's NVLink clique id), without a cluster.
// Read-only: it changes no GPU setting.

#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "common/feature_gates.h"
#include "common/flags.h"
#include "common/log.h"
#include "gpu/inspect.h"

int main(int argc, char** argv) {
  using namespace nvdra;
  constexpr std::string_view kName = "nvidia-dra-inspect";
  CLI::App app("Print the GPUs, MIG devices and NVLink clique this node would publish, as JSON",
               std::string(kName));
  common::CommonFlags common_flags;
  std::string driver_root = "/";
  std::string nvml_library;
  std::string sysfs_root = "/sys";
  common::AddCommonFlags(app, common_flags, kName);
  common::WithEnv(app.add_option("--nvidia-driver-root", driver_root,
                                 "Root of the NVIDIA driver installation")
                      ->capture_default_str(),
                  {"NVIDIA_DRIVER_ROOT", "HOST_DRIVER_ROOT"});
  app.add_option("--nvml-library", nvml_library,
                 "Load this libnvidia-ml.so.1 instead of searching the driver root");
  app.add_option("--sysfs-root", sysfs_root, "Where sysfs is mounted")->capture_default_str();
  if (auto exit_code = common::ParseFlags(app, argc, argv)) return *exit_code;
  common::StatusOr<common::FeatureGates> gates = common::ApplyCommonFlags(common_flags);
  if (!gates.ok()) return common::ExitForBadFlags(app, gates.status());

  gpu::InspectOptions options;
  options.driver_root = driver_root;
  if (!nvml_library.empty()) options.nvml_library = nvml_library;
  options.discovery.sysfs_root = sysfs_root;
  options.publish.dynamic_mig = gates->Enabled(common::kDynamicMIG);
  options.publish.fabric_manager_partitioning = gates->Enabled(common::kFabricManagerPartitioning);
  options.publish.list_type_attributes = gates->Enabled(common::kDRAListTypeAttributes);
  options.clique.strict = gates->Enabled(common::kCrashOnNVLinkFabricErrors);

  common::StatusOr<nlohmann::json> report = gpu::InspectNode(options);
  if (!report.ok()) {
    LOG_ERROR("inspection failed", {{"err", report.status()}});
    common::FlushLogs();
    return 1;
  }
  std::cout << report->dump(2) << '\n';
  return 0;
}
