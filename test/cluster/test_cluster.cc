#include "test_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#ifndef NVDRA_CLUSTER_BIN
#define NVDRA_CLUSTER_BIN ""
#endif

namespace nvdra::testing {
namespace {

using Clock = std::chrono::steady_clock;

void CloseFd(int& fd) {
  if (fd >= 0) {
    ::close(fd);
    fd = -1;
  }
}

// Waits for `pid` to end, at most `timeout`; returns its wait status, or
// nullopt if it is still running. Uses a pidfd, so the wait is an event.
std::optional<int> WaitPid(pid_t pid, std::chrono::milliseconds timeout) {
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    int rc;
    do {
      rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
    } while (rc < 0 && errno == EINTR);
    ::close(pidfd);
    if (rc == 0) return std::nullopt;
  }
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid, &status, pidfd >= 0 ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid) return status;
  return std::nullopt;
}

std::string ReadFileOrEmpty(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Forks and execs argv with the given fds as stdin/stdout/stderr (-1 means
// /dev/null). Returns the child's pid or -1.
pid_t Spawn(const std::vector<std::string>& argv, int in_fd, int out_fd, int err_fd) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  // Child: only async-signal-safe calls from here to exec.
  int devnull = ::open("/dev/null", O_RDWR);
  ::dup2(in_fd >= 0 ? in_fd : devnull, 0);
  ::dup2(out_fd >= 0 ? out_fd : devnull, 1);
  ::dup2(err_fd >= 0 ? err_fd : devnull, 2);
  for (int fd = 3; fd < 1024; ++fd) ::close(fd);
  ::execvp(args[0], args.data());
  ::_exit(127);
}

// Reads one line from `fd` (without the newline), byte by byte so nothing
// after it is consumed. Empty on EOF, error or after `timeout`.
std::string ReadLine(int fd, std::chrono::milliseconds timeout) {
  std::string line;
  const auto deadline = Clock::now() + timeout;
  char c;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    int rc = left > 0 ? ::poll(&p, 1, static_cast<int>(left)) : 0;
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return "";
    ssize_t r = ::read(fd, &c, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return "";
    if (c == '\n') return line;
    line.push_back(c);
  }
}

}  // namespace

CommandResult RunCommand(const std::vector<std::string>& argv, const std::string& input,
                         std::chrono::milliseconds timeout) {
  CommandResult result;
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0) return result;
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return result;
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return result;
  pid_t pid = Spawn(argv, in_pipe[0], out_pipe[1], err_pipe[1]);
  CloseFd(in_pipe[0]);
  CloseFd(out_pipe[1]);
  CloseFd(err_pipe[1]);
  if (pid < 0) {
    CloseFd(in_pipe[1]);
    CloseFd(out_pipe[0]);
    CloseFd(err_pipe[0]);
    result.err = std::string("fork: ") + std::strerror(errno);
    return result;
  }
  ::fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
  size_t written = 0;
  if (input.empty()) CloseFd(in_pipe[1]);
  const auto deadline = Clock::now() + timeout;
  bool timed_out = false;
  char buf[65536];
  while (out_pipe[0] >= 0 || err_pipe[0] >= 0) {
    pollfd fds[3];
    int n = 0;
    if (out_pipe[0] >= 0) fds[n++] = {out_pipe[0], POLLIN, 0};
    if (err_pipe[0] >= 0) fds[n++] = {err_pipe[0], POLLIN, 0};
    if (in_pipe[1] >= 0) fds[n++] = {in_pipe[1], POLLOUT, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    int rc = ::poll(fds, n, static_cast<int>(left));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) break;
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == in_pipe[1]) {
        ssize_t w = ::write(in_pipe[1], input.data() + written, input.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN) written = input.size();
        if (written == input.size()) CloseFd(in_pipe[1]);
        continue;
      }
      ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
      if (r > 0) {
        (fds[i].fd == out_pipe[0] ? result.out : result.err).append(buf, static_cast<size_t>(r));
      } else if (r == 0 || errno != EINTR) {
        CloseFd(fds[i].fd == out_pipe[0] ? out_pipe[0] : err_pipe[0]);
      }
    }
  }
  CloseFd(in_pipe[1]);
  CloseFd(out_pipe[0]);
  CloseFd(err_pipe[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  auto status = WaitPid(pid, std::chrono::seconds(10));
  if (!status) {
    ::kill(pid, SIGKILL);
    status = WaitPid(pid, std::chrono::seconds(10));
  }
  if (timed_out) {
    result.err += "\n(killed after " + std::to_string(timeout.count()) + " ms)";
  } else if (status && WIFEXITED(*status)) {
    result.exit_code = WEXITSTATUS(*status);
  }
  return result;
}

std::unique_ptr<TestCluster> TestCluster::Start(std::string* error, const std::string& bin_dir) {
  // A start can lose a race for a port with another process on this machine
  // (the launcher picks free ports, then the servers bind them); a fresh
  // attempt picks new ones. Every failed attempt is reported.
  constexpr int kAttempts = 3;
  std::string failures;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    std::string attempt_error;
    if (auto cluster = StartOnce(&attempt_error, bin_dir)) {
      if (!failures.empty()) std::fprintf(stderr, "TestCluster: started after failures:\n%s", failures.c_str());
      return cluster;
    }
    failures += "attempt " + std::to_string(attempt) + ": " + attempt_error + "\n";
    if (attempt_error.find("is missing") != std::string::npos) break;  // no retry can help
  }
  *error = failures;
  return nullptr;
}

