#include "kubeletplugin/plugin_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stop_token>
#include <system_error>
#include <thread>
#include <utility>

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "common/log.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "common/unique_fd.h"
#include "kubeletplugin/internal/grpc_services.h"

namespace nvdra::kubeletplugin {

namespace fs = std::filesystem;
using common::Status;
using common::StatusOr;
namespace drav1 = internal::drav1;
namespace drav1beta1 = internal::drav1beta1;
namespace registration = internal::registration;

namespace {

// Longest socket path bind() accepts: sun_path holds the terminating NUL too.
constexpr std::size_t kMaxSocketPath = sizeof(sockaddr_un::sun_path) - 1;

// gRPC's built-in health service is switched on by a process-wide flag that
// every ServerBuilder reads in BuildAndStart. Only the TCP health server
// should get it, so builds are serialized and the flag is set around each.
std::unique_ptr<grpc::Server> BuildAndStart(grpc::ServerBuilder& builder, bool with_health_service) {
  // gRPC's sync server keeps between MIN and MAX_POLLERS threads waiting for
  // calls. A thread that finishes a call while MAX_POLLERS (default 2) others
  // wait ends, and a call that takes the last waiting one starts a new thread;
  // a waiting thread also ends after CQ_TIMEOUT_MSEC (default 10 s) without a
  // call. A call that arrives while the previous one is still finishing (in
  // plugin-prepare-bench, the unprepare sent as soon as a prepare's reply is
  // in) was enough to start and end a thread about once a second, each time
  // on another cached stack: resident memory crept by 0.1 MiB per 2,000
  // prepares.
  // With room for four waiting threads, and no idle timeout, the threads
  // started stay; shutdown still ends them.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 4);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::CQ_TIMEOUT_MSEC, 60 * 60 * 1000);
  static common::Mutex build_mu;  // guards gRPC's process-wide health-service switch
  common::MutexLock lock(build_mu);
  grpc::EnableDefaultHealthCheckService(with_health_service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  grpc::EnableDefaultHealthCheckService(false);
  return server;
}

bool IsSocket(const fs::path& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

Status RemoveStale(const fs::path& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return common::ErrnoToStatus(errno, "remove stale socket " + path.string());
  }
  return common::OkStatus();
}

Status MakeDirectory(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return common::ErrnoToStatus(ec.value(), "create directory " + dir.string());
  return common::OkStatus();
}

// Prepares `path` for listening (its directory exists, a stale file is gone)
// and adds it to `builder`.
Status AddUnixListener(grpc::ServerBuilder& builder, const fs::path& path) {
  if (Status s = MakeDirectory(path.parent_path()); !s.ok()) return s;
  if (Status s = RemoveStale(path); !s.ok()) return s;
  builder.AddListeningPort("unix:" + path.string(), grpc::InsecureServerCredentials());
  return common::OkStatus();
}

std::string HostPort(const std::string& address, int port) {
  const bool bare_ipv6 = address.find(':') != std::string::npos && address.front() != '[';
  return (bare_ipv6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
}

std::chrono::system_clock::time_point DeadlineAfter(std::chrono::milliseconds timeout) {
  return std::chrono::system_clock::now() + timeout;
}

Status Validate(const PluginServerOptions& o, const fs::path& dra_socket, const fs::path& reg_socket) {
  if (o.driver_name.empty()) return common::InvalidArgumentError("driver name is empty");
  if (o.registrar_dir.empty() || !o.registrar_dir.is_absolute()) {
    return common::InvalidArgumentError("registrar directory must be an absolute path: \"" +
                                        o.registrar_dir.string() + "\"");
  }
  if (o.plugin_dir.empty() || !o.plugin_dir.is_absolute()) {
    return common::InvalidArgumentError("plugin directory must be an absolute path: \"" +
                                        o.plugin_dir.string() + "\"");
  }
  if (!dra_socket.is_absolute()) {
    return common::InvalidArgumentError("DRA socket must be an absolute path: \"" +
                                        dra_socket.string() + "\"");
  }
  for (const fs::path* p : {&dra_socket, &reg_socket}) {
    if (p->string().size() > kMaxSocketPath) {
      return common::InvalidArgumentError("socket path longer than " + std::to_string(kMaxSocketPath) +
                                          " bytes: " + p->string());
    }
  }
  if (!o.serve_v1 && !o.serve_v1beta1) {
    return common::InvalidArgumentError("no DRAPlugin API version is enabled");
  }
  if (o.healthcheck_port > 65535) {
    return common::InvalidArgumentError("healthcheck port above 65535: " +
                                        std::to_string(o.healthcheck_port));
  }
  return common::OkStatus();
}

}  // namespace

// Counts the driver calls in flight, so that shutdown waits for them alone.
// gRPC's Shutdown(deadline) also waits, up to the deadline, for idle
// connections to go away after its GOAWAY; the kubelet keeps its connection
// open, so every plugin stop would take the whole grace period.
class InFlightDriver final : public DraDriver {
 public:
  explicit InFlightDriver(DraDriver& driver) : driver_(driver) {}

  std::map<std::string, PrepareResult> PrepareResourceClaims(const std::vector<ClaimRef>& claims) override {
    Guard guard(*this);
    return driver_.PrepareResourceClaims(claims);
  }
  std::map<std::string, std::string> UnprepareResourceClaims(const std::vector<ClaimRef>& claims) override {
    Guard guard(*this);
    return driver_.UnprepareResourceClaims(claims);
  }

  // True when no call is in flight before `deadline`.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline) EXCLUDES(mu_) {
    common::MutexLock lock(mu_);
    return idle_.wait_until(lock.native(), deadline, [this]() REQUIRES(mu_) { return in_flight_ == 0; });
  }

 private:
  struct Guard {
    explicit Guard(InFlightDriver& d) : d_(d) {
      common::MutexLock lock(d_.mu_);
      ++d_.in_flight_;
    }
    ~Guard() {
      common::MutexLock lock(d_.mu_);
      if (--d_.in_flight_ == 0) d_.idle_.notify_all();
    }
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    InFlightDriver& d_;
  };
  DraDriver& driver_;
  common::Mutex mu_;  // guards in_flight_
  std::condition_variable idle_;
  int in_flight_ GUARDED_BY(mu_) = 0;
};

// The state behind PluginServer. Members are grouped by who protects them.
class PluginServer::Impl {
 public:
  Impl(const PluginServerOptions& options, DraDriver& driver, fs::path dra_socket, fs::path reg_socket)
      : options_(options),
        driver_(driver),
        dra_socket_(std::move(dra_socket)),
        reg_socket_(std::move(reg_socket)),
        endpoint_(options.advertised_endpoint.empty() ? dra_socket_.string()
                                                      : options.advertised_endpoint.string()),
        versions_(SupportedVersions(options)),
        registration_(options.driver_name, endpoint_, versions_) {}

