// The simulated nvidia-cuda-mps-control as processes, run the way the MPS
// control daemon pod's script runs it: `-d`, then commands piped into client
// invocations, against pipe and log folders in a temp folder.
//
// Waiting is on events: a client's or starter's exit and end of its output,
// the daemon's exit through a pidfd (the test is a child subreaper, so the
// daemon that `-d` leaves behind is reparented to it and can be reaped). Only
// `-f`, which announces nothing, is awaited by retrying a connect against a
// deadline.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using std::chrono::steady_clock;

const fs::path kBinary = fs::path(NVDRA_SIMMPS_DIR) / "nvidia-cuda-mps-control";
constexpr auto kDeadline = std::chrono::seconds(10);
const std::string kUuid = "GPU-a4f87852-c040-2818-e88b-bf8725dc5f6c";

struct RunResult {
  int exit_code = -1;  // -1: killed by a signal; -2: output not closed in time
  std::string out;
  std::string err;
};

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class SimMpsProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    // Daemons that `-d` leaves behind become our children: reapable, and
    // never left running by a failed test (TearDown kills them).
    ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    // A client that finds no daemon exits without reading its stdin; writing
    // that stdin must then fail with EPIPE, not kill the test.
    ::signal(SIGPIPE, SIG_IGN);
    // Short: a unix socket path has at most 107 bytes.
    root_ = fs::path("/tmp") / fmt::format("simmps-{}-{}", ::getpid(), counter_++);
    fs::remove_all(root_);
    pipe_dir_ = root_ / "pipe";
    log_dir_ = root_ / "log";
    fs::create_directories(pipe_dir_);
    fs::create_directories(log_dir_);
  }

  void TearDown() override {
    for (pid_t pid : daemons_) {
      if (::kill(pid, 0) == 0) ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  // Runs the binary with `args` and `input` on stdin; returns when it has
  // exited and closed its output (a daemon that kept the caller's stdout or
  // stderr would show as exit code -2 here).
  // With `own_process_group` the binary leads a process group of its own, as
  // a simulated container's program does.
  RunResult Run(const std::vector<std::string>& args, const std::string& input = "",
                bool own_process_group = false) {
    std::vector<std::string> env_text;
    for (char** e = environ; *e != nullptr; ++e) {
      if (!std::string_view(*e).starts_with("CUDA_MPS_")) env_text.emplace_back(*e);
    }
    env_text.push_back("CUDA_MPS_PIPE_DIRECTORY=" + pipe_dir_.string());
    env_text.push_back("CUDA_MPS_LOG_DIRECTORY=" + log_dir_.string());
    std::vector<char*> envp;
    for (auto& e : env_text) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_text = {kBinary.string()};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_text) argv.push_back(a.data());
    argv.push_back(nullptr);

    int in[2], out[2], err[2];
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
    const pid_t child = ::fork();
    if (child == 0) {
      if (own_process_group) ::setpgid(0, 0);
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    // Small input: fits the pipe, so writing before reading cannot block.
    // EPIPE is fine (see SetUp).
    if (::write(in[1], input.data(), input.size()) != static_cast<ssize_t>(input.size())) {
      EXPECT_EQ(errno, EPIPE) << std::strerror(errno);
    }
    ::close(in[1]);

    RunResult result;
    std::string* sinks[2] = {&result.out, &result.err};
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    const auto deadline = steady_clock::now() + kDeadline;
    int open = 2;
    while (open > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - steady_clock::now());
      if (left.count() <= 0) break;
      if (::poll(fds, 2, static_cast<int>(left.count())) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        char buffer[4096];
        const ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
        if (n > 0) {
          sinks[i]->append(buffer, static_cast<std::size_t>(n));
        } else {
          ::close(fds[i].fd);
          fds[i].fd = -1;
          --open;
        }
      }
    }
    for (auto& fd : fds) {
      if (fd.fd >= 0) ::close(fd.fd);
    }
    if (open > 0) ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    if (open > 0) {
      result.exit_code = -2;
    } else if (WIFEXITED(status)) {
      result.exit_code = WEXITSTATUS(status);
    }
    return result;
  }

  RunResult Client(const std::string& input) { return Run({}, input); }

  // Starts a background daemon; returns its pid (from its pid file).
  pid_t StartDaemon(const std::vector<std::string>& args = {"-d"}) {
    const RunResult started = Run(args);
    EXPECT_EQ(started.exit_code, 0) << started.err;
    EXPECT_THAT(started.out, IsEmpty());
    EXPECT_THAT(started.err, IsEmpty());
    const pid_t pid = DaemonPid();
    if (pid > 0) daemons_.push_back(pid);
    return pid;
  }

  [[nodiscard]] pid_t DaemonPid() const {
    return static_cast<pid_t>(std::atoi(ReadFile(PidFile()).c_str()));
  }

  // Waits (pidfd: an event, with a deadline) for our child `pid` to exit and
  // reaps it; its exit code, or -1.
  int WaitForExit(pid_t pid) {
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    EXPECT_GE(pidfd, 0) << std::strerror(errno);
    pollfd fd{pidfd, POLLIN, 0};
    const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(kDeadline);
    const int ready = ::poll(&fd, 1, static_cast<int>(timeout.count()));
    ::close(pidfd);
    EXPECT_EQ(ready, 1) << "pid " << pid << " did not exit";
    if (ready != 1) return -1;
    int status = 0;
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    std::erase(daemons_, pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  [[nodiscard]] fs::path Socket() const { return pipe_dir_ / "control"; }
  [[nodiscard]] fs::path PidFile() const { return pipe_dir_ / "nvidia-cuda-mps-control.pid"; }
  [[nodiscard]] fs::path StateFile() const { return pipe_dir_ / "simulated-mps-state.json"; }
  [[nodiscard]] fs::path ControlLog() const { return log_dir_ / "control.log"; }

  // control.log as (pid, message) pairs; every line must have the real format.
  [[nodiscard]] std::vector<std::pair<pid_t, std::string>> LogLines() const {
    static const std::regex kLine(
        R"(^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3} Control +(\d+)\] (.*)$)");
    std::vector<std::pair<pid_t, std::string>> out;
    std::istringstream text(ReadFile(ControlLog()));
    std::string line;
    while (std::getline(text, line)) {
      std::smatch match;
      EXPECT_TRUE(std::regex_match(line, match, kLine)) << line;
      if (match.empty()) continue;
      out.emplace_back(std::atoi(match[1].str().c_str()), match[2].str());
    }
    return out;
  }
  [[nodiscard]] std::vector<std::string> LogMessages() const {
    std::vector<std::string> out;
    for (auto& [pid, message] : LogLines()) out.push_back(message);
    return out;
  }

  static inline int counter_ = 0;
  fs::path root_, pipe_dir_, log_dir_;
  std::vector<pid_t> daemons_;
};

TEST_F(SimMpsProcess, BackgroundDaemonAnswersAsSoonAsStartReturns) {
  const pid_t pid = StartDaemon();
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(fs::is_socket(Socket()));
  EXPECT_EQ(::kill(pid, 0), 0);

  // The pod script's sequence, each an invocation of its own.
  RunResult r = Client("get_default_active_thread_percentage\n");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "100.0\n");
  r = Client("set_default_active_thread_percentage 50\n");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "50.0\n");
  EXPECT_THAT(r.err, IsEmpty());
  r = Client(fmt::format("set_default_device_pinned_mem_limit {} 10240M\n", kUuid));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "");
  r = Client("get_default_active_thread_percentage\n");
  EXPECT_EQ(r.out, "50.0\n");
  r = Client(fmt::format("get_default_device_pinned_mem_limit {}\n", kUuid));
  EXPECT_EQ(r.out, "10240M\n");

  // Several commands in one session, by index, blank lines skipped.
  r = Client(
      "set_default_device_pinned_mem_limit 1 2G\n\n"
      "get_default_device_pinned_mem_limit 1\nget_default_device_pinned_mem_limit 2\n"
      "get_server_list\n");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "2048M\n0\n");

  const auto state = nlohmann::json::parse(ReadFile(StateFile()));
  EXPECT_EQ(state, nlohmann::json::parse(fmt::format(
                       R"({{"multiUser": false, "defaultActiveThreadPercentage": 50.0,
                           "defaultDevicePinnedMemLimits": {{"{}": "10240M", "1": "2048M"}}}})",
                       kUuid)));

  const auto lines = LogLines();
  ASSERT_GE(lines.size(), 2U);
  for (const auto& [line_pid, message] : lines) EXPECT_EQ(line_pid, pid) << message;
  EXPECT_EQ(lines[0].second,
            fmt::format("Starting control daemon using socket {}", Socket().string()));
  EXPECT_EQ(lines[1].second,
            fmt::format("To connect CUDA applications to this daemon, set env "
                        "CUDA_MPS_PIPE_DIRECTORY={}",
                        pipe_dir_.string()));
  // One client's session, as the real daemon logs it.
  const std::vector<std::string> messages = LogMessages();
  const std::vector<std::string> session = {
      "Accepting connection...", "NEW UI", "Cmd:set_default_active_thread_percentage 50",
      "50.0", "UI closed"};
  EXPECT_NE(std::search(messages.begin(), messages.end(), session.begin(), session.end()),
            messages.end())
      << ReadFile(ControlLog());
  EXPECT_THAT(messages, Contains(fmt::format("Cmd:set_default_device_pinned_mem_limit {} 10240M",
                                             kUuid)));
}