std::unique_ptr<TestCluster> TestCluster::StartOnce(std::string* error, const std::string& bin_dir) {
  std::unique_ptr<TestCluster> cluster(new TestCluster());
  cluster->bin_dir_ = std::filesystem::path(bin_dir.empty() ? std::string(NVDRA_CLUSTER_BIN) : bin_dir);
  const auto launcher = cluster->bin_dir_ / "cluster-launcher";
  if (!std::filesystem::exists(launcher)) {
    *error = launcher.string() + " is missing: run scripts/setup (or test/cluster/build-tools)";
    return nullptr;
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/nvdra-cluster-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) {
    *error = "mkdtemp " + templ + ": " + std::strerror(errno);
    return nullptr;
  }
  cluster->dir_ = templ;
  const auto log_path = cluster->dir_ / "launcher.log";
  int log_fd = ::open(log_path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
  int out_pipe[2];
  if (log_fd < 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0) {
    *error = std::string("launcher log or pipe: ") + std::strerror(errno);
    return nullptr;
  }
  cluster->launcher_pid_ =
      Spawn({launcher.string(), "run", "--dir", cluster->dir_.string(), "--die-with-parent"}, -1, out_pipe[1], log_fd);
  ::close(out_pipe[1]);
  ::close(log_fd);

  // The launcher prints "ready <kubeconfig>" once the cluster takes
  // workloads; EOF before it means start-up failed. The pipe stays open for
  // the answers to RestartApiServer.
  cluster->launcher_out_ = out_pipe[0];
  std::string line = ReadLine(out_pipe[0], std::chrono::seconds(240));
  const std::string prefix = "ready ";
  if (line.rfind(prefix, 0) != 0) {
    cluster->Stop();
    *error = "control plane did not start; launcher log " + log_path.string() + ":\n" + ReadFileOrEmpty(log_path);
    // The folder goes with the failed attempt: keep the end of each
    // component's log in the message.
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(cluster->dir_ / "logs", ec)) {
      std::string text = ReadFileOrEmpty(entry.path());
      constexpr std::size_t kTail = 1500;
      if (text.size() > kTail) text = "..." + text.substr(text.size() - kTail);
      *error += "--- " + entry.path().filename().string() + " (end):\n" + text + "\n";
    }
    return nullptr;
  }
  cluster->kubeconfig_ = line.substr(prefix.size());
  return cluster;
}

TestCluster::~TestCluster() {
  Stop();
  if (!dir_.empty() && std::getenv("NVDRA_KEEP_CLUSTER_DIR") == nullptr) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

bool TestCluster::RestartApiServer(std::string* error, const std::vector<std::string>& extra_flags,
                                   std::chrono::milliseconds timeout) {
  if (launcher_pid_ <= 0 || launcher_out_ < 0) {
    *error = "the cluster is not running";
    return false;
  }
  // The launcher reads the extra flags when it gets SIGUSR1; always rewrite
  // the file so flags of an earlier restart do not stick.
  const auto args_path = dir_ / "apiserver-restart-args";
  const auto tmp_path = dir_ / "apiserver-restart-args.tmp";
  {
    std::ofstream out(tmp_path, std::ios::trunc);
    for (const auto& flag : extra_flags) out << flag << "\n";
    if (!out) {
      *error = "cannot write " + tmp_path.string();
      return false;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp_path, args_path, ec);
  if (ec) {
    *error = "rename " + tmp_path.string() + ": " + ec.message();
    return false;
  }
  if (::kill(launcher_pid_, SIGUSR1) != 0) {
    *error = std::string("signal the launcher: ") + std::strerror(errno);
    return false;
  }
  const std::string line = ReadLine(launcher_out_, timeout);
  if (line.rfind("apiserver-restarted ", 0) == 0) return true;
  *error = "kube-apiserver restart: " + (line.empty() ? std::string("no answer from the launcher") : line) +
           "; launcher log:\n" + ReadFileOrEmpty(dir_ / "launcher.log");
  return false;
}

void TestCluster::Stop() {
  CloseFd(launcher_out_);
  if (launcher_pid_ <= 0) return;
  ::kill(launcher_pid_, SIGTERM);
  if (!WaitPid(launcher_pid_, std::chrono::seconds(60))) {
    ::kill(launcher_pid_, SIGKILL);  // its servers die with it (PR_SET_PDEATHSIG)
    WaitPid(launcher_pid_, std::chrono::seconds(10));
  }
  launcher_pid_ = -1;
}

CommandResult TestCluster::Kubectl(const std::vector<std::string>& args, const std::string& input,
                                   std::chrono::milliseconds timeout) const {
  std::vector<std::string> argv = {(bin_dir_ / "kubectl").string(), "--kubeconfig", kubeconfig_.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, input, timeout);
}

CommandResult TestCluster::Apply(const nlohmann::json& object) const {
  return Kubectl({"apply", "-f", "-"}, object.dump());
}

std::optional<nlohmann::json> TestCluster::Get(const std::vector<std::string>& args) const {
  std::vector<std::string> full = {"get", "-o", "json"};
  full.insert(full.end(), args.begin(), args.end());
  auto r = Kubectl(full);
  if (!r.ok()) return std::nullopt;
  auto parsed = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return std::nullopt;
  return parsed;
}

void SaveMetricsScrape(const std::string& component, const std::string& body) {
  const char* dir = std::getenv("NVDRA_METRICS_SCRAPE_DIR");
  if (dir == nullptr || *dir == '\0') return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream out(std::filesystem::path(dir) / (component + ".prom"), std::ios::trunc);
  out << body;
}

int FreeLocalPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace nvdra::testing
