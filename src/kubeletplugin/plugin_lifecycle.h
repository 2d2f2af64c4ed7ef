#pragma once

// What the two kubelet plugins do the same way around their own parts: the
// start-up tail (reconcile checkpointed claims, then serve the kubelet on
// the sockets the shared flags name) and the periodic loop of Run().
//
// Ownership: ReconcileThenServe returns the server, which the caller owns
// and must destroy before `preparer`. RunPeriodic owns nothing.
// Thread-safety: functions without shared state; RunPeriodic runs its tasks
// on the calling thread, one at a time.

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <stop_token>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "kubeletplugin/claim_preparer.h"
#include "kubeletplugin/flags.h"
#include "kubeletplugin/plugin_server.h"

namespace nvdra::kubeletplugin {

// Reconciles the checkpoint once (claims deleted while the plugin was down are
// unprepared before the kubelet can ask for anything new; a failure is logged,
// not returned: the periodic pass retries), runs `after_reconcile` when given
// (plugin-specific clean-up that needs the reconciled checkpoint), then starts
// the gRPC server for `driver_name` with the registrar folder and health port
// from `flags` and the DRA socket in `plugin_dir`.
common::StatusOr<std::unique_ptr<PluginServer>> ReconcileThenServe(
    const KubeletPluginFlags& flags, std::string_view driver_name, const std::filesystem::path& plugin_dir,
    ClaimPreparer& preparer, const std::function<void()>& after_reconcile = nullptr);

// One job of a plugin's Run loop: `run` is called every `interval`, first
// one interval after RunPeriodic starts.
struct PeriodicTask {
  std::chrono::steady_clock::duration interval;
  std::function<void()> run;
};

// The task that reconciles `preparer`'s checkpoint (errors logged).
PeriodicTask ReconcileTask(ClaimPreparer& preparer, std::chrono::steady_clock::duration interval);

// Runs `tasks` at their intervals until `stop` is requested; returns
// promptly on stop (no task is started after it).
void RunPeriodic(std::stop_token stop, std::vector<PeriodicTask> tasks);

}  // namespace nvdra::kubeletplugin