TEST_F(SimMpsProcess, SecondDaemonOnTheSamePipeFolderIsRefused) {
  const pid_t pid = StartDaemon();
  ASSERT_GT(pid, 0);
  for (const char* mode : {"-d", "-f"}) {
    const RunResult second = Run({mode});
    EXPECT_EQ(second.exit_code, 1) << mode;
    EXPECT_THAT(second.err, HasSubstr("An instance of this daemon is already running")) << mode;
  }
  EXPECT_EQ(DaemonPid(), pid);
  EXPECT_EQ(Client("get_default_active_thread_percentage\n").out, "100.0\n");
}

TEST_F(SimMpsProcess, ClientWithoutDaemonFailsAndAStaleSocketIsReplaced) {
  RunResult r = Client("get_default_active_thread_percentage\n");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("Cannot find MPS control daemon process"));
  EXPECT_THAT(r.out, IsEmpty());

  // A socket file that nobody listens on, as a killed daemon leaves it.
  {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strcpy(address.sun_path, Socket().c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ::close(fd);
  }
  r = Client("get_server_list\n");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("Cannot find MPS control daemon process"));

  ASSERT_GT(StartDaemon(), 0);
  r = Client("get_server_list\n");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, IsEmpty());
}

TEST_F(SimMpsProcess, QuitRemovesSocketAndPidFileBeforeTheClientReturns) {
  const pid_t pid = StartDaemon();
  ASSERT_GT(pid, 0);
  const RunResult r = Client("quit\n");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, IsEmpty());
  EXPECT_FALSE(fs::exists(Socket()));
  EXPECT_FALSE(fs::exists(PidFile()));
  EXPECT_EQ(WaitForExit(pid), 0);
  EXPECT_THAT(LogMessages(), Contains("Cmd:quit"));
  EXPECT_THAT(LogMessages(), Contains("Shutting down control daemon"));
  EXPECT_EQ(Client("get_server_list\n").exit_code, 1);
  // The state file stays for the host's tests.
  EXPECT_TRUE(fs::exists(StateFile()));

  // The folder is free again; the log is appended to.
  const pid_t again = StartDaemon();
  ASSERT_GT(again, 0);
  EXPECT_NE(again, pid);
  const auto lines = LogLines();
  EXPECT_EQ(lines.front().first, pid);
  EXPECT_EQ(lines.back().first, again);
}

