// compute-domain-daemon: runs next to nvidia-imex in each ComputeDomain's
// daemon pod. `run` labels the pod, joins the ComputeDomainClique and
// supervises nvidia-imex; `check` is the pod's probe
// (src/computedomain/daemon_process.h).

#include <optional>

#include "common/log.h"
#include "common/service_main.h"
#include "computedomain/config.h"
#include "computedomain/daemon_process.h"

int main(int argc, char** argv) {
  using namespace nvdra;
  computedomain::DaemonConfig config;
  CLI::App* check = nullptr;
  common::ServiceProgram program(
      computedomain::kDaemonBinaryName, "Runs and watches nvidia-imex for one ComputeDomain on this node",
      [&](CLI::App& app) {
        computedomain::AddFlags(app, config);
        CLI::App* run = app.add_subcommand("run", "Run and supervise the IMEX daemon");
        check = app.add_subcommand("check", "Probe: succeed when the IMEX daemon is ready");
        app.require_subcommand(1);
        // Upstream takes global flags after the subcommand too ("run -v 4").
        run->fallthrough();
        check->fallthrough();
      },
      [&](const common::FeatureGates& gates, common::ShutdownSignals& signals) {
        return computedomain::RunDaemonProcess(config, gates, signals);
      });
  // The probe runs often: no start-up line, no signal watcher.
  program.one_shot = [&](const common::FeatureGates&) -> std::optional<int> {
    if (!check->parsed()) return std::nullopt;
    common::Status status = computedomain::CheckImexReady(config);
    if (!status.ok()) LOG_ERROR("IMEX daemon check failed", {{"err", status}});
    return status.ok() ? 0 : 1;
  };
  return common::RunServiceMain(program, argc, argv);
}
