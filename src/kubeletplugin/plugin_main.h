#pragma once

// The main() both kubelet plugin binaries share, on common::RunService
// (flags, validation, signals, start-up log): start the plugin, run its Run
// loop on a background thread until SIGTERM or SIGINT, and stop in order.
// gpu-kubelet-plugin and compute-domain-kubelet-plugin differ only in the
// plugin type they name:
//
//   return RunPluginMain<gpu::GpuKubeletPlugin>(gpu::kBinaryName, "...", argc, argv);
//
// Defines: RunningPlugin, RunningPluginPtr, ServePlugin, RunPluginMain.
//
// Ownership: the started plugin lives until the stop and is destroyed before
// RunPluginMain returns. Thread-safety: RunPluginMain is called once, from
// main().

#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>
#include <utility>

#include "common/feature_gates.h"
#include "common/service_main.h"
#include "common/signals.h"
#include "common/status.h"

namespace nvdra::kubeletplugin {

// A started plugin. Run is its periodic work (stale-claim reconciliation and
// the like); it returns promptly once `stop` is requested. The destructor
// stops serving the kubelet.
class RunningPlugin {
 public:
  virtual ~RunningPlugin() = default;
  virtual void Run(std::stop_token stop) = 0;
};
using RunningPluginPtr = std::unique_ptr<RunningPlugin>;

// Starts the plugin, runs it until `signals` requests the stop, then stops
// it. The error of `start`, if it fails.
common::Status ServePlugin(const std::function<common::StatusOr<RunningPluginPtr>()>& start,
                           common::ShutdownSignals& signals);

// A plugin type: its flags are `Plugin::Config` (a common::ServiceConfig),
// and `Plugin::Start(config, gates)` starts it.
template <typename Plugin>
concept StartablePlugin = common::ServiceConfig<typename Plugin::Config> &&
                          requires(const typename Plugin::Config& config, const common::FeatureGates& gates) {
                            { Plugin::Start(config, gates) };
                          };

// Returns the process exit code: 0 after a signal-initiated shutdown, 1 when
// the plugin cannot start, the flag parser's code for bad or help flags.
template <StartablePlugin Plugin>
int RunPluginMain(std::string_view binary_name, std::string description, int argc, char** argv) {
  using Config = typename Plugin::Config;
  return common::RunService<Config>(
      binary_name, std::move(description),
      [](const Config& config, const common::FeatureGates& gates, common::ShutdownSignals& signals) {
        return ServePlugin(
            [&]() -> common::StatusOr<RunningPluginPtr> {
              ASSIGN_OR_RETURN(RunningPluginPtr plugin, Plugin::Start(config, gates));
              return plugin;
            },
            signals);
      },
      argc, argv, /*limit_malloc_arenas=*/true);
}

}  // namespace nvdra::kubeletplugin