  ~Impl() {
    // Threads first: the watcher would otherwise rebind the sockets removed below.
    watcher_.request_stop();
    if (watcher_.joinable()) watcher_.join();
    prober_.request_stop();
    if (prober_.joinable()) prober_.join();
    common::MutexLock lock(servers_mu_);
    // Registration first: the kubelet deregisters the plugin when its socket
    // goes, before the DRA endpoint stops answering.
    StopRegistration();
    StopDra();
    if (health_server_) health_server_->Shutdown(DeadlineAfter(options_.shutdown_grace));
    LOG_INFO(0, "kubelet plugin gRPC servers stopped", {{"driver", options_.driver_name}});
  }

  Status Init() {
    if (Status s = MakeDirectory(options_.plugin_dir); !s.ok()) return s;
    if (Status s = MakeDirectory(options_.registrar_dir); !s.ok()) return s;
    {
      common::MutexLock lock(servers_mu_);
      // The DRA endpoint must answer before the kubelet learns of it.
      if (Status s = StartDra(); !s.ok()) return s;
      if (Status s = StartRegistration(); !s.ok()) return s;
    }
    if (options_.healthcheck_port >= 0) {
      if (Status s = StartHealthServer(); !s.ok()) return s;
    }
    if (Status s = StartWatcher(); !s.ok()) return s;
    LOG_INFO(0, "kubelet plugin serving",
             {{"driver", options_.driver_name}, {"registration", reg_socket_},
              {"endpoint", endpoint_}, {"listen", dra_socket_}, {"healthPort", health_port_}});
    if (health_server_) {
      ProbeNow();
      prober_ = std::jthread([this](std::stop_token stop) { RunProber(stop); });
    }
    return common::OkStatus();
  }

  void Publish(std::vector<DeviceHealth> devices) { hub_->Publish(std::move(devices)); }

  bool ProbeNow() {
    const bool ok = ProbeRegistration() && ProbeDra();
    if (health_server_) {
      if (grpc::HealthCheckServiceInterface* hc = health_server_->GetHealthCheckService()) {
        hc->SetServingStatus("", ok);
        hc->SetServingStatus("liveness", ok);
      }
    }
    const bool was_ok = last_probe_ok_.exchange(ok);
    if (ok && !was_ok) {
      LOG_INFO(2, "liveness probe passes", {{"driver", options_.driver_name}});
    } else if (!ok && was_ok) {
      LOG_WARNING("liveness probe fails", {{"driver", options_.driver_name}});
    }
    return ok;
  }

