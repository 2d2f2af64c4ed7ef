// compute-domain-kubelet-plugin: the per-node DRA plugin for ComputeDomain IMEX
// channels and daemons (driver compute-domain.nvidia.com): flags, then
// computedomain::ComputeDomainKubeletPlugin until SIGTERM or SIGINT.

#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "common/allocator.h"
#include "common/feature_gates.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/signals.h"
#include "computedomain/config.h"
#include "computedomain/plugin.h"

int main(int argc, char** argv) {
  using namespace nvdra;
  CLI::App app("Kubernetes DRA kubelet plugin for IMEX channels (driver compute-domain.nvidia.com)",
               std::string(computedomain::kPluginBinaryName));
  common::CommonFlags common_flags;
  computedomain::PluginConfig config;
  common::AddCommonFlags(app, common_flags, computedomain::kPluginBinaryName);
  computedomain::AddPluginFlags(app, config);
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
  common::LogStartup(computedomain::kPluginBinaryName, app, *gates);
  auto plugin = computedomain::ComputeDomainKubeletPlugin::Start(config, *gates,
                                                                 computedomain::PluginEnvironmentFromEnv());
  if (!plugin.ok()) {
    LOG_ERROR("compute-domain-kubelet-plugin cannot start", {{"err", plugin.status()}});
    common::FlushLogs();
    return 1;
  }
  std::jthread background([&](std::stop_token stop) { (*plugin)->Run(stop); });
  const int signal_number = (*signals)->WaitForShutdown();
  background.request_stop();
  background.join();
  plugin->reset();
  LOG_INFO(0, "shutdown complete", {{"signal", signal_number}});
  common::FlushLogs();
  return 0;
}
