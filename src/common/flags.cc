#include "common/flags.h"

#include <cstdlib>
#include <iostream>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/version.h"

namespace nvdra::common {
namespace {

using std::chrono::nanoseconds;

// Adds a Go-syntax duration option bound to `target`.
CLI::Option* AddDurationOption(CLI::App& app, const std::string& name, nanoseconds& target,
                               const std::string& description) {
  CLI::Option* option = app.add_option_function<std::string>(
      name,
      [&target, name](const std::string& text) {
        StatusOr<nanoseconds> parsed = ParseGoDuration(text);
        if (!parsed.ok()) throw CLI::ValidationError(name, parsed.status().message());
        target = *parsed;
      },
      description);
  option->default_str(FormatDuration(target));
  return option;
}

// The option of `app` or one of its subcommands that answers to `--name`.
bool HasLongOption(const CLI::App& app, const std::string& name) {
  if (app.get_option_no_throw("--" + name) != nullptr) return true;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (HasLongOption(*sub, name)) return true;
  }
  return false;
}

// Go's flag packages accept "-name" and "-name=value" for long flags; CLI11
// reads "-name" as a cluster of short flags. Rewrites those to "--name...".
std::vector<std::string> NormalizeGoStyleArgs(const CLI::App& app, int argc,
                                              const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      for (; i < argc; ++i) args.emplace_back(argv[i]);
      break;
    }
    if (arg.size() > 2 && arg[0] == '-' && arg[1] != '-') {
      const std::string name = arg.substr(1, arg.find('=') - 1);
      // "-v4" stays as is (CLI11 handles it); "-v=4" and "-node-name" are Go style.
      const bool go_style = name.size() > 1 || arg.find('=') != std::string::npos;
      if (go_style && HasLongOption(app, name)) arg.insert(0, "-");
    }
    args.push_back(std::move(arg));
  }
  return args;
}

std::string OptionValue(const CLI::Option& option) {
  if (option.count() == 0) return option.get_default_str();
  std::string value;
  for (const std::string& result : option.results()) {
    if (!value.empty()) value.push_back(',');
    value.append(result);
  }
  return value;
}

void LogOptionValues(const CLI::App& app, const std::string& prefix) {
  for (const CLI::Option* option : app.get_options()) {
    const std::string name = option->get_name(/*positional=*/false, /*all_options=*/false);
    if (name == "--help" || name == "--version" || name == "-h") continue;
    LOG_INFO(1, "flag", {{"name", prefix + name}, {"value", OptionValue(*option)}});
  }
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    LogOptionValues(*sub, prefix + sub->get_name() + " ");
  }
}

}  // namespace

CLI::Option* WithEnv(CLI::Option* option, std::initializer_list<std::string_view> env_names) {
  if (env_names.size() == 0) return option;
  std::string chosen(*env_names.begin());
  for (std::string_view name : env_names) {
    const std::string key(name);
    const char* value = std::getenv(key.c_str());
    if (value != nullptr && *value != '\0') {
      chosen = key;
      break;
    }
  }
  return option->envname(chosen);
}

void AddCommonFlags(CLI::App& app, CommonFlags& flags, std::string_view binary_name) {
  app.set_version_flag("--version", VersionText(binary_name), "Print the version and exit");
  WithEnv(app.add_option("-v,--v", flags.verbosity,
                         "Log verbosity: 0 start-up and errors, 1 configuration, 2 changes "
                         "(default), 3 more detail, 4 debug, 6 API requests, 7 headers, 8 bodies (higher: "
                         "as 8)")
              ->capture_default_str()
              ->check(CLI::NonNegativeNumber),
          {"V"});
  WithEnv(app.add_option("--logging-format,--log-format", flags.logging_format,
                         "Log format: text or json")
              ->capture_default_str()
              ->check(CLI::IsMember({"text", "json"})),
          {"LOGGING_FORMAT"});
  WithEnv(app.add_option("--vmodule", flags.vmodule,
                         "Per-file verbosity, klog's pattern=N,...: a glob over source file names without "
                         "their extension (e.g. claim_preparer=6)"),
          {"VMODULE"});
  WithEnv(app.add_option("--feature-gates", flags.feature_gates,
                         "Comma-separated Name=true|false pairs. Known gates:" +
                             FeatureGates::KnownFeaturesHelp()),
          {"FEATURE_GATES"});
  WithEnv(app.add_option("--fabric-topology-support", flags.fabric_topology_support,
                         "true or false: turns the FabricTopologySupport feature gate on or off (GpuConfig "
                         "fabricTopologyConfig); the same as --feature-gates FabricTopologySupport=..."),
          {"FABRIC_TOPOLOGY_SUPPORT"});
}