  RegistrationState registration_state() const { return registration_.state(); }
  const fs::path& registration_socket() const { return reg_socket_; }
  const fs::path& dra_socket() const { return dra_socket_; }
  int healthcheck_port() const { return health_port_; }
  const std::vector<std::string>& supported_versions() const { return versions_; }
  int rebinds() const { return rebinds_.load(); }

 private:
  // The DRA server and the services it serves; the server is declared last
  // so that it stops before the services it calls are destroyed.
  struct DraServer {
    std::unique_ptr<internal::DraPluginV1Service> v1;
    std::unique_ptr<internal::DraPluginV1beta1Service> v1beta1;
    std::unique_ptr<internal::DraHealthV1Service> health_v1;
    std::unique_ptr<internal::DraHealthV1alpha1Service> health_v1alpha1;
    std::unique_ptr<grpc::Server> server;
  };

  static std::vector<std::string> SupportedVersions(const PluginServerOptions& o) {
    // As the Go kubeletplugin helper (v0.37): DRAPlugin v1 first, since the
    // kubelet takes the first entry it knows; health services after it.
    std::vector<std::string> versions;
    if (o.serve_v1) versions.emplace_back(kDraPluginV1);
    if (o.serve_v1beta1) versions.emplace_back(kDraPluginV1beta1);
    if (o.serve_health) {
      versions.emplace_back(kDraResourceHealthV1);
      versions.emplace_back(kDraResourceHealthV1alpha1);
    }
    return versions;
  }

  Status StartDra() REQUIRES(servers_mu_) {
    DraServer dra;
    grpc::ServerBuilder builder;
    if (Status s = AddUnixListener(builder, dra_socket_); !s.ok()) return s;
    if (options_.serve_v1) {
      dra.v1 = std::make_unique<internal::DraPluginV1Service>(driver_);
      builder.RegisterService(dra.v1.get());
    }
    if (options_.serve_v1beta1) {
      dra.v1beta1 = std::make_unique<internal::DraPluginV1beta1Service>(driver_);
      builder.RegisterService(dra.v1beta1.get());
    }
    if (options_.serve_health) {
      dra.health_v1 = std::make_unique<internal::DraHealthV1Service>(hub_);
      dra.health_v1alpha1 = std::make_unique<internal::DraHealthV1alpha1Service>(hub_);
      builder.RegisterService(dra.health_v1.get());
      builder.RegisterService(dra.health_v1alpha1.get());
    }
    dra.server = BuildAndStart(builder, /*with_health_service=*/false);
    if (!dra.server) return common::UnavailableError("listen on DRA socket " + dra_socket_.string());
    dra_ = std::move(dra);
    return common::OkStatus();
  }

  Status StartRegistration() REQUIRES(servers_mu_) {
    grpc::ServerBuilder builder;
    if (Status s = AddUnixListener(builder, reg_socket_); !s.ok()) return s;
    builder.RegisterService(&registration_);
    reg_server_ = BuildAndStart(builder, /*with_health_service=*/false);
    if (!reg_server_) {
      return common::UnavailableError("listen on registration socket " + reg_socket_.string());
    }
    return common::OkStatus();
  }

  // Open health streams end first, so Shutdown need not wait on them; other
  // in-flight calls get the grace period, then are cancelled.
  void StopDra() REQUIRES(servers_mu_) {
    hub_->CloseAll();
    if (dra_.server) {
      // Calls in flight get the grace period; then nothing is left to wait for.
      if (!driver_.WaitIdle(std::chrono::steady_clock::now() + options_.shutdown_grace)) {
        LOG_WARNING("driver calls still running after the shutdown grace period; cancelling them",
                    {{"graceMs", options_.shutdown_grace.count()}});
      }
      dra_.server->Shutdown(DeadlineAfter(std::chrono::milliseconds(0)));
    }
    dra_ = DraServer{};
    RemoveStale(dra_socket_).IgnoreError();  // gone already, or nothing to do about it
  }

  void StopRegistration() REQUIRES(servers_mu_) {
    if (reg_server_) reg_server_->Shutdown(DeadlineAfter(options_.shutdown_grace));
    reg_server_.reset();
    RemoveStale(reg_socket_).IgnoreError();
  }

