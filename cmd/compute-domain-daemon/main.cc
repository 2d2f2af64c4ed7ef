// compute-domain-daemon: runs next to nvidia-imex in each ComputeDomain's
// daemon pod. `run` labels the pod, joins the ComputeDomainClique and
// supervises nvidia-imex; `check` is the pod's probe
// (src/computedomain/daemon_process.h).

#include <string>

#include <CLI/CLI.hpp>

#include "common/feature_gates.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/signals.h"
#include "computedomain/config.h"
#include "computedomain/daemon_process.h"

namespace {

using namespace nvdra;

int Run(const CLI::App& app, const computedomain::DaemonConfig& config, const common::FeatureGates& gates) {
  auto signals = common::ShutdownSignals::Install();
  if (!signals.ok()) {
    LOG_ERROR("cannot watch shutdown signals", {{"err", signals.status()}});
    return 1;
  }
  common::LogStartup(computedomain::kDaemonBinaryName, app, gates);
  if (common::Status status = computedomain::RunDaemonProcess(config, gates, **signals); !status.ok()) {
    LOG_ERROR("daemon failed", {{"err", status}});
    return 1;
  }
  LOG_INFO(0, "shutdown complete", {{"signal", (*signals)->received_signal()}});
  return 0;
}

int Check(const computedomain::DaemonConfig& config) {
  if (common::Status status = computedomain::CheckImexReady(config); !status.ok()) {
    LOG_ERROR("IMEX daemon check failed", {{"err", status}});
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Runs and watches nvidia-imex for one ComputeDomain on this node",
               std::string(computedomain::kDaemonBinaryName));
  common::CommonFlags common_flags;
  computedomain::DaemonConfig config;
  common::AddCommonFlags(app, common_flags, computedomain::kDaemonBinaryName);
  computedomain::AddDaemonFlags(app, config);
  CLI::App* run = app.add_subcommand("run", "Run and supervise the IMEX daemon");
  CLI::App* check = app.add_subcommand("check", "Probe: succeed when the IMEX daemon is ready");
  app.require_subcommand(1);
  // Upstream takes global flags after the subcommand too ("run -v 4").
  run->fallthrough();
  check->fallthrough();
  if (auto exit_code = common::ParseFlags(app, argc, argv)) return *exit_code;

  common::StatusOr<common::FeatureGates> gates = common::ApplyCommonFlags(common_flags);
  if (!gates.ok()) return common::ExitForBadFlags(app, gates.status());

  const int exit_code = run->parsed() ? Run(app, config, *gates) : Check(config);
  common::FlushLogs();
  return exit_code;
}
