// nvidia-cdi-hook: the OCI createContainer hooks named in the plugins' CDI
// specs, command-line compatible with nvidia-container-toolkit's binary of
// the same name (src/cdihook/hook_commands.h). The runtime passes the
// container state on stdin.

#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "cdihook/hook_commands.h"
#include "common/flags.h"
#include "common/log.h"

int main(int argc, char** argv) {
  using namespace nvdra;
  constexpr std::string_view kName = "nvidia-cdi-hook";
  CLI::App app("OCI createContainer hooks for NVIDIA CDI specs (create-symlinks, enable-cuda-compat, "
               "update-ldcache, disable-device-node-modification); "
               "the container state is read from stdin",
               std::string(kName));
  common::CommonFlags common_flags;
  bool debug = false;
  bool quiet = false;
  common::AddCommonFlags(app, common_flags, kName);
  common::WithEnv(app.add_flag("-d,--debug", debug, "Log at debug verbosity (-v 4)"), {"NVIDIA_CDI_DEBUG"});
  common::WithEnv(app.add_flag("--quiet", quiet, "Log only warnings and errors; overrides --debug"),
                  {"NVIDIA_CDI_QUIET"});
  app.require_subcommand(0, 1);
  cdihook::HookCommands hooks(app);
  // A hook name we do not know ends parsing; it is reported after the parse.
  app.prefix_command();

  if (auto exit_code = common::ParseFlags(app, argc, argv)) return *exit_code;
  const std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front().starts_with('-')) {
    return common::ExitForBadFlags(app, common::InvalidArgumentError("unknown flag " + rest.front()));
  }
  if (quiet) {
    common_flags.verbosity = 0;
  } else if (debug && common_flags.verbosity < 4) {
    common_flags.verbosity = 4;
  }
  common::StatusOr<common::FeatureGates> gates = common::ApplyCommonFlags(common_flags);
  if (!gates.ok()) return common::ExitForBadFlags(app, gates.status());

  if (common::Status status = hooks.RunParsed(rest); !status.ok()) {
    LOG_ERROR("hook failed", {{"err", status}});
    common::FlushLogs();
    return 1;
  }
  return 0;
}