  Status StartHealthServer() {
    grpc::ServerBuilder builder;
    const std::string address = HostPort(options_.healthcheck_address, options_.healthcheck_port);
    int bound_port = 0;
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &bound_port);
    // gRPC 1.51's builder refuses a server whose only service is the
    // built-in health service ("at least one of the completion queues must
    // be frequently polled"): it looks for callback methods before adding
    // that service. A callback generic service, which answers any other
    // method with UNIMPLEMENTED, makes the server a callback server.
    builder.RegisterCallbackGenericService(&unimplemented_);
    health_server_ = BuildAndStart(builder, /*with_health_service=*/true);
    if (!health_server_ || bound_port == 0) {
      health_server_.reset();
      return common::UnavailableError("listen for the health service on " + address);
    }
    health_port_ = bound_port;
    if (grpc::HealthCheckServiceInterface* hc = health_server_->GetHealthCheckService()) {
      // Not serving until the first probe says otherwise.
      hc->SetServingStatus("", false);
      hc->SetServingStatus("liveness", false);
    }
    return common::OkStatus();
  }

  // --- Liveness probe -----------------------------------------------------------
  // A fresh channel per probe: a long-lived one would back off reconnecting
  // after a socket disappears and keep failing after it is back.

  bool ProbeRegistration() {
    auto channel = grpc::CreateChannel("unix:" + reg_socket_.string(), grpc::InsecureChannelCredentials());
    auto stub = registration::Registration::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(options_.health_probe_timeout));
    registration::PluginInfo info;
    const grpc::Status s = stub->GetInfo(&context, registration::InfoRequest(), &info);
    if (!s.ok()) {
      LOG_INFO(2, "liveness probe: GetInfo failed", {{"err", s.error_message()}});
    }
    return s.ok();
  }

  bool ProbeDra() {
    auto channel = grpc::CreateChannel("unix:" + dra_socket_.string(), grpc::InsecureChannelCredentials());
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(options_.health_probe_timeout));
    grpc::Status s;
    if (options_.serve_v1) {
      drav1::NodePrepareResourcesResponse response;
      s = drav1::DRAPlugin::NewStub(channel)->NodePrepareResources(
          &context, drav1::NodePrepareResourcesRequest(), &response);
    } else {
      drav1beta1::NodePrepareResourcesResponse response;
      s = drav1beta1::DRAPlugin::NewStub(channel)->NodePrepareResources(
          &context, drav1beta1::NodePrepareResourcesRequest(), &response);
    }
    if (!s.ok()) {
      LOG_INFO(2, "liveness probe: NodePrepareResources failed", {{"err", s.error_message()}});
    }
    return s.ok();
  }

  void RunProber(const std::stop_token& stop) {
    std::mutex wait_mu;
    std::condition_variable_any wake;
    while (!stop.stop_requested()) {
      {
        std::unique_lock lock(wait_mu);
        wake.wait_for(lock, stop, options_.health_probe_interval, [] { return false; });
      }
      if (stop.stop_requested()) return;
      ProbeNow();
    }
  }

  // --- Socket watcher -------------------------------------------------------------
  // inotify on the two sockets' directories reports a removal at once; a
  // periodic stat would leave the kubelet without the plugin until the next
  // tick. Any event (a removal or rename in those directories, the directory
  // itself going, a queue overflow) re-checks both sockets, so no event kind
  // needs special handling.

  Status StartWatcher() {
    inotify_fd_ = common::UniqueFd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    if (!inotify_fd_) return common::ErrnoToStatus(errno, "inotify_init1");
    stop_fd_ = common::UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!stop_fd_) return common::ErrnoToStatus(errno, "eventfd");
    if (Status s = AddWatches(); !s.ok()) return s;
    watcher_ = std::jthread([this](std::stop_token stop) { RunWatcher(stop); });
    return common::OkStatus();
  }

  // Adding a watch that exists is a no-op, so this runs after every rebind
  // (a rebind may have re-created a removed directory).
  Status AddWatches() {
    constexpr std::uint32_t kMask = IN_DELETE | IN_MOVED_FROM | IN_DELETE_SELF | IN_MOVE_SELF;
    for (const fs::path& dir : {dra_socket_.parent_path(), reg_socket_.parent_path()}) {
      if (::inotify_add_watch(inotify_fd_.get(), dir.c_str(), kMask) < 0) {
        return common::ErrnoToStatus(errno, "watch directory " + dir.string());
      }
    }
    return common::OkStatus();
  }

  void RunWatcher(const std::stop_token& stop) {
    std::stop_callback wake(stop, [this] {
      const std::uint64_t one = 1;
      // Best effort: a full eventfd counter is already readable.
      [[maybe_unused]] const auto n = ::write(stop_fd_.get(), &one, sizeof(one));
    });
    alignas(inotify_event) std::array<char, 4096> buffer{};
    while (!stop.stop_requested()) {
      std::array<pollfd, 2> fds{pollfd{inotify_fd_.get(), POLLIN, 0}, pollfd{stop_fd_.get(), POLLIN, 0}};
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        LOG_ERROR("socket watcher stopped", {{"err", common::ErrnoToStatus(errno, "poll")}});
        return;
      }
      if (stop.stop_requested()) return;
      // Drain; the content does not matter (see above).
      while (::read(inotify_fd_.get(), buffer.data(), buffer.size()) > 0) {
      }
      RecheckSockets();
    }
  }

  void RecheckSockets() EXCLUDES(servers_mu_) {
    common::MutexLock lock(servers_mu_);
    bool rebound = false;
    if (!IsSocket(dra_socket_)) {
      LOG_WARNING("DRA socket removed, binding it again", {{"socket", dra_socket_}});
      StopDra();
      if (Status s = StartDra(); !s.ok()) {
        // Nothing to retry with: the liveness probe now fails and the pod is
        // restarted, which is the remedy for an unwritable directory.
        LOG_ERROR("cannot bind the DRA socket again", {{"err", s}});
      } else {
        rebound = true;
      }
    }
    if (!IsSocket(reg_socket_)) {
      LOG_WARNING("registration socket removed, binding it again", {{"socket", reg_socket_}});
      StopRegistration();
      if (Status s = StartRegistration(); !s.ok()) {
        LOG_ERROR("cannot bind the registration socket again", {{"err", s}});
      } else {
        // The kubelet sees the new socket through its own inotify watch and
        // registers the plugin again.
        rebound = true;
      }
    }
    if (rebound) {
      rebinds_.fetch_add(1);
      if (Status s = AddWatches(); !s.ok()) {
        LOG_ERROR("socket watcher lost a directory", {{"err", s}});
      }
    }
  }

  // Constant after construction.
  const PluginServerOptions options_;
  InFlightDriver driver_;
  const fs::path dra_socket_;
  const fs::path reg_socket_;
  const std::string endpoint_;
  const std::vector<std::string> versions_;
  int health_port_ = -1;                             // set in Init
  grpc::CallbackGenericService unimplemented_;      // see StartHealthServer
  std::unique_ptr<grpc::Server> health_server_;      // set in Init; never rebound
  common::UniqueFd inotify_fd_;                      // set in Init
  common::UniqueFd stop_fd_;                         // set in Init

  // Provide their own synchronization.
  internal::RegistrationService registration_;       // outlives every registration server
  const std::shared_ptr<internal::HealthHub> hub_ = std::make_shared<internal::HealthHub>();
  std::atomic<int> rebinds_{0};
  std::atomic<bool> last_probe_ok_{false};

  common::Mutex servers_mu_;  // guards the two servers below (rebinds, shutdown)
  DraServer dra_ GUARDED_BY(servers_mu_);
  std::unique_ptr<grpc::Server> reg_server_ GUARDED_BY(servers_mu_);

  // Threads last: joined (in ~Impl) before the state they use goes away.
  std::jthread prober_;
  std::jthread watcher_;
};

