#pragma once

// nvidia-cdi-hook's subcommands, command-line compatible with
// nvidia-container-toolkit's binary of the same name:
// `create-symlinks --link <target>::<link>...`,
// `enable-cuda-compat --host-driver-version <version>`,
// `update-ldcache --folder <dir>...` and `disable-device-node-modification`,
// each reading the container state the runtime passes on stdin (or, for
// tests as in the toolkit, --container-spec <file>). The toolkit's other
// hooks, which our specs never name, are accepted and ignored with a
// warning, as the toolkit itself treats hooks it does not know, so a spec
// written for a newer toolkit does not fail the container.
//
// Ownership: HookCommands owns the parsed option values; the CLI::App it
// was built on must outlive it. Thread-safety: confined to main's thread.

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "cdihook/cuda_compat.h"
#include "cdihook/ldcache.h"
#include "common/status.h"

namespace nvdra::cdihook {

class HookCommands {
 public:
  // Adds every hook's subcommand to `app`.
  explicit HookCommands(CLI::App& app);
  HookCommands(const HookCommands&) = delete;
  HookCommands& operator=(const HookCommands&) = delete;

  // Runs the hook `app` parsed; `rest` is what the parser left (the name of
  // a hook it does not know). No hook, an ignored one or an unknown one is
  // not an error (logged as a warning). The status names the hook that
  // failed.
  [[nodiscard]] common::Status RunParsed(const std::vector<std::string>& rest);

 private:
  struct Hook {
    CLI::App* command;
    std::function<common::Status()> run;  // empty for the ignored ones
  };
  // A subcommand whose state comes from --container-spec (or stdin).
  CLI::App* AddHook(CLI::App& app, std::string name, std::string description);

  std::vector<Hook> hooks_;
  std::string container_spec_;
  std::vector<std::string> links_;
  LdcacheOptions ldcache_;
  std::string ldconfig_path_ = ldcache_.ldconfig_path.string();
  CudaCompatOptions cuda_compat_;
};

}  // namespace nvdra::cdihook
