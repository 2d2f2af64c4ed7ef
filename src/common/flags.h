#pragma once

// Command-line helpers on top of CLI11: every flag may have an environment
// twin (upstream's names), with precedence flag > environment > default; the
// flag groups every binary shares; and the parse step that maps --help,
// --version and bad input to exit codes.
//
// Defines: WithEnv, CommonFlags + AddCommonFlags + ApplyCommonFlags,
// KubeClientFlags, LeaderElectionFlags, ParseFlags, ParseGoDuration,
// FormatDuration, LogStartup.
//
// Ownership: the Add* functions bind options to the caller's structs, which
// must outlive the CLI::App. Thread-safety: thread-compatible; flags are parsed
// once in main before other threads start.

#include <chrono>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "common/feature_gates.h"
#include "common/log.h"
#include "common/status.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace nvdra::common {

// Gives `option` an environment twin. The first variable in `env_names` that
// is set (non-empty) supplies the value when the flag is not on the command
// line; with none set, the first name is the one --help shows. Several names
// exist for upstream's aliases (NVIDIA_DRIVER_ROOT, HOST_DRIVER_ROOT).
// The environment is read here, so call it just before parsing (the Add*
// functions and the per-binary AddFlags do). Returns `option`.
CLI::Option* WithEnv(CLI::Option* option, std::initializer_list<std::string_view> env_names);

// Flags every binary has (upstream's logging and feature-gate groups).
struct CommonFlags {
  int verbosity = kDefaultVerbosity;  // -v, --v (V)
  std::string logging_format = "text";  // --logging-format, --log-format (LOGGING_FORMAT)
  std::string vmodule;  // --vmodule (VMODULE): per-file verbosity (common/log.h SetVmodule)
  std::string feature_gates;  // --feature-gates (FEATURE_GATES)
  // --fabric-topology-support (FABRIC_TOPOLOGY_SUPPORT): seed 002's switch
  // for the FabricTopologySupport gate; empty: as --feature-gates says.
  std::string fabric_topology_support;
};

// Adds the common flags and --version (which prints VersionText(binary_name)
// to stdout). There is no -v alias for --version: -v is verbosity.
void AddCommonFlags(CLI::App& app, CommonFlags& flags, std::string_view binary_name);

// Checks -v and --logging-format, initializes logging from them, and parses
// and validates --feature-gates, with FABRIC_TOPOLOGY_SUPPORT applied over
// it (an explicit FabricTopologySupport entry that disagrees is refused).
// kInvalidArgument naming the flag.
StatusOr<FeatureGates> ApplyCommonFlags(const CommonFlags& flags);

// Kubernetes API client flags (GPU plugin, CD plugin, controller).
struct KubeClientFlags {
  std::string kubeconfig;  // --kubeconfig (KUBECONFIG); empty: in-cluster config
  double qps = 5;  // --kube-api-qps (KUBE_API_QPS)
  int burst = 10;  // --kube-api-burst (KUBE_API_BURST)

  // kInvalidArgument naming the flag when qps or burst is not positive.
  [[nodiscard]] Status Validate() const;
};
void AddKubeClientFlags(CLI::App& app, KubeClientFlags& flags);

// Metrics endpoint (both plugins and the controller).
struct MetricsFlags {
  std::string http_endpoint;  // --http-endpoint (HTTP_ENDPOINT); empty: metrics off
  std::string metrics_path = "/metrics";  // --metrics-path (METRICS_PATH)

  // kInvalidArgument naming the flag: a metrics path not starting with '/'.
  [[nodiscard]] Status Validate() const;
};
void AddMetricsFlags(CLI::App& app, MetricsFlags& flags);

// Leader election (controller only). Durations in Go syntax ("15s", "1m30s").
struct LeaderElectionFlags {
  bool enabled = false;  // --leader-election-enabled
  std::string lease_lock_namespace = "default";
  std::string lease_lock_name = "nvidia-compute-domain-controller";
  std::chrono::nanoseconds lease_duration = std::chrono::seconds(15);
  std::chrono::nanoseconds renew_deadline = std::chrono::seconds(10);
  std::chrono::nanoseconds retry_period = std::chrono::seconds(2);

  // kInvalidArgument naming the flag: empty lock name or namespace, a
  // non-positive duration, or not lease > renew > retry.
  [[nodiscard]] Status Validate() const;
};
void AddLeaderElectionFlags(CLI::App& app, LeaderElectionFlags& flags);

// Parses argv into the options registered on `app`. Returns std::nullopt when
// main should go on, or the exit code main should return: 0 after --help or
// --version (printed to stdout), 2 after a bad flag (the message, naming the
// flag, on stderr). Go-style single-dash long flags ("-node-name=x", "-v=4"),
// which upstream's binaries accept, are read as their "--" forms.
std::optional<int> ParseFlags(CLI::App& app, int argc, const char* const* argv);

// Prints "<app name>: <status message>" and a --help hint to stderr and returns
// 2, the exit code for bad flags.
int ExitForBadFlags(const CLI::App& app, const Status& status);

// Go's time.ParseDuration syntax: a sequence of decimal numbers with units
// ns, us (or µs), ms, s, m, h, e.g. "300ms", "1.5h", "2h45m"; "0" alone.
// kInvalidArgument otherwise.
StatusOr<std::chrono::nanoseconds> ParseGoDuration(std::string_view text);
// The reverse for logs and --help: "15s", "1m30s", "250ms".
std::string FormatDuration(std::chrono::nanoseconds duration);

// Logs what a binary starts with: at v0 the version, commit and feature gates;
// at v1 every option of `app` (and its subcommands) with its effective value.
void LogStartup(std::string_view binary_name, const CLI::App& app, const FeatureGates& gates);

}  // namespace nvdra::common
