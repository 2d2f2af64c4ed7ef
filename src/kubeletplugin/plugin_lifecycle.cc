#include "kubeletplugin/plugin_lifecycle.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <string>
#include <utility>

#include "common/log.h"

namespace nvdra::kubeletplugin {

using common::StatusOr;

StatusOr<std::unique_ptr<PluginServer>> ReconcileThenServe(const KubeletPluginFlags& flags,
                                                           std::string_view driver_name,
                                                           const std::filesystem::path& plugin_dir,
                                                           ClaimPreparer& preparer,
                                                           const std::function<void()>& after_reconcile) {
  if (StatusOr<int> cleaned = preparer.Reconcile(); !cleaned.ok()) {
    LOG_ERROR("start-up reconciliation of checkpointed claims failed", {{"err", cleaned.status()}});
  }
  if (after_reconcile) after_reconcile();

  PluginServerOptions options;
  options.driver_name = std::string(driver_name);
  options.registrar_dir = flags.kubelet_registrar_directory_path;
  options.plugin_dir = plugin_dir;
  options.healthcheck_port = flags.healthcheck_port;
  ASSIGN_OR_RETURN(std::unique_ptr<PluginServer> server, PluginServer::Start(options, preparer));
  LOG_INFO(0, "plugin serving", {{"driver", std::string(driver_name)}, {"socket", server->dra_socket().string()}});
  return server;
}

PeriodicTask ReconcileTask(ClaimPreparer& preparer, std::chrono::steady_clock::duration interval) {
  return {interval, [&preparer] {
            if (StatusOr<int> cleaned = preparer.Reconcile(); !cleaned.ok()) {
              LOG_ERROR("reconciliation of checkpointed claims failed", {{"err", cleaned.status()}});
            }
          }};
}

void RunPeriodic(std::stop_token stop, std::vector<PeriodicTask> tasks) {
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> due;
  const Clock::time_point start = Clock::now();
  for (const PeriodicTask& task : tasks) due.push_back(start + task.interval);
  // Nothing notifies this variable: it is the stop-aware sleep.
  std::mutex mu;
  std::condition_variable_any wake;
  std::unique_lock<std::mutex> lock(mu);
  while (!stop.stop_requested() && !tasks.empty()) {
    const Clock::time_point next = *std::min_element(due.begin(), due.end());
    wake.wait_until(lock, stop, next, [] { return false; });
    if (stop.stop_requested()) break;
    const Clock::time_point now = Clock::now();
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      if (now < due[i]) continue;
      due[i] = now + tasks[i].interval;
      tasks[i].run();
    }
  }
}

}  // namespace nvdra::kubeletplugin
