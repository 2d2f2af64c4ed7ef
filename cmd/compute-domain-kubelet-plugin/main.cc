// compute-domain-kubelet-plugin: the per-node DRA plugin for ComputeDomain IMEX
// channels and daemons (driver compute-domain.nvidia.com). For now: flags,
// feature gates, logging and an orderly wait for SIGTERM.

#include <string>

#include <CLI/CLI.hpp>

#include "common/feature_gates.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/signals.h"
#include "computedomain/config.h"

int main(int argc, char** argv) {
  using namespace nvdra;
  CLI::App app("Kubernetes DRA kubelet plugin for IMEX channels (driver compute-domain.nvidia.com)",
               std::string(computedomain::kPluginBinaryName));
  common::CommonFlags common_flags;
  computedomain::PluginConfig config;
  common::AddCommonFlags(app, common_flags, computedomain::kPluginBinaryName);
  computedomain::AddPluginFlags(app, config);
  if (auto exit_code = common::ParseFlags(app, argc, argv)) return *exit_code;

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
  common::LogStartup(computedomain::kPluginBinaryName, app, *gates);
  LOG_INFO(0, "component not implemented yet; waiting for SIGTERM or SIGINT",
           {{"node", config.plugin.node_name}});
  const int signal_number = (*signals)->WaitForShutdown();
  LOG_INFO(0, "shutdown complete", {{"signal", signal_number}});
  common::FlushLogs();
  return 0;
}
