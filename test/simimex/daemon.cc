#include "daemon.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <list>
#include <optional>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "common/unique_fd.h"
#include "net.h"
#include "protocol.h"

namespace nvdra::simimex {
namespace {

using Clock = std::chrono::steady_clock;
using common::UniqueFd;
using std::chrono::milliseconds;

constexpr milliseconds kInitialBackoff{50};
constexpr milliseconds kMaxBackoff{1000};

// IMEX log lines look like "[Dec 30 2025 00:11:39] [INFO] [tid 42] text".
class Logger {
 public:
  Logger(int level, std::FILE* out) : level_(level), out_(out) {}
  void Log(int level, std::string_view text) const {
    if (level > level_ || out_ == nullptr) return;
    static constexpr const char* kNames[] = {"", "CRITICAL", "ERROR", "WARNING", "INFO"};
    char when[64] = {};
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    ::localtime_r(&now, &tm);
    std::strftime(when, sizeof(when), "%b %d %Y %H:%M:%S", &tm);
    fmt::print(out_, "[{}] [{}] [tid {}] {}\n", when, kNames[level], ::getpid(), text);
    std::fflush(out_);
  }
  void Info(std::string_view text) const { Log(4, text); }
  void Warn(std::string_view text) const { Log(3, text); }
  void Error(std::string_view text) const { Log(2, text); }

 private:
  int level_;
  std::FILE* out_;
};

std::string RandomInstanceId() {
  std::random_device device;
  return fmt::format("{:08x}{:08x}", device(), device());
}

// Splits complete lines off the front of `buffer`.
std::vector<std::string> TakeLines(std::string& buffer) {
  std::vector<std::string> lines;
  for (auto nl = buffer.find('\n'); nl != std::string::npos; nl = buffer.find('\n')) {
    std::string line = buffer.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    buffer.erase(0, nl + 1);
  }
  return lines;
}

// Reads what is there. False on EOF or a hard error.
bool ReadAvailable(int fd, std::string& buffer) {
  char chunk[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n > 0) {
      buffer.append(chunk, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) return false;
    return errno == EAGAIN || errno == EINTR;
  }
}

// Small messages only: they fit the socket buffer of a fresh connection.
void SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace

struct Daemon::Impl {
  enum class Phase { kIdle, kConnecting, kAwaitingAck, kUp };
  struct Peer {
    int index = 0;
    std::string entry;
    std::optional<std::string> address;  // last resolution
    UniqueFd fd;
    Phase phase = Phase::kIdle;
    ConnState state = ConnState::kNeverConnected;
    bool said_bye = false;
    Clock::time_point next_attempt{};
    milliseconds backoff = kInitialBackoff;
    std::optional<Clock::time_point> cleanup_at;  // R becomes D then
    std::string buffer;
  };
  struct Inbound {
    UniqueFd fd;
    std::string buffer;
    bool greeted = false;
    bool dead = false;
  };
  struct CommandConn {
    UniqueFd fd;
    std::string buffer;
    bool dead = false;
  };

  DaemonOptions options;
  Logger log;
  std::FILE* log_file = nullptr;  // owned when LOG_FILE_NAME is set
  Resolver resolver;
  std::string instance = RandomInstanceId();
  std::vector<std::string> entries;
  std::string key;
  int own_index = -1;
  std::string own_address;
  std::vector<Peer> peers;  // one per entry; peers[own_index] is unused
  UniqueFd peer_listener;
  UniqueFd command_tcp;
  UniqueFd command_unix;
  UniqueFd signal_fd;
  std::list<Inbound> inbound;
  std::list<CommandConn> commands;
  Clock::time_point ready_at;
  std::optional<Clock::time_point> last_reload;
  bool shutting_down = false;
  DaemonState logged_state = DaemonState::kUnavailable;

  Impl(DaemonOptions opts, std::FILE* log_out)
      : options(std::move(opts)),
        log(options.config.log_level, log_out),
        log_file(log_out == stderr ? nullptr : log_out),
        resolver(options.hosts_file, options.use_system_resolver) {}
  ~Impl() {
    if (log_file != nullptr) std::fclose(log_file);
  }

  [[nodiscard]] DaemonState State(Clock::time_point now) const {
    if (shutting_down) return DaemonState::kShuttingDown;
    if (now < ready_at) return DaemonState::kInitializing;
    if (options.config.wait_for_quorum == QuorumMode::kFull) {
      for (const Peer& peer : peers) {
        if (peer.index == own_index || !peer.address) continue;
        if (peer.state != ConnState::kConnected) return DaemonState::kWaitingForPeers;
      }
    }
    return DaemonState::kReady;
  }

