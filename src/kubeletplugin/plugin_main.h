#pragma once

// The main() both kubelet plugin binaries share: common flags (logging,
// feature gates) plus the plugin's own, validation, shutdown signals, start,
// the plugin's Run loop on a background thread until SIGTERM or SIGINT, and
// an orderly stop. gpu-kubelet-plugin and compute-domain-kubelet-plugin
// differ only in the PluginProgram they pass.
//
// Defines: RunningPlugin, RunningPluginPtr, PluginProgram, RunPluginMain.
//
// Ownership: RunPluginMain owns the started plugin and destroys it before
// returning. Thread-safety: RunPluginMain is called once, from main().

#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "common/feature_gates.h"
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

// What makes one plugin binary.
struct PluginProgram {
  std::string_view binary_name;  // "gpu-kubelet-plugin"
  std::string description;       // the first line of --help
  // Adds the plugin's own flags to `app`, bound to state the caller owns.
  std::function<void(CLI::App& app)> add_flags;
  // Checks the parsed flags; the message names the bad flag.
  std::function<common::Status(const common::FeatureGates& gates)> validate;
  // Starts the plugin from the parsed flags.
  std::function<common::StatusOr<RunningPluginPtr>(const common::FeatureGates& gates)> start;
};

// Returns the process exit code: 0 after a signal-initiated shutdown, 1 when
// the plugin cannot start, the flag parser's code for bad or help flags.
int RunPluginMain(const PluginProgram& program, int argc, char** argv);

}  // namespace nvdra::kubeletplugin