StatusOr<std::unique_ptr<PluginServer>> PluginServer::Start(const PluginServerOptions& options,
                                                            DraDriver& driver) {
  const fs::path dra_socket =
      options.dra_socket.empty() ? options.plugin_dir / "dra.sock" : options.dra_socket;
  const fs::path reg_socket = options.registrar_dir / (options.driver_name + "-reg.sock");
  if (Status s = Validate(options, dra_socket, reg_socket); !s.ok()) return s;
  auto impl = std::make_unique<Impl>(options, driver, dra_socket, reg_socket);
  if (Status s = impl->Init(); !s.ok()) return s;
  return std::make_unique<PluginServer>(PassKey(), std::move(impl));
}

PluginServer::PluginServer(PassKey /*key*/, std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PluginServer::~PluginServer() = default;

void PluginServer::PublishDeviceHealth(std::vector<DeviceHealth> devices) {
  impl_->Publish(std::move(devices));
}
bool PluginServer::ProbeNow() { return impl_->ProbeNow(); }
RegistrationState PluginServer::registration_state() const { return impl_->registration_state(); }
const fs::path& PluginServer::registration_socket() const { return impl_->registration_socket(); }
const fs::path& PluginServer::dra_socket() const { return impl_->dra_socket(); }
int PluginServer::healthcheck_port() const { return impl_->healthcheck_port(); }
const std::vector<std::string>& PluginServer::supported_versions() const {
  return impl_->supported_versions();
}
int PluginServer::rebinds() const { return impl_->rebinds(); }

}  // namespace nvdra::kubeletplugin
