#include "computedomain/imex_daemon.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "common/file_io.h"
#include "common/json_fields.h"
#include "common/log.h"
#include "computedomain/imex_files.h"
#include "k8s/cache/informer.h"
#include "k8s/rest_list_watch.h"

namespace nvdra::computedomain {
namespace {

using common::Status;
using nlohmann::json;
using std::chrono::milliseconds;

// nvidia-imex ignores a SIGUSR1 within 5 s of the previous one (IMEX guide,
// signals); the margin keeps ours clear of that edge.
constexpr milliseconds kReloadWindow{5100};
constexpr milliseconds kNotReadyPollInterval{25};
constexpr milliseconds kCtlTimeout{5000};
constexpr milliseconds kRestartBackoffMin{100};
constexpr milliseconds kRestartBackoffMax{10000};
constexpr std::chrono::seconds kRestartBackoffReset{30};
constexpr milliseconds kPublishBackoffMin{100};
constexpr milliseconds kPublishBackoffMax{5000};

std::int64_t ResourceVersionOf(const json& object) {
  std::int64_t version = 0;
  const std::string text = common::JsonString(object, {"metadata", "resourceVersion"});
  std::from_chars(text.data(), text.data() + text.size(), version);
  return version;
}

std::string JoinMapping(const std::map<std::int64_t, std::string>& ip_by_index) {
  std::string out;
  for (const auto& [index, ip] : ip_by_index) {
    if (!out.empty()) out += ",";
    out += fmt::format("{}={}", DnsName(index), ip);
  }
  return out;
}

}  // namespace

ImexDaemon::ImexDaemon(k8s::Client& client, ImexDaemonOptions options)
    : client_(client),
      options_(std::move(options)),
      own_registry_(options_.metrics == nullptr ? std::make_unique<common::MetricsRegistry>() : nullptr),
      own_metrics_(own_registry_ ? std::make_unique<DaemonMetrics>(*own_registry_) : nullptr),
      metrics_(options_.metrics != nullptr ? options_.metrics : own_metrics_.get()),
      membership_(client, options_.identity, options_.store, options_.compute_domain_name,
                  options_.compute_domain_namespace, metrics_),
      config_path_(options_.imexd_dir / "imexd.cfg"),
      nodes_path_(options_.imexd_dir / "nodes.cfg") {}

ImexDaemon::~ImexDaemon() {
  if (informer_) informer_->Stop();
  poller_.request_stop();
  poll_cv_.notify_all();
}

Status ImexDaemon::WriteStaticFiles() {
  std::error_code ec;
  std::filesystem::create_directories(options_.imexd_dir, ec);
  if (ec) return common::InternalError(fmt::format("create {}: {}", options_.imexd_dir.string(), ec.message()));
  // The kubelet plugin copies the template into the domain's folder, as
  // upstream does; the image's copy is the fallback.
  std::filesystem::path template_path = options_.imexd_dir / "imexd.cfg.tmpl";
  if (!std::filesystem::exists(template_path, ec)) template_path = options_.config_template;
  ASSIGN_OR_RETURN(std::string template_text, common::ReadWholeFile(template_path));
  auto rendered = RenderImexConfig(template_text, {.cmd_bind_interface_ip = options_.identity.pod_ip,
                                                   .nodes_config_path = nodes_path_.string()});
  if (!rendered.ok()) return common::InvalidArgumentError(template_path.string() + ": " + rendered.status().message());
  if (Status status = WriteFileAtomically(config_path_, *rendered); !CountWrite(DaemonFile::kConfig, status)) {
    return status;
  }
  LOG_INFO(1, "IMEX config rendered",
           {{"template", template_path}, {"config", config_path_}, {"cmdBindIP", options_.identity.pod_ip}});
  if (options_.dns_names) {
    if (Status status = WriteFileAtomically(nodes_path_, StaticNodesConfig(options_.max_nodes));
        !CountWrite(DaemonFile::kNodes, status)) {
      return status;
    }
    LOG_INFO(1, "static nodes file written", {{"path", nodes_path_}, {"names", options_.max_nodes}});
  }
  return common::OkStatus();
}

bool ImexDaemon::CountWrite(DaemonFile file, const Status& status) {
  metrics_->CountFileWrite(file, status.ok());
  return status.ok();
}

void ImexDaemon::Wake() {
  const std::uint64_t one = 1;
  // A full counter still wakes the loop; nothing else can fail here.
  (void)!write(wake_fd_.get(), &one, sizeof one);
}

Status ImexDaemon::Run(std::stop_token stop) {
  run_started_at_ = Clock::now();
  metrics_->SetPublishedReady(false);  // not ready until a Ready status is published
  RETURN_IF_ERROR(WriteStaticFiles());
  wake_fd_.Reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_fd_) return common::ErrnoToStatus(errno, "eventfd");
  std::stop_callback wake_on_stop(stop, [this] { Wake(); });

