// compute-domain-controller: the cluster-wide controller that turns
// ComputeDomains into IMEX daemons, claim templates and status
// (src/computedomain/controller/). Flags as upstream's plus
// --templates-dir, --imex-channel-count and --workers; the process itself is
// controller::RunControllerProcess.

#include <string>

#include <CLI/CLI.hpp>

#include "common/feature_gates.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/signals.h"
#include "computedomain/config.h"
#include "computedomain/controller/process.h"

int main(int argc, char** argv) {
  using namespace nvdra;
  CLI::App app("Reconciles ComputeDomains into IMEX daemons, claim templates and status",
               std::string(computedomain::kControllerBinaryName));
  common::CommonFlags common_flags;
  computedomain::ControllerConfig config;
  common::AddCommonFlags(app, common_flags, computedomain::kControllerBinaryName);
  computedomain::AddControllerFlags(app, config);
  if (auto exit_code = common::ParseFlags(app, argc, argv)) return *exit_code;

  common::StatusOr<common::FeatureGates> gates = common::ApplyCommonFlags(common_flags);
  if (!gates.ok()) return common::ExitForBadFlags(app, gates.status());
  if (common::Status status = config.Validate(*gates); !status.ok()) return common::ExitForBadFlags(app, status);

  auto signals = common::ShutdownSignals::Install();
  if (!signals.ok()) {
    LOG_ERROR("cannot watch shutdown signals", {{"err", signals.status()}});
    return 1;
  }
  common::LogStartup(computedomain::kControllerBinaryName, app, *gates);
  if (common::Status status = computedomain::controller::RunControllerProcess(config, *gates, **signals);
      !status.ok()) {
    LOG_ERROR("controller stopped", {{"err", status}});
    common::FlushLogs();
    return 1;
  }
  LOG_INFO(0, "shutdown complete");
  common::FlushLogs();
  return 0;
}