StatusOr<FeatureGates> ApplyCommonFlags(const CommonFlags& flags) {
  if (flags.verbosity < kMinVerbosity) {
    return InvalidArgumentError(fmt::format("-v: {} is negative; use a level from {} up", flags.verbosity,
                                            kMinVerbosity));
  }
  StatusOr<LogFormat> format = ParseLogFormat(flags.logging_format);
  if (!format.ok()) return format.status().WithContext("--logging-format");
  InitLogging(LogOptions{.verbosity = flags.verbosity, .format = *format});
  RETURN_IF_ERROR(SetVmodule(flags.vmodule));
  StatusOr<FeatureGates> gates = FeatureGates::Parse(flags.feature_gates);
  if (!gates.ok()) return gates.status();
  if (flags.fabric_topology_support.empty()) return gates;
  StatusOr<bool> fabric = ParseGoBool(flags.fabric_topology_support);
  if (!fabric.ok()) {
    return InvalidArgumentError(fmt::format("--fabric-topology-support (FABRIC_TOPOLOGY_SUPPORT): {}",
                                            fabric.status().message()));
  }
  // Gate names are distinct words: a mention is an explicit entry.
  if (flags.feature_gates.find(kFabricTopologySupport) != std::string::npos &&
      gates->Enabled(kFabricTopologySupport) != *fabric) {
    return InvalidArgumentError(fmt::format(
        "FABRIC_TOPOLOGY_SUPPORT={} and --feature-gates {}={} disagree; set the gate in one place",
        flags.fabric_topology_support, kFabricTopologySupport, !*fabric));
  }
  return gates->WithOverrides({{std::string(kFabricTopologySupport), *fabric}});
}

Status KubeClientFlags::Validate() const {
  if (!(qps > 0)) {
    return InvalidArgumentError(fmt::format("--kube-api-qps: must be positive, got {}", qps));
  }
  if (burst <= 0) {
    return InvalidArgumentError(fmt::format("--kube-api-burst: must be positive, got {}", burst));
  }
  return OkStatus();
}

void AddKubeClientFlags(CLI::App& app, KubeClientFlags& flags) {
  WithEnv(app.add_option("--kubeconfig", flags.kubeconfig,
                         "Path to a kubeconfig; empty means the in-cluster configuration"),
          {"KUBECONFIG"});
  WithEnv(app.add_option("--kube-api-qps", flags.qps, "API server requests per second")
              ->capture_default_str(),
          {"KUBE_API_QPS"});
  WithEnv(app.add_option("--kube-api-burst", flags.burst, "API server request burst")
              ->capture_default_str(),
          {"KUBE_API_BURST"});
}

Status MetricsFlags::Validate() const {
  if (metrics_path.empty() || metrics_path.front() != '/') {
    return InvalidArgumentError(
        fmt::format("--metrics-path: \"{}\" must start with '/'", metrics_path));
  }
  return OkStatus();
}

void AddMetricsFlags(CLI::App& app, MetricsFlags& flags) {
  WithEnv(app.add_option("--http-endpoint", flags.http_endpoint,
                         "TCP address for the metrics HTTP server (host:port); empty disables it"),
          {"HTTP_ENDPOINT"});
  WithEnv(app.add_option("--metrics-path", flags.metrics_path, "HTTP path serving metrics")
              ->capture_default_str(),
          {"METRICS_PATH"});
}

Status LeaderElectionFlags::Validate() const {
  if (lease_lock_name.empty()) {
    return InvalidArgumentError("--leader-election-lease-lock-name: must not be empty");
  }
  if (lease_lock_namespace.empty()) {
    return InvalidArgumentError("--leader-election-lease-lock-namespace: must not be empty");
  }
  if (retry_period <= nanoseconds::zero()) {
    return InvalidArgumentError("--leader-election-retry-period: must be positive");
  }
  if (renew_deadline <= retry_period) {
    return InvalidArgumentError(
        "--leader-election-renew-deadline: must be longer than --leader-election-retry-period");
  }
  if (lease_duration <= renew_deadline) {
    return InvalidArgumentError(
        "--leader-election-lease-duration: must be longer than --leader-election-renew-deadline");
  }
  return OkStatus();
}

void AddLeaderElectionFlags(CLI::App& app, LeaderElectionFlags& flags) {
  WithEnv(app.add_flag("--leader-election-enabled", flags.enabled,
                       "Run only while holding the leader lease"),
          {"LEADER_ELECTION_ENABLED"});
  WithEnv(app.add_option("--leader-election-lease-lock-namespace", flags.lease_lock_namespace,
                         "Namespace of the leader election Lease")
              ->capture_default_str(),
          {"LEADER_ELECTION_LEASE_LOCK_NAMESPACE"});
  WithEnv(app.add_option("--leader-election-lease-lock-name", flags.lease_lock_name,
                         "Name of the leader election Lease")
              ->capture_default_str(),
          {"LEADER_ELECTION_LEASE_LOCK_NAME"});
  WithEnv(AddDurationOption(app, "--leader-election-lease-duration", flags.lease_duration,
                            "How long non-leaders wait before taking over"),
          {"LEADER_ELECTION_LEASE_DURATION"});
  WithEnv(AddDurationOption(app, "--leader-election-renew-deadline", flags.renew_deadline,
                            "How long the leader retries renewing before giving up"),
          {"LEADER_ELECTION_RENEW_DEADLINE"});
  WithEnv(AddDurationOption(app, "--leader-election-retry-period", flags.retry_period,
                            "Wait between leader election attempts"),
          {"LEADER_ELECTION_RETRY_PERIOD"});
}

