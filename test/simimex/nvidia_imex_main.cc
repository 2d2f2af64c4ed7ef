// nvidia-imex (simulated): `nvidia-imex -c <config>`; see daemon.h and README.md.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "daemon.h"
#include "env_options.h"
#include "imex_config.h"

namespace {

constexpr std::string_view kDefaultConfig = "/etc/nvidia-imex/config.cfg";

void Usage(std::FILE* out) {
  fmt::print(out,
             "Usage: nvidia-imex [-c <config file>]\n"
             "  -c <path>   configuration file (default {})\n"
             "  -h, --help  this text\n"
             "  --version   print the version\n"
             "Simulated IMEX daemon for tests (nvdra test/simimex).\n",
             kDefaultConfig);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace nvdra::simimex;
  std::string config_path(kDefaultConfig);
  const EnvOptions env = ReadEnvOptions();
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      Usage(stdout);
      return 0;
    }
    if (arg == "--version" || arg == "-v") {
      fmt::print("nvidia-imex (simulated) {}\n", env.version);
      return 0;
    }
    if (arg == "-c" && i + 1 < argc) {
      config_path = argv[++i];
    } else if (arg.starts_with("-c") && arg.size() > 2) {
      config_path = std::string(arg.substr(arg[2] == '=' ? 3 : 2));
    } else {
      fmt::print(stderr, "nvidia-imex: unknown argument {:?}\n", arg);
      Usage(stderr);
      return 2;
    }
  }

  auto config = LoadImexConfig(config_path);
  if (!config.ok()) {
    fmt::print(stderr, "nvidia-imex: {}\n", config.status().ToString());
    return 1;
  }
  if (config->enable_auth_encryption) {
    fmt::print(stderr, "nvidia-imex: IMEX_ENABLE_AUTH_ENCRYPTION=1 is not simulated\n");
    return 1;
  }

  if (env.start_delay.count() > 0) std::this_thread::sleep_for(env.start_delay);
  // Blocked before anything else runs, so the daemon's signalfd sees them.
  sigset_t mask;
  sigemptyset(&mask);
  for (const int s : {SIGTERM, SIGINT, SIGQUIT, SIGUSR1, SIGHUP}) sigaddset(&mask, s);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  signal(SIGPIPE, SIG_IGN);

  DaemonOptions options;
  options.config = *std::move(config);
  options.hosts_file = env.hosts_file;
  options.use_system_resolver = env.use_system_resolver;
  options.ready_delay = env.ready_delay;
  options.sigusr1_min_interval = env.sigusr1_min_interval;
  options.version = env.version;
  const bool daemonize = options.config.daemonize;
  auto daemon = Daemon::Start(std::move(options));
  if (!daemon.ok()) {
    fmt::print(stderr, "nvidia-imex: {}\n", daemon.status().ToString());
    return 1;
  }
  // DAEMONIZE=1 (the vendor default): the parent returns once the listeners
  // are bound, as a forking service does.
  if (daemonize) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("nvidia-imex: fork");
      return 1;
    }
    if (pid > 0) _exit(0);
    setsid();
  }
  return (*daemon)->Run();
}