TEST_F(SimMpsProcess, SigtermStopsTheDaemonCleanly) {
  const pid_t pid = StartDaemon();
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  EXPECT_EQ(WaitForExit(pid), 0);
  EXPECT_FALSE(fs::exists(Socket()));
  EXPECT_FALSE(fs::exists(PidFile()));
  EXPECT_THAT(LogMessages(), Contains("Shutting down control daemon"));
}

// Simulated containers are stopped by signalling their process group (there
// is no PID namespace to take the daemon down): the daemon must be in it.
TEST_F(SimMpsProcess, DaemonStopsWithItsCallersProcessGroup) {
  const RunResult started = Run({"-d"}, "", /*own_process_group=*/true);
  ASSERT_EQ(started.exit_code, 0) << started.err;
  const pid_t pid = DaemonPid();
  ASSERT_GT(pid, 0);
  daemons_.push_back(pid);
  const pid_t group = ::getpgid(pid);
  EXPECT_NE(group, ::getpgid(0));
  ASSERT_EQ(::kill(-group, SIGTERM), 0);
  EXPECT_EQ(WaitForExit(pid), 0);
  EXPECT_FALSE(fs::exists(Socket()));
}

TEST_F(SimMpsProcess, MultiUserIsRecordedAndMissingFoldersAreCreated) {
  pipe_dir_ = root_ / "new" / "pipe";
  log_dir_ = root_ / "new" / "log";
  const pid_t pid = StartDaemon({"-M", "-d"});
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(fs::exists(ControlLog()));
  auto state = nlohmann::json::parse(ReadFile(StateFile()));
  EXPECT_EQ(state["multiUser"], true);
  EXPECT_TRUE(state["defaultActiveThreadPercentage"].is_null());
  EXPECT_EQ(state["defaultDevicePinnedMemLimits"], nlohmann::json::object());
}

