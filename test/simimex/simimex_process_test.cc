// The simulated IMEX as processes: daemons on distinct loopback addresses form
// a domain; nvidia-imex-ctl answers as the quorum rule says; peers are killed,
// restarted, reloaded with SIGUSR1 and named through a hosts file.
//
// Readiness lives in other processes, so tests poll `nvidia-imex-ctl` (as the
// daemon pod's probe does) against a deadline; no fixed sleeps.

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using std::chrono::milliseconds;

const fs::path kBinDir = NVDRA_SIMIMEX_DIR;

struct CtlResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together, as the daemon's check reads it
};

std::uint16_t FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

// A set of simulated nodes in a temp folder; stops every daemon it started.
class Domain {
 public:
  Domain(int count, std::string quorum, std::map<std::string, std::string> env = {})
      : quorum_(std::move(quorum)), env_(std::move(env)) {
    // A /24 of our own in 127.220-249.x.y: away from simnode's 127.10/127.20+ ranges.
    const int pid = static_cast<int>(::getpid());
    subnet_ = fmt::format("127.{}.{}", 220 + pid % 30, (pid / 30) % 256);
    dir_ = fs::temp_directory_path() / fmt::format("simimex-{}-{}", pid, counter_++);
    fs::create_directories(dir_);
    server_port_ = FreePort();
    cmd_port_ = FreePort();
    for (int i = 0; i < count; ++i) entries_.push_back(Ip(i));
    WriteNodes(entries_);
    for (int i = 0; i < count; ++i) WriteConfig(i);
  }
  ~Domain() {
    for (auto& [i, pid] : pids_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  [[nodiscard]] std::string Ip(int i) const { return fmt::format("{}.{}", subnet_, i + 2); }
  [[nodiscard]] fs::path Config(int i) const { return dir_ / fmt::format("node{}.cfg", i); }
  [[nodiscard]] fs::path Log(int i) const { return dir_ / fmt::format("node{}.log", i); }
  [[nodiscard]] const fs::path& dir() const { return dir_; }

  void WriteNodes(const std::vector<std::string>& entries) {
    std::ofstream out(dir_ / "nodes.cfg.tmp");
    for (const auto& e : entries) out << e << "\n";
    out.close();
    fs::rename(dir_ / "nodes.cfg.tmp", dir_ / "nodes.cfg");
  }

  void WriteConfig(int i, const std::string& extra = "") {
    std::ofstream(Config(i)) << fmt::format(
        "LOG_LEVEL=4\nLOG_FILE_NAME={}\nDAEMONIZE=0\nBIND_INTERFACE_IP=\nSERVER_PORT={}\n"
        "IMEX_NODE_CONFIG_FILE={}\nIMEX_WAIT_FOR_QUORUM={}\nIMEX_ENABLE_AUTH_ENCRYPTION=0\n"
        "IMEX_CMD_ENABLED=1\nIMEX_CMD_BIND_INTERFACE_IP={}\nIMEX_CMD_PORT={}\n"
        "IMEX_NODE_DISCONNECTED_GRACE_TIME=-1\n{}",
        Log(i).string(), server_port_, (dir_ / "nodes.cfg").string(), quorum_, Ip(i), cmd_port_,
        extra);
  }

  void Start(int i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      for (const auto& [k, v] : env_) ::setenv(k.c_str(), v.c_str(), 1);
      const std::string bin = (kBinDir / "nvidia-imex").string();
      const std::string cfg = Config(i).string();
      ::execl(bin.c_str(), bin.c_str(), "-c", cfg.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    pids_[i] = pid;
  }
  void StartAll(int count) {
    for (int i = 0; i < count; ++i) Start(i);
  }

  void Signal(int i, int sig) { ::kill(pids_.at(i), sig); }
  // Kills node i and reaps it; returns its exit status as waitpid reports it.
  int Stop(int i, int sig) {
    const pid_t pid = pids_.at(i);
    ::kill(pid, sig);
    int status = 0;
    ::waitpid(pid, &status, 0);
    pids_.erase(i);
    return status;
  }

  CtlResult Ctl(int i, const std::string& args) const {
    std::string command = fmt::format("{} {} 2>&1", (kBinDir / "nvidia-imex-ctl").string(), args);
    for (const auto& [k, v] : env_) command = fmt::format("{}='{}' {}", k, v, command);
    CtlResult result;
    (void)i;
    FILE* pipe = ::popen(command.c_str(), "r");
    char buffer[4096];
    std::size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
    const int status = ::pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
  }
  CtlResult Query(int i) const { return Ctl(i, "-c " + Config(i).string() + " -q"); }
  CtlResult Nodes(int i) const { return Ctl(i, "-c " + Config(i).string() + " -N"); }

 private:
  static inline int counter_ = 0;
  std::string quorum_;
  std::map<std::string, std::string> env_;
  std::string subnet_;
  fs::path dir_;
  std::uint16_t server_port_ = 0;
  std::uint16_t cmd_port_ = 0;
  std::vector<std::string> entries_;
  std::map<int, pid_t> pids_;
};

// Polls `probe` until it returns true or `deadline` passes.
bool Eventually(const std::function<bool()>& probe, milliseconds deadline = milliseconds(10000)) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < end) {
    if (probe()) return true;
    std::this_thread::sleep_for(milliseconds(20));  // poll interval, not a synchronisation
  }
  return probe();
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool AllAnswer(const Domain& d, const std::vector<int>& nodes, const std::string& output) {
  for (const int i : nodes) {
    const CtlResult r = d.Query(i);
    if (r.exit_code != 0 || r.output != output) return false;
  }
  return true;
}

TEST(SimImexDomain, FullQuorumFourNodesReadyLoseReadinessOnPeerKillAndRecoverOnRestart) {
  Domain d(4, "FULL");
  d.StartAll(4);
  ASSERT_TRUE(Eventually([&] { return AllAnswer(d, {0, 1, 2, 3}, "READY\n"); }))
      << d.Query(0).output << ReadFile(d.Log(0));
  const CtlResult table = d.Nodes(1);
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_THAT(table.output, HasSubstr(fmt::format("Node #3   - {:<15} - READY", d.Ip(3))));
  EXPECT_THAT(table.output, HasSubstr("       3        C   C   C   C  \n"));
  EXPECT_THAT(table.output, HasSubstr("Domain State: UP\n")) << table.output;

  EXPECT_TRUE(WIFSIGNALED(d.Stop(3, SIGKILL)));
  EXPECT_TRUE(Eventually([&] { return AllAnswer(d, {0, 1, 2}, "WAITING_FOR_PEERS\n"); }))
      << d.Query(0).output;
  const CtlResult dead = d.Query(3);
  EXPECT_EQ(dead.exit_code, 1);
  EXPECT_THAT(dead.output, HasSubstr("cannot reach the IMEX daemon"));
  const CtlResult degraded = d.Nodes(0);
  EXPECT_THAT(degraded.output, HasSubstr(fmt::format("Node #3   - {:<15} - UNAVAILABLE", d.Ip(3))));
  EXPECT_THAT(degraded.output, HasSubstr("       0        C   C   C   R  \n")) << degraded.output;
  EXPECT_THAT(degraded.output, HasSubstr("Domain State: DEGRADED\n"));

  d.Start(3);
  EXPECT_TRUE(Eventually([&] { return AllAnswer(d, {0, 1, 2, 3}, "READY\n"); }))
      << d.Query(0).output;
}

TEST(SimImexDomain, RecoveryQuorumStaysReadyWhenPeersGoAndShowsRecoveringOrDisconnected) {
  Domain d(3, "RECOVERY");
  d.StartAll(3);
  ASSERT_TRUE(Eventually([&] {
    return AllAnswer(d, {0, 1, 2}, "READY\n") &&
           d.Nodes(0).output.find("Domain State: UP") != std::string::npos;
  })) << d.Nodes(0).output;

  // SIGKILL: no goodbye, so the others keep the node as Recovering (grace -1).
  d.Stop(2, SIGKILL);
  ASSERT_TRUE(Eventually([&] {
    return d.Nodes(0).output.find("       0        C   C   R  \n") != std::string::npos;
  })) << d.Nodes(0).output;
  EXPECT_TRUE(AllAnswer(d, {0, 1}, "READY\n"));

  // SIGTERM: a clean stop says goodbye, so the others show it Disconnected.
  EXPECT_EQ(d.Stop(1, SIGTERM), 0);
  EXPECT_TRUE(Eventually([&] {
    return d.Nodes(0).output.find("       0        C   D   R  \n") != std::string::npos;
  })) << d.Nodes(0).output;
  EXPECT_TRUE(AllAnswer(d, {0}, "READY\n"));
  EXPECT_THAT(ReadFile(d.Log(1)), HasSubstr("Shutting down"));
}

TEST(SimImexDomain, SigusrOneRereadsTheNodesFileAndJoinsANewNode) {
  Domain d(4, "FULL", {{"SIMIMEX_SIGUSR1_MIN_INTERVAL_MS", "0"}});
  d.WriteNodes({d.Ip(0), d.Ip(1), d.Ip(2)});
  d.StartAll(3);
  ASSERT_TRUE(Eventually([&] { return AllAnswer(d, {0, 1, 2}, "READY\n"); }));

  d.WriteNodes({d.Ip(0), d.Ip(1), d.Ip(2), d.Ip(3)});
  d.Start(3);
  // The old three still run on the old file: the new node's map differs.
  ASSERT_TRUE(Eventually([&] {
    return d.Nodes(3).output.find("       3        !M! !M! !M! C") != std::string::npos;
  })) << d.Nodes(3).output;
  EXPECT_EQ(d.Query(3).output, "WAITING_FOR_PEERS\n");
  EXPECT_TRUE(AllAnswer(d, {0, 1, 2}, "READY\n"));

  for (int i = 0; i < 3; ++i) d.Signal(i, SIGUSR1);
  EXPECT_TRUE(Eventually([&] {
    return AllAnswer(d, {0, 1, 2, 3}, "READY\n") &&
           d.Nodes(0).output.find("Domain State: UP") != std::string::npos;
  })) << d.Nodes(0).output;
  EXPECT_THAT(ReadFile(d.Log(0)), HasSubstr("SIGUSR1: nodes file changed (4 entries"));
}

TEST(SimImexDomain, RepeatedSigusrOneWithinTheWindowIsIgnored) {
  Domain d(1, "NONE");
  d.StartAll(1);
  ASSERT_TRUE(Eventually([&] { return AllAnswer(d, {0}, "READY\n"); }));
  d.Signal(0, SIGUSR1);
  ASSERT_TRUE(Eventually([&] {
    return ReadFile(d.Log(0)).find("SIGUSR1: restarting") != std::string::npos;
  }));
  d.Signal(0, SIGUSR1);
  EXPECT_TRUE(Eventually([&] {
    return ReadFile(d.Log(0)).find("SIGUSR1 ignored") != std::string::npos;
  })) << ReadFile(d.Log(0));
}

TEST(SimImexDomain, DnsNamesThroughTheHostsFileIncludingNamesMappedLater) {
  const fs::path hosts = fs::temp_directory_path() / fmt::format("simimex-hosts-{}", ::getpid());
  Domain d(4, "FULL", {{"SIMIMEX_HOSTS_FILE", hosts.string()}});
  // Upstream's DNS-names mode: a static list of names, more than there are daemons.
  std::vector<std::string> names;
  for (int i = 0; i < 6; ++i) names.push_back(fmt::format("compute-domain-daemon-{:04}", i));
  d.WriteNodes(names);
  auto write_hosts = [&](int mapped) {
    std::string text = "127.0.0.1\tlocalhost\n# Compute Domain Daemon mappings\n";
    for (int i = 0; i < mapped; ++i) text += fmt::format("{}\t{}\n", d.Ip(i), names[static_cast<std::size_t>(i)]);
    std::ofstream(hosts.string() + ".tmp") << text;
    fs::rename(hosts.string() + ".tmp", hosts);
  };
  write_hosts(3);
  d.StartAll(3);
  ASSERT_TRUE(Eventually([&] { return AllAnswer(d, {0, 1, 2}, "READY\n"); }))
      << d.Nodes(0).output << ReadFile(d.Log(0));
  const std::string table = d.Ctl(0, "-c " + d.Config(0).string() + " -N -H").output;
  EXPECT_THAT(table, HasSubstr(fmt::format("{} (compute-domain-daemon-0002)", d.Ip(2))));
  EXPECT_THAT(table, HasSubstr("Domain State: UP"));

  // A fourth daemon: mapped, then signalled as upstream's daemon does.
  write_hosts(4);
  d.Start(3);
  for (int i = 0; i < 3; ++i) d.Signal(i, SIGUSR1);
  EXPECT_TRUE(Eventually([&] { return AllAnswer(d, {0, 1, 2, 3}, "READY\n"); }))
      << d.Nodes(0).output;
  EXPECT_THAT(d.Nodes(1).output, HasSubstr("       1        C   C   C   C   N   N  \n"));
  fs::remove(hosts);
}

TEST(SimImexDomain, ReadyDelayFaultHookHoldsInitializing) {
  Domain d(1, "RECOVERY", {{"SIMIMEX_READY_DELAY_MS", "1500"}});
  d.StartAll(1);
  ASSERT_TRUE(Eventually([&] { return d.Query(0).exit_code == 0; }));
  EXPECT_EQ(d.Query(0).output, "INITIALIZING\n");
  EXPECT_TRUE(Eventually([&] { return AllAnswer(d, {0}, "READY\n"); }));
}

TEST(SimImexDomain, UnixSocketAndExplicitAddressQueries) {
  Domain d(1, "NONE");
  const fs::path socket = d.dir() / "imex_ctrl.sock";
  d.WriteConfig(0, "IMEX_CMD_UNIX_DOMAIN_PATH=" + socket.string() + "\n");
  d.StartAll(1);
  ASSERT_TRUE(Eventually([&] { return AllAnswer(d, {0}, "READY\n"); }));
  const CtlResult by_socket = d.Ctl(0, "-q --u=" + socket.string());
  EXPECT_EQ(by_socket.exit_code, 0);
  EXPECT_EQ(by_socket.output, "READY\n");
}

TEST(SimImexDomain, NoOwnEntryInTheNodesFileIsAStartError) {
  Domain d(2, "NONE");
  d.WriteNodes({d.Ip(1)});
  d.Start(0);
  const int status = d.Stop(0, 0);  // signal 0: just reap it when it exits
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
}

TEST(SimImexDomain, CtlWithoutADaemonExitsOneAndBadArgumentsExitTwo) {
  Domain d(1, "NONE");
  const CtlResult r = d.Query(0);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output, "READY\n");
  EXPECT_EQ(d.Ctl(0, "-q -N").exit_code, 2);
  EXPECT_EQ(d.Ctl(0, "--bogus").exit_code, 2);
}

}  // namespace
