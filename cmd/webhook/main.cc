// webhook: validating admission of resource.nvidia.com opaque configs in
// ResourceClaims and ResourceClaimTemplates. For now: flags, feature gates,
// logging and an orderly wait for SIGTERM.

#include <string>

#include <CLI/CLI.hpp>

#include "common/feature_gates.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/signals.h"
#include "webhook/config.h"

int main(int argc, char** argv) {
  using namespace nvdra;
  CLI::App app("Validating admission webhook for resource.nvidia.com opaque device configs",
               std::string(webhook::kBinaryName));
  common::CommonFlags common_flags;
  webhook::Config config;
  common::AddCommonFlags(app, common_flags, webhook::kBinaryName);
  webhook::AddFlags(app, config);
  if (auto exit_code = common::ParseFlags(app, argc, argv)) return *exit_code;

  common::StatusOr<common::FeatureGates> gates = common::ApplyCommonFlags(common_flags);
  if (!gates.ok()) return common::ExitForBadFlags(app, gates.status());
  if (common::Status status = config.Validate(); !status.ok()) {
    return common::ExitForBadFlags(app, status);
  }

  auto signals = common::ShutdownSignals::Install();
  if (!signals.ok()) {
    LOG_ERROR("cannot watch shutdown signals", {{"err", signals.status()}});
    return 1;
  }
  common::LogStartup(webhook::kBinaryName, app, *gates);
  LOG_INFO(0, "component not implemented yet; waiting for SIGTERM or SIGINT",
           {{"port", config.port}});
  const int signal_number = (*signals)->WaitForShutdown();
  LOG_INFO(0, "shutdown complete", {{"signal", signal_number}});
  common::FlushLogs();
  return 0;
}