  [[nodiscard]] NodeStatus Status(Clock::time_point now) const {
    NodeStatus status;
    status.state = State(now);
    status.index = own_index;
    status.host = own_address;
    status.version = options.version;
    for (const Peer& peer : peers) {
      if (peer.index == own_index) {
        status.connections.push_back(ConnState::kConnected);  // to itself, as the real table
      } else {
        status.connections.push_back(peer.state);
      }
    }
    return status;
  }

  // Returns the index of the entry that is this node, or -1.
  int FindOwnIndex(const std::vector<std::optional<std::string>>& resolved) const {
    auto find = [&](const std::string& address) {
      for (std::size_t i = 0; i < resolved.size(); ++i) {
        if (resolved[i] == address) return static_cast<int>(i);
      }
      return -1;
    };
    const ImexConfig& c = options.config;
    if (!c.bind_interface_ip.empty()) {
      return find(CanonicalAddress(c.bind_interface_ip).value_or(c.bind_interface_ip));
    }
    if (!c.cmd_bind_interface_ip.empty()) {
      if (const int i = find(CanonicalAddress(c.cmd_bind_interface_ip)
                                 .value_or(c.cmd_bind_interface_ip));
          i >= 0) {
        return i;
      }
    }
    const auto local = LocalInterfaceAddresses();
    for (std::size_t i = 0; i < resolved.size(); ++i) {
      if (resolved[i] && local.contains(*resolved[i])) return static_cast<int>(i);
    }
    return -1;
  }

  void SetEntries(std::vector<std::string> new_entries,
                  const std::vector<std::optional<std::string>>& resolved, int index,
                  Clock::time_point now) {
    entries = std::move(new_entries);
    key = NodesConfigKey(entries);
    own_index = index;
    peers.clear();
    peers.resize(entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i) {
      peers[i].index = static_cast<int>(i);
      peers[i].entry = entries[i];
      peers[i].address = resolved[i];
      peers[i].next_attempt = now;
    }
  }

  void Schedule(Peer& peer, Clock::time_point now) {
    peer.fd.Reset();
    peer.phase = Phase::kIdle;
    peer.buffer.clear();
    peer.next_attempt = now + peer.backoff;
    peer.backoff = std::min(peer.backoff * 2, kMaxBackoff);
  }

  void SetConn(Peer& peer, ConnState state) {
    if (peer.state == state) return;
    log.Info(fmt::format("Connection to node {} ({}) is now {}", peer.index,
                         peer.address.value_or(peer.entry), ConnStateJsonName(state)));
    peer.state = state;
  }

  void Attempt(Peer& peer, Clock::time_point now) {
    peer.address = resolver.Resolve(peer.entry);
    if (!peer.address) {
      Schedule(peer, now);
      return;
    }
    auto fd = StartConnect(*peer.address, options.config.server_port);
    if (!fd.ok()) {
      Schedule(peer, now);
      return;
    }
    peer.fd = std::move(fd).value();
    peer.phase = Phase::kConnecting;
  }

  void Lost(Peer& peer, Clock::time_point now) {
    if (peer.phase == Phase::kUp) {
      const int grace = options.config.node_disconnected_grace_time;
      if (peer.said_bye || grace == 0) {
        SetConn(peer, ConnState::kDisconnected);
      } else {
        SetConn(peer, ConnState::kRecovering);
        if (grace > 0) peer.cleanup_at = now + std::chrono::seconds(grace);
      }
    }
    peer.said_bye = false;
    Schedule(peer, now);
  }

  void OnPeerWritable(Peer& peer, Clock::time_point now) {
    int error = 0;
    socklen_t length = sizeof(error);
    ::getsockopt(peer.fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) {
      Lost(peer, now);
      return;
    }
    SendAll(peer.fd.get(), EncodeHello({options.version, key, own_index, own_address, instance}));
    peer.phase = Phase::kAwaitingAck;
  }

