#include "common/service_main.h"

#include "common/allocator.h"
#include "common/flags.h"
#include "common/log.h"

namespace nvdra::common {

namespace {

int Serve(const ServiceProgram& program, const CLI::App& app, const FeatureGates& gates) {
  StatusOr<std::unique_ptr<ShutdownSignals>> signals = ShutdownSignals::Install();
  if (!signals.ok()) {
    LOG_ERROR("cannot watch shutdown signals", {{"err", signals.status()}});
    return 1;
  }
  LogStartup(program.binary_name, app, gates);
  if (Status status = program.serve(gates, **signals); !status.ok()) {
    LOG_ERROR("stopped on an error", {{"binary", program.binary_name}, {"err", status}});
    return 1;
  }
  LOG_INFO(0, "shutdown complete", {{"signal", (*signals)->received_signal()}});
  return 0;
}

}  // namespace

int RunServiceMain(const ServiceProgram& program, int argc, char** argv) {
  CLI::App app(program.description, std::string(program.binary_name));
  CommonFlags common_flags;
  AddCommonFlags(app, common_flags, program.binary_name);
  program.add_flags(app);
  if (std::optional<int> exit_code = ParseFlags(app, argc, argv)) return *exit_code;
  if (program.limit_malloc_arenas) LimitMallocArenas();

  StatusOr<FeatureGates> gates = ApplyCommonFlags(common_flags);
  if (!gates.ok()) return ExitForBadFlags(app, gates.status());
  if (program.validate) {
    if (Status status = program.validate(*gates); !status.ok()) return ExitForBadFlags(app, status);
  }
  std::optional<int> exit_code;
  if (program.one_shot) exit_code = program.one_shot(*gates);
  if (!exit_code) exit_code = Serve(program, app, *gates);
  FlushLogs();
  return *exit_code;
}

}  // namespace nvdra::common