TEST_F(SimMpsProcess, CommandErrorsAreAnswersNotFailures) {
  ASSERT_GT(StartDaemon(), 0);
  const RunResult r = Client(
      "frobnicate\nset_default_active_thread_percentage 150\n"
      "set_default_device_pinned_mem_limit 0 10GB\nget_default_active_thread_percentage\n");
  EXPECT_EQ(r.exit_code, 0);
  std::vector<std::string> lines;
  std::istringstream out(r.out);
  for (std::string line; std::getline(out, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4U) << r.out;
  EXPECT_THAT(lines[0], HasSubstr("frobnicate"));
  EXPECT_THAT(lines[1], HasSubstr("set_default_active_thread_percentage <percentage>"));
  EXPECT_THAT(lines[2], HasSubstr("set_default_device_pinned_mem_limit <device"));
  EXPECT_EQ(lines[3], "100.0");
}

TEST_F(SimMpsProcess, ForegroundDaemonStopsOnSigint) {
  const std::string pipe_env = "CUDA_MPS_PIPE_DIRECTORY=" + pipe_dir_.string();
  const std::string log_env = "CUDA_MPS_LOG_DIRECTORY=" + log_dir_.string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Not ctest's output: a daemon left behind by a failed test would keep
    // ctest waiting for end-of-file.
    const int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::putenv(const_cast<char*>(pipe_env.c_str()));
    ::putenv(const_cast<char*>(log_env.c_str()));
    ::execl(kBinary.c_str(), kBinary.c_str(), "-f", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  daemons_.push_back(pid);
  // -f announces nothing: retry until it answers, against a deadline.
  const auto deadline = steady_clock::now() + kDeadline;
  RunResult r;
  do {
    r = Client("get_default_active_thread_percentage\n");
    if (r.exit_code == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (steady_clock::now() < deadline);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "100.0\n");
  EXPECT_EQ(DaemonPid(), pid);
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  EXPECT_EQ(WaitForExit(pid), 0);
  EXPECT_FALSE(fs::exists(Socket()));
}

TEST_F(SimMpsProcess, BadOptionsFail) {
  EXPECT_EQ(Run({"-x"}).exit_code, 1);
  EXPECT_EQ(Run({"-d", "-f"}).exit_code, 1);
  EXPECT_EQ(Run({"-M"}).exit_code, 1);
  const RunResult help = Run({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("nvidia-cuda-mps-control"));
}

}  // namespace
