// nvidia-imex-ctl (simulated). Usage as the real tool's --help (IMEX guide,
// "IMEX Service Command Service"):
//   nvidia-imex-ctl [-i <IP> <PORT>|-u <socket>|-c <config>] <-N|-q> [-j] [-H]
// `-q` prints the local daemon's state (READY, INITIALIZING, ...) and exits 0;
// when the command service cannot be reached it says why on stderr and exits 1
// (the simulator's choice; both read as "not ready" to the driver). `-N` reads
// the config and nodes file, asks every node's command service (its address,
// IMEX_CMD_PORT) and prints the domain table (`-j`: JSON; `-H`: also the name).
// `--u=<socket>` is accepted, as upstream's host-managed check passes it.
// -n, -s, -d and -m are not simulated (exit 2).

#include <sys/time.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "env_options.h"
#include "imex_config.h"
#include "net.h"
#include "protocol.h"

namespace {

using namespace nvdra::simimex;
constexpr std::string_view kDefaultConfig = "/etc/nvidia-imex/config.cfg";
constexpr std::chrono::milliseconds kTimeout{3000};

void Usage(std::FILE* out) {
  fmt::print(out,
             "Usage: nvidia-imex-ctl [-i <IP> <PORT>|-u <unix domain socket path>|"
             "-c <nvidia-imex config.cfg path>] <-N|-q> [-j] [-H]\n"
             "  -c <path>  nvidia-imex configuration file (default {})\n"
             "  -i <IP> <PORT>, -u <path> (or --u=<path>): the command service to ask\n"
             "  -q  query the local IMEX daemon's state once (READY when ready)\n"
             "  -N  status of the entire IMEX domain (needs the config file)\n"
             "  -j  JSON output for -N;  -H  show host names with -N\n"
             "Simulated nvidia-imex-ctl for tests (nvdra test/simimex).\n",
             kDefaultConfig);
}

std::string Timestamp() {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  std::tm tm{};
  localtime_r(&tv.tv_sec, &tm);
  return fmt::format("{}/{}/{} {:02}:{:02}:{:02}.{:03}", tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec, tv.tv_usec / 1000);
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path;
  std::string ip;
  int port = -1;
  std::string unix_path;
  bool query = false;
  bool domain = false;
  bool json = false;
  bool hostnames = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      Usage(stdout);
      return 0;
    } else if (arg == "-q") {
      query = true;
    } else if (arg == "-N") {
      domain = true;
    } else if (arg == "-j") {
      json = true;
    } else if (arg == "-H") {
      hostnames = true;
    } else if (arg == "-c" && i + 1 < argc) {
      config_path = argv[++i];
    } else if (arg == "-i" && i + 2 < argc) {
      ip = argv[++i];
      port = std::atoi(argv[++i]);
    } else if ((arg == "-u" || arg == "--u") && i + 1 < argc) {
      unix_path = argv[++i];
    } else if (arg.starts_with("--u=") || arg.starts_with("-u=")) {
      unix_path = std::string(arg.substr(arg.find('=') + 1));
    } else if (arg == "-n" || arg == "-s" || arg == "-d" || arg == "-m" || arg == "-t") {
      fmt::print(stderr, "nvidia-imex-ctl: {} is not simulated\n", arg);
      return 2;
    } else {
      fmt::print(stderr, "nvidia-imex-ctl: unknown argument {:?}\n", arg);
      Usage(stderr);
      return 2;
    }
  }
  if (query == domain) {
    fmt::print(stderr, "nvidia-imex-ctl: give exactly one of -q and -N\n");
    Usage(stderr);
    return 2;
  }
  if (static_cast<int>(!config_path.empty()) + static_cast<int>(!ip.empty()) +
          static_cast<int>(!unix_path.empty()) > 1) {
    fmt::print(stderr, "nvidia-imex-ctl: only one of -i, -u, or -c can be specified\n");
    return 2;
  }
  const EnvOptions env = ReadEnvOptions();

  std::optional<ImexConfig> config;
  if (ip.empty() && unix_path.empty()) {
    if (config_path.empty()) config_path = kDefaultConfig;
    auto loaded = LoadImexConfig(config_path);
    if (!loaded.ok()) {
      fmt::print(stderr, "nvidia-imex-ctl: {}\n", loaded.status().ToString());
      return 1;
    }
    config = *std::move(loaded);
    if (!config->cmd_enabled || (config->cmd_port == 0 && config->cmd_unix_domain_path.empty())) {
      fmt::print(stderr, "nvidia-imex-ctl: the command service is not enabled in {}\n",
                 config_path);
      return 1;
    }
  }

  if (query) {
    CommandEndpoint endpoint;
    if (!unix_path.empty()) {
      endpoint.unix_path = unix_path;
    } else if (!ip.empty()) {
      if (port <= 0 || port > 65535) {
        fmt::print(stderr, "nvidia-imex-ctl: bad port\n");
        return 2;
      }
      endpoint.ip = ip;
      endpoint.port = static_cast<std::uint16_t>(port);
    } else if (config->cmd_port != 0) {
      endpoint.ip = config->cmd_bind_interface_ip.empty() ? "127.0.0.1"
                                                          : config->cmd_bind_interface_ip;
      endpoint.port = config->cmd_port;
    } else {
      endpoint.unix_path = config->cmd_unix_domain_path;
    }
    auto answer = RunCommand(endpoint, kQueryRequest, kTimeout);
    if (!answer.ok()) {
      fmt::print(stderr, "nvidia-imex-ctl: cannot reach the IMEX daemon: {}\n",
                 answer.status().message());
      return 1;
    }
    fmt::print("{}", *answer);
    return 0;
  }

  if (!config) {
    fmt::print(stderr, "nvidia-imex-ctl: -N requires the config file (-c)\n");
    return 2;
  }
  if (config->cmd_port == 0) {
    fmt::print(stderr, "nvidia-imex-ctl: -N needs IMEX_CMD_PORT to reach every node\n");
    return 1;
  }
  auto entries = LoadNodesConfig(config->node_config_file);
  if (!entries.ok()) {
    fmt::print(stderr, "nvidia-imex-ctl: {}\n", entries.status().ToString());
    return 1;
  }
  const Resolver resolver(env.hosts_file, env.use_system_resolver);
  DomainReport report;
  report.timestamp = Timestamp();
  for (const std::string& entry : *entries) {
    DomainRow row;
    row.entry = entry;
    row.address = resolver.Resolve(entry);
    if (row.address) {
      auto answer = RunCommand({*row.address, config->cmd_port, {}}, kStatusRequest, kTimeout);
      if (answer.ok()) {
        if (auto status = DecodeNodeStatus(*answer); status.ok()) row.status = *std::move(status);
      }
    }
    report.rows.push_back(std::move(row));
  }
  fmt::print("{}", json ? FormatDomainJson(report) : FormatDomainText(report, hostnames));
  return 0;
}
