#include "kubeletplugin/plugin_main.h"

#include <thread>

namespace nvdra::kubeletplugin {

common::Status ServePlugin(const std::function<common::StatusOr<RunningPluginPtr>()>& start,
                           common::ShutdownSignals& signals) {
  ASSIGN_OR_RETURN(RunningPluginPtr plugin, start());
  std::jthread background([&](std::stop_token stop) { plugin->Run(stop); });
  signals.WaitForShutdown();
  background.request_stop();
  background.join();
  plugin.reset();
  return common::OkStatus();
}

}  // namespace nvdra::kubeletplugin