  void OnPeerReadable(Peer& peer, Clock::time_point now) {
    const bool open = ReadAvailable(peer.fd.get(), peer.buffer);
    for (const std::string& line : TakeLines(peer.buffer)) {
      if (line.starts_with(kAckPrefix)) {
        peer.phase = Phase::kUp;
        peer.backoff = kInitialBackoff;
        peer.cleanup_at.reset();
        SetConn(peer, ConnState::kConnected);
      } else if (line == kNakMap || line == kNakVersion) {
        log.Error(fmt::format("Node {} ({}) refused the connection: {}", peer.index,
                              peer.address.value_or(peer.entry),
                              line == kNakMap ? "node configuration mapping mismatch"
                                              : "version mismatch"));
        SetConn(peer, line == kNakMap ? ConnState::kMapMismatch : ConnState::kVersionMismatch);
        Schedule(peer, now);
        return;
      } else if (line == kBye) {
        peer.said_bye = true;
      }
    }
    if (!open) Lost(peer, now);
  }

  void OnInboundReadable(Inbound& in, Clock::time_point now) {
    const bool open = ReadAvailable(in.fd.get(), in.buffer);
    for (const std::string& line : TakeLines(in.buffer)) {
      if (in.greeted) continue;  // nothing else is expected from a peer
      auto hello = DecodeHello(line);
      if (!hello.ok()) {
        log.Warn("Dropping a peer connection: " + hello.status().message());
        in.dead = true;
        return;
      }
      if (hello->key != key) {
        log.Error(fmt::format("Node configuration mapping mismatch with {} (node {})",
                              hello->address, hello->index));
        SendAll(in.fd.get(), std::string(kNakMap) + "\n");
        in.dead = true;
        return;
      }
      if (hello->version != options.version) {
        log.Error(fmt::format("Version mismatch with {}: {} (ours {})", hello->address,
                              hello->version, options.version));
        SendAll(in.fd.get(), std::string(kNakVersion) + "\n");
        in.dead = true;
        return;
      }
      SendAll(in.fd.get(), fmt::format("{}{} {}\n", kAckPrefix, own_index, instance));
      in.greeted = true;
      // A peer that (re)appeared: connect back now rather than at our backoff.
      if (hello->index >= 0 && static_cast<std::size_t>(hello->index) < peers.size()) {
        Peer& peer = peers[static_cast<std::size_t>(hello->index)];
        if (peer.index != own_index && peer.phase == Phase::kIdle) {
          peer.backoff = kInitialBackoff;
          peer.next_attempt = now;
        }
      }
    }
    if (!open) in.dead = true;
  }

  void OnCommandReadable(CommandConn& conn, Clock::time_point now) {
    const bool open = ReadAvailable(conn.fd.get(), conn.buffer);
    const auto lines = TakeLines(conn.buffer);
    if (!lines.empty()) {
      const std::string& request = lines.front();
      std::string answer;
      if (request == kQueryRequest) {
        answer = std::string(DaemonStateName(State(now))) + "\n";
      } else if (request == kStatusRequest) {
        answer = EncodeNodeStatus(Status(now));
      } else {
        answer = "ERROR unknown request\n";
      }
      SendAll(conn.fd.get(), answer);
      conn.dead = true;
      return;
    }
    if (!open) conn.dead = true;
  }

  void Reload(Clock::time_point now) {
    if (last_reload && now - *last_reload < options.sigusr1_min_interval) {
      log.Warn("SIGUSR1 ignored: less than the minimum interval since the last one");
      return;
    }
    last_reload = now;
    auto loaded = LoadNodesConfig(options.config.node_config_file);
    if (!loaded.ok()) {
      log.Error("SIGUSR1: cannot read the nodes file: " + loaded.status().ToString());
      return;
    }
    std::vector<std::optional<std::string>> resolved;
    for (const auto& entry : *loaded) resolved.push_back(resolver.Resolve(entry));
    if (*loaded == entries) {
      log.Info("SIGUSR1: restarting outgoing connections");
      for (Peer& peer : peers) {
        if (peer.index == own_index) continue;
        const auto& address = resolved[static_cast<std::size_t>(peer.index)];
        if (peer.phase == Phase::kUp && address == peer.address) continue;
        if (peer.phase == Phase::kUp) Lost(peer, now);
        peer.fd.Reset();
        peer.phase = Phase::kIdle;
        peer.backoff = kInitialBackoff;
        peer.next_attempt = now;
      }
      return;
    }
    int index = -1;
    for (std::size_t i = 0; i < resolved.size(); ++i) {
      if (resolved[i] == own_address) index = static_cast<int>(i);
    }
    if (index < 0) {
      log.Error(fmt::format("SIGUSR1: the new nodes file has no entry for this node ({}); "
                            "keeping the old one", own_address));
      return;
    }
    log.Info(fmt::format("SIGUSR1: nodes file changed ({} entries, this node is #{})",
                         loaded->size(), index));
    SetEntries(std::move(loaded).value(), resolved, index, now);
    inbound.clear();  // accepted under the old nodes file; peers reconnect
  }