  const DaemonIdentity& id = options_.identity;
  LOG_INFO(0, "joining clique", {{"clique", membership_.clique_name()}, {"namespace", membership_.object_namespace()},
                                 {"store", options_.store == MembershipStore::kClique ? "clique" : "cdStatus"},
                                 {"node", id.node_name}, {"ip", id.pod_ip}, {"dnsNames", options_.dns_names}});

  k8s::cache::InformerOptions informer_options;
  informer_options.description = membership_.resource().resource + " " + membership_.clique_name();
  informer_options.field_selector = "metadata.name=" + membership_.clique_name();
  // Every daemon starts with its domain's workload: one request (a streaming
  // list) instead of a list and a watch is one request per node less.
  informer_options.streaming_list = true;
  informer_ = std::make_unique<k8s::cache::Informer>(
      CountListWatchErrors(
          std::make_unique<k8s::RestListWatch>(client_, membership_.resource(), membership_.object_namespace()),
          *metrics_),
      std::move(informer_options));
  auto keep = [this](const k8s::cache::ObjectPtr& object) {
    // A ComputeDomain of the same name but another UID is not ours.
    if (object && options_.store == MembershipStore::kComputeDomainStatus &&
        common::JsonString(*object, {"metadata", "uid"}) != options_.identity.compute_domain_uid) {
      return;
    }
    {
      common::MutexLock lock(mutex_);
      clique_ = object ? std::optional<json>(*object) : std::nullopt;
      clique_dirty_ = true;
    }
    Wake();
  };
  informer_->AddEventHandler({.on_add = keep,
                              .on_update = [keep](const k8s::cache::ObjectPtr&, const k8s::cache::ObjectPtr& now) {
                                keep(now);
                              },
                              .on_delete = [keep](const k8s::cache::ObjectPtr&) { keep(nullptr); },
                              .needs_old_object = false});
  informer_->Start();
  poller_ = std::jthread([this](std::stop_token poller_stop) { PollReadiness(poller_stop); });
  publish_retry_at_ = Clock::now();