std::optional<int> ParseFlags(CLI::App& app, int argc, const char* const* argv) {
  std::vector<std::string> args = NormalizeGoStyleArgs(app, argc, argv);
  // CLI11 takes the arguments in reverse order.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << app.get_name() << ": " << e.what() << "\n"
              << "Run '" << app.get_name() << " --help' for usage.\n";
    return 2;
  }
  return std::nullopt;
}

int ExitForBadFlags(const CLI::App& app, const Status& status) {
  std::cerr << app.get_name() << ": " << status.message() << "\n"
            << "Run '" << app.get_name() << " --help' for usage.\n";
  return 2;
}

StatusOr<nanoseconds> ParseGoDuration(std::string_view text) {
  const auto invalid = [text] {
    return InvalidArgumentError(
        fmt::format("invalid duration \"{}\" (want e.g. 15s, 500ms, 1m30s)", text));
  };
  std::string_view rest = text;
  bool negative = false;
  if (!rest.empty() && (rest.front() == '-' || rest.front() == '+')) {
    negative = rest.front() == '-';
    rest.remove_prefix(1);
  }
  if (rest == "0") return nanoseconds::zero();
  if (rest.empty()) return invalid();
  long double total = 0;
  while (!rest.empty()) {
    std::size_t digits = 0;
    while (digits < rest.size() &&
           ((rest[digits] >= '0' && rest[digits] <= '9') || rest[digits] == '.')) {
      ++digits;
    }
    const std::string number(rest.substr(0, digits));
    if (number.empty() || number == "." || number.find('.') != number.rfind('.')) {
      return invalid();
    }
    rest.remove_prefix(digits);
    std::size_t unit_len = 0;
    while (unit_len < rest.size() && !(rest[unit_len] >= '0' && rest[unit_len] <= '9') &&
           rest[unit_len] != '.') {
      ++unit_len;
    }
    const std::string_view unit = rest.substr(0, unit_len);
    rest.remove_prefix(unit_len);
    long double scale = 0;
    if (unit == "ns") scale = 1;
    else if (unit == "us" || unit == "\xC2\xB5s" || unit == "\xCE\xBCs") scale = 1e3L;
    else if (unit == "ms") scale = 1e6L;
    else if (unit == "s") scale = 1e9L;
    else if (unit == "m") scale = 60e9L;
    else if (unit == "h") scale = 3600e9L;
    else return invalid();
    total += std::strtold(number.c_str(), nullptr) * scale;
  }
  // Go's limit: about 290 years.
  if (total > 9.2e18L) return invalid();
  const auto count = static_cast<nanoseconds::rep>(total);
  return nanoseconds(negative ? -count : count);
}

std::string FormatDuration(nanoseconds duration) {
  using namespace std::chrono;
  if (duration == nanoseconds::zero()) return "0s";
  std::string out;
  if (duration < nanoseconds::zero()) {
    out.push_back('-');
    duration = -duration;
  }
  if (duration < seconds(1)) {
    if (duration % milliseconds(1) == nanoseconds::zero()) {
      return out + fmt::format("{}ms", duration_cast<milliseconds>(duration).count());
    }
    if (duration % microseconds(1) == nanoseconds::zero()) {
      return out + fmt::format("{}us", duration_cast<microseconds>(duration).count());
    }
    return out + fmt::format("{}ns", duration.count());
  }
  const auto h = duration_cast<hours>(duration);
  const auto m = duration_cast<minutes>(duration - h);
  const nanoseconds rest = duration - h - m;
  if (h.count() > 0) out += fmt::format("{}h", h.count());
  if (h.count() > 0 || m.count() > 0) out += fmt::format("{}m", m.count());
  const auto whole = duration_cast<seconds>(rest);
  std::string fraction = fmt::format("{:09}", (rest - whole).count());
  while (!fraction.empty() && fraction.back() == '0') fraction.pop_back();
  // Digits, as Go writes them ("0.000003s"): a double would print small
  // fractions in exponent form ("3e-06s"), which no duration parser reads.
  out += fraction.empty() ? fmt::format("{}s", whole.count()) : fmt::format("{}.{}s", whole.count(), fraction);
  return out;
}

void LogStartup(std::string_view binary_name, const CLI::App& app, const FeatureGates& gates) {
  LOG_INFO(0, "starting", {{"binary", binary_name}, {"version", Version()},
                           {"commit", GitCommit()}, {"buildDate", BuildDate()}});
  LOG_INFO(0, "feature gates", {{"featureGates", gates.ToString()}});
  LOG_INFO(1, "log settings", {{"verbosity", Verbosity()}});
  LogOptionValues(app, "");
}

}  // namespace nvdra::common