  void Shutdown() {
    shutting_down = true;
    log.Info("Shutting down: notifying peers");
    for (Inbound& in : inbound) {
      if (in.greeted) SendAll(in.fd.get(), std::string(kBye) + "\n");
    }
    inbound.clear();
    for (Peer& peer : peers) peer.fd.Reset();
    if (!options.config.cmd_unix_domain_path.empty()) {
      ::unlink(options.config.cmd_unix_domain_path.c_str());
    }
  }

  // Returns true when a stop signal arrived.
  bool OnSignal(Clock::time_point now) {
    signalfd_siginfo info{};
    while (::read(signal_fd.get(), &info, sizeof(info)) == sizeof(info)) {
      switch (info.ssi_signo) {
        case SIGTERM:
        case SIGINT:
        case SIGQUIT:
          log.Info(fmt::format("Received signal {}", ::strsignal(static_cast<int>(info.ssi_signo))));
          return true;
        case SIGUSR1:
          Reload(now);
          break;
        case SIGHUP:
          log.Info("SIGHUP: the simulator keeps no verbose log buffer");
          break;
        default:
          break;
      }
    }
    return false;
  }

  void Accept(int listener, bool is_peer) {
    for (;;) {
      UniqueFd fd(::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd) return;
      if (is_peer) {
        inbound.push_back(Inbound{std::move(fd), {}, false, false});
      } else {
        commands.push_back(CommandConn{std::move(fd), {}, false});
      }
    }
  }