  while (!stop.stop_requested()) {
    // A SIGUSR1 waits for the process to answer its first query: one sent
    // before nvidia-imex sets up its signal handling ends it (the default
    // action), which a hosts update right after a start would otherwise do.
    const bool reload_due = reload_at_ && ImexAnswered();
    std::optional<Clock::time_point> next;
    for (const auto& deadline : {restart_at_, reload_due ? reload_at_ : std::nullopt, publish_retry_at_}) {
      if (deadline && (!next || *deadline < *next)) next = deadline;
    }
    int timeout_ms = -1;
    if (next) {
      const auto left = std::chrono::ceil<milliseconds>(*next - Clock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<long long>(left, 0, 60'000));
    }
    pollfd fds[2] = {{wake_fd_.get(), POLLIN, 0}, {imex_ ? imex_->pidfd() : -1, POLLIN, 0}};
    if (poll(fds, 2, timeout_ms) < 0 && errno != EINTR) return common::ErrnoToStatus(errno, "poll");
    std::uint64_t count = 0;
    (void)!read(wake_fd_.get(), &count, sizeof count);
    if (stop.stop_requested()) break;

    if (imex_ && (fds[1].revents & POLLIN) != 0) OnImexExited();
    std::optional<json> clique;
    bool dirty = false;
    {
      common::MutexLock lock(mutex_);
      if (clique_dirty_) {
        clique = clique_;
        dirty = true;
        clique_dirty_ = false;
      }
    }
    if (dirty) OnCliqueChanged(clique ? &*clique : nullptr);

    const auto now = Clock::now();
    if (restart_at_ && now >= *restart_at_) {
      restart_at_.reset();
      if (!imex_ && (options_.dns_names ? own_index_known_ : peers_known_)) StartImex(next_start_reason_);
    }
    if (reload_at_ && now >= *reload_at_ && ImexAnswered()) {
      reload_at_.reset();
      if (imex_) {
        LOG_INFO(2, "peer mapping changed; asking nvidia-imex to reload (SIGUSR1)", {{"pid", imex_->pid()}});
        if (Status status = imex_->Signal(SIGUSR1); !status.ok()) {
          LOG_WARNING("cannot signal nvidia-imex", {{"err", status}});
        } else {
          metrics_->CountImexReload();
        }
        last_reload_ = now;
      }
    }
    PublishIfNeeded();
  }

  LOG_INFO(0, "shutting down: leaving the clique, then stopping nvidia-imex", {{"clique", membership_.clique_name()}});
  poller_.request_stop();
  poll_cv_.notify_all();
  poller_ = std::jthread();
  {
    // The caller's stop is already requested; leaving gets its own bound.
    std::stop_source leave_stop;
    std::jthread timer([&leave_stop, this](std::stop_token timer_stop) {
      std::mutex m;
      std::condition_variable_any cv;
      std::unique_lock lock(m);
      if (!cv.wait_for(lock, timer_stop, options_.leave_timeout, [] { return false; }) &&
          !timer_stop.stop_requested()) {
        leave_stop.request_stop();
      }
    });
    if (Status status = membership_.Leave(leave_stop.get_token()); !status.ok()) {
      LOG_ERROR("cannot tell the API server this daemon is leaving", {{"clique", membership_.clique_name()},
                                                                     {"err", status}});
    } else {
      LOG_INFO(2, "left the clique", {{"clique", membership_.clique_name()}});
    }
  }
  StopImex();
  informer_->Stop();
  return common::OkStatus();
}

void ImexDaemon::OnCliqueChanged(const json* clique) {
  if (clique == nullptr) {
    // Upstream does not re-create a deleted clique from an event either: the
    // controller deletes it when the ComputeDomain goes.
    LOG_INFO(2, "clique deleted", {{"clique", membership_.clique_name()}});
    clique_deleted_ = true;
    metrics_->SetCliqueDaemons({}, options_.identity.clique_id);
    return;
  }
  clique_deleted_ = false;
  const std::int64_t version = ResourceVersionOf(*clique);
  if (version != 0 && version < processed_version_) return;  // older than what we already acted on
  processed_version_ = std::max(processed_version_, version);
  const std::vector<CliqueMember> members = CliqueMembers(*clique, options_.store);
  const DaemonIdentity& id = options_.identity;
  metrics_->SetCliqueDaemons(members, id.clique_id);
  auto own = std::find_if(members.begin(), members.end(),
                          [&](const CliqueMember& m) { return m.node_name == id.node_name; });
  // Gate off our entry is ours to write again when it is not what we wrote;
  // a clique's entries are the controller's (from our pod).
  entry_missing_ = options_.store == MembershipStore::kComputeDomainStatus &&
                   (own == members.end() || own->ip_address != id.pod_ip || own->clique_id != id.clique_id ||
                    (!published_.status.empty() &&
                     (own->status != published_.status || own->reason != published_.reason ||
                      own->message != published_.message)));
  if (options_.dns_names) {
    UpdatePeersDnsNames(members);
  } else {
    // Upstream's IP mode waits until every expected node is listed
    // (spec.numNodes of the ComputeDomain; 0: not gated here).
    UpdatePeersIps(members, common::JsonInt(*clique, {"spec", "numNodes"}));
  }
}

void ImexDaemon::UpdatePeersDnsNames(const std::vector<CliqueMember>& members) {
  const DaemonIdentity& id = options_.identity;
  std::map<std::int64_t, std::string> ip_by_index;
  bool own_index = false;
  for (const CliqueMember& member : members) {
    if (member.clique_id != id.clique_id || !member.index) continue;
    if (!IsIpAddressLiteral(member.ip_address)) {
      LOG_ERROR("clique entry's ipAddress is not an IP address; ignored",
                {{"node", member.node_name}, {"ip", member.ip_address.substr(0, 64)}});
      continue;
    }
    const std::int64_t index = *member.index;
    if (index < 0 || index >= options_.max_nodes) {
      LOG_ERROR("clique entry has an index outside the IMEX domain; ignored",
                {{"node", member.node_name}, {"index", index}, {"max", options_.max_nodes}});
      continue;
    }
    if (auto [it, inserted] = ip_by_index.emplace(index, member.ip_address); !inserted) {
      LOG_ERROR("two clique entries share an index; the first is used",
                {{"node", member.node_name}, {"index", index}, {"ip", it->second}});
      continue;
    }
    if (member.node_name == id.node_name && member.ip_address == id.pod_ip) own_index = true;
  }
  if (own_index && !own_index_known_) LOG_INFO(2, "this node's index is assigned", {{"node", id.node_name}});
  own_index_known_ = own_index;
  if (ip_by_index != ip_by_index_) {
    auto hosts = common::ReadWholeFile(options_.hosts_file);
    if (!hosts.ok() && !k8s::IsNotFound(hosts.status())) {
      LOG_ERROR("cannot read the hosts file", {{"err", hosts.status()}});
      return;
    }
    const std::string text = RewriteHostsFile(hosts.ok() ? *hosts : std::string(), ip_by_index);
    if (Status status = WriteFileInPlace(options_.hosts_file, text); !CountWrite(DaemonFile::kHosts, status)) {
      LOG_ERROR("cannot write the hosts file", {{"err", status}});
      return;
    }
    ip_by_index_ = std::move(ip_by_index);
    metrics_->SetImexPeers(ip_by_index_.size());
    LOG_INFO(2, "peer names mapped", {{"hosts", options_.hosts_file}, {"mapping", JoinMapping(ip_by_index_)}});
    if (imex_ && !reload_at_) {
      const auto now = Clock::now();
      reload_at_ = last_reload_ && now - *last_reload_ < kReloadWindow ? *last_reload_ + kReloadWindow : now;
    }
  }
  if (own_index_known_ && !imex_ && !restart_at_) StartImex(next_start_reason_);
}

void ImexDaemon::UpdatePeersIps(const std::vector<CliqueMember>& members, std::int64_t num_nodes) {
  const DaemonIdentity& id = options_.identity;
  if (num_nodes > 0 && static_cast<std::int64_t>(members.size()) != num_nodes) {
    LOG_INFO(2, "waiting for all nodes of the domain before (re)configuring nvidia-imex",
             {{"numNodes", num_nodes}, {"seen", members.size()}});
    return;
  }
  std::vector<std::pair<std::string, std::string>> by_node;
  bool own = false;
  for (const CliqueMember& member : members) {
    if (member.clique_id != id.clique_id || member.ip_address.empty()) continue;
    if (!IsIpAddressLiteral(member.ip_address)) {
      LOG_ERROR("clique entry's ipAddress is not an IP address; ignored",
                {{"node", member.node_name}, {"ip", member.ip_address.substr(0, 64)}});
      continue;
    }
    by_node.emplace_back(member.node_name, member.ip_address);
    if (member.node_name == id.node_name && member.ip_address == id.pod_ip) own = true;
  }
  std::sort(by_node.begin(), by_node.end());
  std::vector<std::string> ips;
  for (auto& [node, ip] : by_node) ips.push_back(std::move(ip));
  peers_known_ = own;
  if (ips == peer_ips_ || !own) return;
  if (Status status = WriteFileAtomically(nodes_path_, IpNodesConfig(ips)); !CountWrite(DaemonFile::kNodes, status)) {
    LOG_ERROR("cannot write the nodes file", {{"err", status}});
    return;
  }
  peer_ips_ = std::move(ips);
  metrics_->SetImexPeers(peer_ips_.size());
  LOG_INFO(2, "peer IPs written; (re)starting nvidia-imex", {{"path", nodes_path_}, {"peers", peer_ips_.size()}});
  // nvidia-imex reads the IP list only at start.
  const ImexStartReason reason = imex_ ? ImexStartReason::kPeersChanged : next_start_reason_;
  StopImex();
  restart_at_.reset();
  StartImex(reason);
}

void ImexDaemon::StartImex(ImexStartReason reason) {
  auto child = common::ChildProcess::Spawn({.argv = {options_.imex_binary, "-c", config_path_.string()}});
  const auto now = Clock::now();
  if (!child.ok()) {
    LOG_ERROR("cannot start nvidia-imex", {{"binary", options_.imex_binary}, {"err", child.status()},
                                           {"retryInMs", restart_backoff_.count()}});
    restart_at_ = now + restart_backoff_;
    restart_backoff_ = std::min(restart_backoff_ * 2, kRestartBackoffMax);
    return;
  }
  imex_ = std::move(*child);
  imex_started_at_ = now;
  metrics_->CountImexStart(reason);
  {
    common::MutexLock lock(mutex_);
    ++imex_generation_;
    imex_running_ = true;
  }
  poll_cv_.notify_all();
  LOG_INFO(2, "nvidia-imex started", {{"pid", imex_->pid()}, {"config", config_path_}});
}

bool ImexDaemon::ImexAnswered() {
  common::MutexLock lock(mutex_);
  return imex_running_ && answered_generation_ == imex_generation_;
}

void ImexDaemon::ForgetImex() {
  imex_.reset();
  {
    common::MutexLock lock(mutex_);
    ++imex_generation_;  // the poller drops answers of the old process
    imex_running_ = false;
    ready_ = false;
    metrics_->SetImexState("NOT_RUNNING");  // under mutex_: no older answer overwrites it
  }
  poll_cv_.notify_all();
}

void ImexDaemon::StopImex() {
  if (!imex_) return;
  const pid_t pid = imex_->pid();
  const common::ExitInfo exit = imex_->Terminate(options_.stop_grace);
  ForgetImex();
  LOG_INFO(2, "nvidia-imex stopped", {{"pid", pid}, {"exit", exit.ToString()}});
}

void ImexDaemon::OnImexExited() {
  std::optional<common::ExitInfo> exit = imex_->TryWait();
  if (!exit) return;
  const auto now = Clock::now();
  if (now - imex_started_at_ >= kRestartBackoffReset) restart_backoff_ = kRestartBackoffMin;
  LOG_WARNING("nvidia-imex exited unexpectedly; restarting it",
              {{"exit", exit->ToString()}, {"retryInMs", restart_backoff_.count()}});
  ForgetImex();
  next_start_reason_ = ImexStartReason::kExited;
  restart_at_ = now + restart_backoff_;
  restart_backoff_ = std::min(restart_backoff_ * 2, kRestartBackoffMax);
  // The crashed daemon already sent no goodbye; a reload window does not
  // carry over to the next process.
  reload_at_.reset();
  last_reload_.reset();
}

void ImexDaemon::PublishIfNeeded() {
  if (clique_deleted_) return;
  bool imex_ready = false;
  std::string fabric_problem;
  {
    common::MutexLock lock(mutex_);
    imex_ready = imex_running_ && ready_generation_ == imex_generation_ && ready_;
    fabric_problem = fabric_problem_;
  }
  DaemonStatus desired{.status = std::string(imex_ready && fabric_problem.empty() ? kDaemonReady : kDaemonNotReady)};
  if (!fabric_problem.empty()) {
    desired.reason = kReasonFabricUnhealthy;
    desired.message = std::move(fabric_problem);
  }
  if (!entry_missing_ && desired == published_) {
    publish_retry_at_.reset();
    return;
  }
  const auto now = Clock::now();
  if (publish_retry_at_ && now < *publish_retry_at_) return;
  auto result = membership_.Publish(desired);
  if (!result.ok()) {
    LOG_ERROR("cannot publish this daemon's status", {{"clique", membership_.clique_name()}, {"status", desired.status},
                                                        {"err", result.status()},
                                                        {"retryInMs", publish_backoff_.count()}});
    publish_retry_at_ = now + publish_backoff_;
    publish_backoff_ = std::min(publish_backoff_ * 2, kPublishBackoffMax);
    return;
  }
  publish_retry_at_.reset();
  publish_backoff_ = kPublishBackoffMin;
  metrics_->SetPublishedReady(desired.status == kDaemonReady);
  if (desired != published_) {
    // With the written object's resourceVersion (gate off: the domain's,
    // whose watch event the plugin logs; with cliques: this pod's).
    const nlohmann::json& metadata = result->value("metadata", nlohmann::json::object());
    LOG_INFO(2, "status published", {{"clique", membership_.clique_name()}, {"status", desired.status},
                                         {"reason", desired.reason},
                                         {"resourceVersion", metadata.value("resourceVersion", "")}});
  }
  published_ = std::move(desired);
  // Gate off, the answer is the ComputeDomain, the newest state: act on it
  // now rather than on its watch event (which OnCliqueChanged then skips as
  // not newer). With cliques it is our pod; the controller writes the entry.
  if (options_.store == MembershipStore::kComputeDomainStatus) OnCliqueChanged(&*result);
}

void ImexDaemon::PollReadiness(std::stop_token stop) {
  const common::SpawnOptions ctl{.argv = {options_.imex_ctl_binary, "-c", config_path_.string(), "-q"}};
  while (!stop.stop_requested()) {
    if (options_.read_fabric) CheckFabric();
    std::uint64_t generation = 0;
    bool running = false;
    bool ready = false;
    {
      common::MutexLock lock(mutex_);
      generation = imex_generation_;
      running = imex_running_;
      ready = running && ready_generation_ == generation && ready_;
    }
    if (running) {
      auto out = common::RunCommand(ctl, kCtlTimeout, stop);
      const bool now_ready = out.ok() && out->exit.success() && out->output == "READY\n";
      if (!now_ready && common::VerbosityEnabled(4)) {
        LOG_INFO(4, "nvidia-imex not ready", {{"answer", out.ok() ? out->output : out.status().ToString()}});
      }
      bool first_answer = false;
      bool readiness_changed = false;
      {
        common::MutexLock lock(mutex_);
        // Under mutex_, so an answer about a process already gone never
        // overwrites ForgetImex's NOT_RUNNING.
        if (imex_generation_ == generation && out.ok() && out->exit.success() && answered_generation_ != generation) {
          answered_generation_ = generation;
          first_answer = true;  // a held-back reload can go now
        }
        if (imex_generation_ == generation) {
          metrics_->SetImexState(out.ok() ? ImexStateFromCtlAnswer(out->output) : "UNKNOWN");
          if (now_ready) metrics_->SetFirstReady(Clock::now() - run_started_at_);
        }
        if (imex_generation_ == generation && (ready_generation_ != generation || ready_ != now_ready)) {
          ready_generation_ = generation;
          ready_ = now_ready;
          readiness_changed = true;
        }
      }
      if (readiness_changed) LOG_INFO(2, "nvidia-imex readiness changed", {{"ready", now_ready}});
      if (first_answer || readiness_changed) Wake();
      ready = now_ready;
    }
    const milliseconds interval = running && !ready ? kNotReadyPollInterval : options_.ready_poll_interval;
    common::MutexLock lock(mutex_);
    poll_cv_.wait_for(lock.native(), stop, interval, [&]() REQUIRES(mutex_) { return imex_generation_ != generation; });
  }
}

void ImexDaemon::CheckFabric() {
  FabricHealth health = JudgeFabricHealth(options_.read_fabric());
  if (health == fabric_seen_) return;
  // Logged once per change, not per poll.
  const std::string& node = options_.identity.node_name;
  const auto joined = [](const std::vector<std::string>& lines) { return fmt::format("{}", fmt::join(lines, "; ")); };
  if (health.unhealthy != fabric_seen_.unhealthy) {
    if (!health.healthy()) {
      LOG_WARNING("NVLink fabric unhealthy: this node's entry says NotReady",
                  {{"node", node}, {"gpus", joined(health.unhealthy)}});
    } else {
      LOG_INFO(0, "NVLink fabric healthy again: readiness follows nvidia-imex", {{"node", node}});
    }
  }
  if (health.limited != fabric_seen_.limited) {
    if (!health.limited.empty()) {
      LOG_WARNING("NVLink fabric at limited capacity; the entry stays Ready",
                  {{"node", node}, {"gpus", joined(health.limited)}});
    } else {
      LOG_INFO(2, "NVLink fabric no longer at limited capacity", {{"node", node}});
    }
  }
  if (health.unreadable != fabric_seen_.unreadable && !health.unreadable.empty()) {
    LOG_WARNING("cannot read the NVLink fabric info of some GPUs; they are not judged",
                {{"node", node}, {"err", joined(health.unreadable)}});
  }
  const bool problem_changed = health.unhealthy != fabric_seen_.unhealthy;
  metrics_->SetFabricUnhealthyGpus(health.unhealthy.size());
  fabric_seen_ = std::move(health);
  if (!problem_changed) return;
  {
    common::MutexLock lock(mutex_);
    fabric_problem_ = fabric_seen_.Message();
  }
  Wake();
}

}  // namespace nvdra::computedomain
