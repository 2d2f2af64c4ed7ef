#pragma once

// The main() every long-running binary shares (the two kubelet plugins, the
// compute-domain controller and daemon, the webhook): common flags (logging,
// feature gates) plus the program's own, validation, shutdown signals, the
// start-up log line, the service until SIGTERM or SIGINT, and the exit code.
// A binary differs only in its configuration type and its serve function:
//
//   int main(int argc, char** argv) {
//     return common::RunService<ControllerConfig>(kControllerBinaryName, "Reconciles ...",
//                                                 &RunControllerProcess, argc, argv);
//   }
//
// Defines: ServiceProgram, RunServiceMain, ServiceConfig, RunService.
//
// Ownership: the program's callbacks bind flags to state the caller owns,
// which outlives RunServiceMain. Thread-safety: RunServiceMain and RunService
// are called once, from main(), before any other thread starts.

#include <concepts>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <CLI/CLI.hpp>

#include "common/feature_gates.h"
#include "common/signals.h"
#include "common/status.h"

namespace nvdra::common {

// What makes one service binary: the four required parts are constructor
// arguments, the optional ones are set afterwards.
struct ServiceProgram {
  // The service: returns once `signals` requested the stop (OK) or on a
  // fatal error.
  using Serve = std::function<Status(const FeatureGates& gates, ShutdownSignals& signals)>;

  ServiceProgram(std::string_view binary_name_in, std::string description_in,
                 std::function<void(CLI::App& app)> add_flags_in, Serve serve_in)
      : binary_name(binary_name_in),
        description(std::move(description_in)),
        add_flags(std::move(add_flags_in)),
        serve(std::move(serve_in)) {}

  std::string_view binary_name;  // "compute-domain-controller"
  std::string description;       // the first line of --help
  // Adds the program's own flags (and subcommands) to `app`.
  std::function<void(CLI::App& app)> add_flags;
  Serve serve;
  // Checks the parsed flags; the message names the bad flag. Optional.
  std::function<Status(const FeatureGates& gates)> validate;
  // Optional: runs after validation and before the signals are installed;
  // an exit code ends the process there (the daemon's `check` probe, which
  // must neither log the start-up line nor block signals), nullopt goes on.
  std::function<std::optional<int>(const FeatureGates& gates)> one_shot;
  // Caps glibc's malloc arenas (common/allocator.h): the kubelet plugins.
  bool limit_malloc_arenas = false;
};

// Returns the process exit code: 0 after an orderly stop, 1 when the service
// fails, 2 for bad flags, the flag parser's code for --help and --version.
int RunServiceMain(const ServiceProgram& program, int argc, char** argv);

// A binary's configuration: default-constructible, its flags added by an
// AddFlags(CLI::App&, Config&) found next to it (argument-dependent lookup),
// and checked by Validate(gates) or Validate() where it has one.
template <typename Config>
concept ServiceConfig = std::default_initializable<Config> && requires(CLI::App& app, Config& config) {
  AddFlags(app, config);
};

// The service over a parsed, validated Config.
template <typename Config>
using ConfiguredServe = std::function<Status(const Config& config, const FeatureGates& gates, ShutdownSignals& signals)>;

// RunServiceMain for a binary whose flags are one Config.
template <ServiceConfig Config>
int RunService(std::string_view binary_name, std::string description, ConfiguredServe<Config> serve, int argc,
               char** argv, bool limit_malloc_arenas = false) {
  Config config;
  ServiceProgram program(
      binary_name, std::move(description), [&config](CLI::App& app) { AddFlags(app, config); },
      [&config, serve = std::move(serve)](const FeatureGates& gates, ShutdownSignals& signals) {
        return serve(config, gates, signals);
      });
  if constexpr (requires(const FeatureGates& gates) { config.Validate(gates); }) {
    program.validate = [&config](const FeatureGates& gates) { return config.Validate(gates); };
  } else if constexpr (requires { config.Validate(); }) {
    program.validate = [&config](const FeatureGates&) { return config.Validate(); };
  }
  program.limit_malloc_arenas = limit_malloc_arenas;
  return RunServiceMain(program, argc, argv);
}

}  // namespace nvdra::common