  int Run() {
    enum class Kind { kSignal, kPeerListener, kCommandListener, kPeer, kInbound, kCommand };
    struct Slot {
      Kind kind;
      Peer* peer = nullptr;
      Inbound* in = nullptr;
      CommandConn* command = nullptr;
    };
    for (;;) {
      auto now = Clock::now();
      for (Peer& peer : peers) {
        if (peer.index == own_index) continue;
        if (peer.phase == Phase::kIdle && peer.next_attempt <= now) Attempt(peer, now);
        if (peer.cleanup_at && *peer.cleanup_at <= now) {
          peer.cleanup_at.reset();
          if (peer.state == ConnState::kRecovering) SetConn(peer, ConnState::kDisconnected);
        }
      }
      if (const DaemonState state = State(now); state != logged_state) {
        log.Info(fmt::format("IMEX daemon state: {}", DaemonStateName(state)));
        logged_state = state;
      }

      std::vector<pollfd> fds;
      std::vector<Slot> slots;
      auto add = [&](int fd, short events, Slot slot) {
        fds.push_back(pollfd{fd, events, 0});
        slots.push_back(slot);
      };
      add(signal_fd.get(), POLLIN, {Kind::kSignal});
      add(peer_listener.get(), POLLIN, {Kind::kPeerListener});
      if (command_tcp) add(command_tcp.get(), POLLIN, {Kind::kCommandListener});
      if (command_unix) add(command_unix.get(), POLLIN, {Kind::kCommandListener});
      std::optional<Clock::time_point> wake;
      auto wake_at = [&](Clock::time_point t) { wake = wake ? std::min(*wake, t) : t; };
      if (now < ready_at) wake_at(ready_at);
      for (Peer& peer : peers) {
        if (peer.index == own_index) continue;
        if (peer.cleanup_at) wake_at(*peer.cleanup_at);
        switch (peer.phase) {
          case Phase::kIdle: wake_at(peer.next_attempt); break;
          case Phase::kConnecting: add(peer.fd.get(), POLLOUT, {Kind::kPeer, &peer}); break;
          default: add(peer.fd.get(), POLLIN, {Kind::kPeer, &peer}); break;
        }
      }
      for (Inbound& in : inbound) add(in.fd.get(), POLLIN, {Kind::kInbound, nullptr, &in});
      for (CommandConn& c : commands) {
        add(c.fd.get(), POLLIN, {Kind::kCommand, nullptr, nullptr, &c});
      }
      int timeout = -1;
      if (wake) {
        const auto left = std::chrono::duration_cast<milliseconds>(*wake - now).count();
        timeout = static_cast<int>(std::clamp<long>(left + 1, 0, 60'000));
      }
      const int n = ::poll(fds.data(), fds.size(), timeout);
      if (n < 0 && errno != EINTR) {
        log.Error(fmt::format("poll: {}", std::strerror(errno)));
        return 1;
      }
      now = Clock::now();
      bool stop = false;
      for (std::size_t i = 0; n > 0 && i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        const Slot& slot = slots[i];
        switch (slot.kind) {
          case Kind::kSignal:
            stop = OnSignal(now) || stop;
            break;
          case Kind::kPeerListener:
            Accept(fds[i].fd, true);
            break;
          case Kind::kCommandListener:
            Accept(fds[i].fd, false);
            break;
          case Kind::kPeer:
            // A reload may have replaced the peers; skip stale slots.
            if (slot.peer < peers.data() || slot.peer >= peers.data() + peers.size() ||
                slot.peer->fd.get() != fds[i].fd) {
              break;
            }
            if (slot.peer->phase == Phase::kConnecting) {
              OnPeerWritable(*slot.peer, now);
            } else {
              OnPeerReadable(*slot.peer, now);
            }
            break;
          case Kind::kInbound:
            if (std::any_of(inbound.begin(), inbound.end(),
                            [&](const Inbound& in) { return &in == slot.in; })) {
              OnInboundReadable(*slot.in, now);
            }
            break;
          case Kind::kCommand:
            OnCommandReadable(*slot.command, now);
            break;
        }
      }
      inbound.remove_if([](const Inbound& in) { return in.dead; });
      commands.remove_if([](const CommandConn& c) { return c.dead; });
      if (stop) {
        Shutdown();
        return 0;
      }
    }
  }
};

Daemon::Daemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Daemon::~Daemon() = default;

common::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(DaemonOptions options) {
  std::FILE* log_out = stderr;
  if (!options.config.log_file_name.empty()) {
    // As the template says: a log file that cannot be opened means stderr.
    if (std::FILE* f = std::fopen(options.config.log_file_name.c_str(), "a")) log_out = f;
  }
  auto impl = std::make_unique<Impl>(std::move(options), log_out);
  const ImexConfig& config = impl->options.config;
  const auto now = Clock::now();
  impl->ready_at = now + impl->options.ready_delay;

  ASSIGN_OR_RETURN(auto entries, LoadNodesConfig(config.node_config_file));
  std::vector<std::optional<std::string>> resolved;
  for (const auto& entry : entries) resolved.push_back(impl->resolver.Resolve(entry));
  const int index = impl->FindOwnIndex(resolved);
  if (index < 0) {
    return common::FailedPreconditionError(fmt::format(
        "no entry of {} is this node's address (BIND_INTERFACE_IP {:?}, "
        "IMEX_CMD_BIND_INTERFACE_IP {:?}, or an interface address)",
        config.node_config_file.string(), config.bind_interface_ip,
        config.cmd_bind_interface_ip));
  }
  impl->own_address = *resolved[static_cast<std::size_t>(index)];
  impl->SetEntries(std::move(entries), resolved, index, now);

  ASSIGN_OR_RETURN(impl->peer_listener, ListenTcp(impl->own_address, config.server_port));
  if (config.cmd_enabled) {
    if (config.cmd_port != 0) {
      ASSIGN_OR_RETURN(impl->command_tcp, ListenTcp(config.cmd_bind_interface_ip, config.cmd_port));
    }
    if (!config.cmd_unix_domain_path.empty()) {
      ASSIGN_OR_RETURN(impl->command_unix, ListenUnix(config.cmd_unix_domain_path));
    }
  }
  sigset_t mask;
  sigemptyset(&mask);
  for (const int s : {SIGTERM, SIGINT, SIGQUIT, SIGUSR1, SIGHUP}) sigaddset(&mask, s);
  impl->signal_fd.Reset(::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!impl->signal_fd) return common::ErrnoToStatus(errno, "signalfd");

  impl->log.Info(fmt::format(
      "nvidia-imex (simulated) {} starting: node #{} {} of {} entries, peer port {}, "
      "command service {}:{}, quorum {}",
      impl->options.version, index, impl->own_address, impl->entries.size(), config.server_port,
      config.cmd_bind_interface_ip.empty() ? "*" : config.cmd_bind_interface_ip,
      config.cmd_port, QuorumModeName(config.wait_for_quorum)));
  return std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
}

int Daemon::Run() { return impl_->Run(); }

}  // namespace nvdra::simimex
