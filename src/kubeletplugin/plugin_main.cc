#include "kubeletplugin/plugin_main.h"

#include <thread>

#include "common/allocator.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/signals.h"

namespace nvdra::kubeletplugin {

int RunPluginMain(const PluginProgram& program, int argc, char** argv) {
  CLI::App app(program.description, std::string(program.binary_name));
  common::CommonFlags common_flags;
  common::AddCommonFlags(app, common_flags, program.binary_name);
  program.add_flags(app);
  if (auto exit_code = common::ParseFlags(app, argc, argv)) return *exit_code;
  common::LimitMallocArenas();

  common::StatusOr<common::FeatureGates> gates = common::ApplyCommonFlags(common_flags);
  if (!gates.ok()) return common::ExitForBadFlags(app, gates.status());
  if (common::Status status = program.validate(*gates); !status.ok()) return common::ExitForBadFlags(app, status);

  auto signals = common::ShutdownSignals::Install();
  if (!signals.ok()) {
    LOG_ERROR("cannot watch shutdown signals", {{"err", signals.status()}});
    return 1;
  }
  common::LogStartup(program.binary_name, app, *gates);
  common::StatusOr<std::unique_ptr<RunningPlugin>> plugin = program.start(*gates);
  if (!plugin.ok()) {
    LOG_ERROR("plugin cannot start", {{"binary", program.binary_name}, {"err", plugin.status()}});
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

}  // namespace nvdra::kubeletplugin
