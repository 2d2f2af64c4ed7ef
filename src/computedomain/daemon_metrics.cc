#include "computedomain/daemon_metrics.h"

#include <algorithm>
#include <string>
#include <utility>

#include "computedomain/clique_membership.h"
#include "computedomain/labels.h"

namespace nvdra::computedomain {
namespace {

constexpr std::string_view kPrefix = "nvdra_compute_domain_daemon_";
// The verbs of the daemon's API calls (CliqueMembership, the informer).
constexpr std::string_view kApiVerbs[] = {"get", "list", "watch", "patch", "apply"};

std::string Name(std::string_view suffix) { return std::string(kPrefix) + std::string(suffix); }

std::string_view ReasonLabel(ImexStartReason reason) {
  switch (reason) {
    case ImexStartReason::kInitial:
      return "initial";
    case ImexStartReason::kExited:
      return "exited";
    case ImexStartReason::kPeersChanged:
      return "peers_changed";
  }
  return "initial";
}

std::string_view FileLabel(DaemonFile file) {
  switch (file) {
    case DaemonFile::kConfig:
      return "imexd.cfg";
    case DaemonFile::kNodes:
      return "nodes.cfg";
    case DaemonFile::kHosts:
      return "hosts";
  }
  return "imexd.cfg";
}

bool Failed(const common::Status& status) {
  return !status.ok() && status.code() != common::StatusCode::kCancelled;
}

// Forwards to the inner ListWatch, counting its failures.
class ErrorCountingListWatch final : public k8s::cache::ListWatch {
 public:
  ErrorCountingListWatch(std::unique_ptr<k8s::cache::ListWatch> inner, DaemonMetrics& metrics)
      : inner_(std::move(inner)), metrics_(metrics) {}

  common::StatusOr<k8s::cache::ListResult> List(const k8s::cache::ListOptions& options,
                                                std::stop_token stop) override {
    auto result = inner_->List(options, stop);
    if (Failed(result.status())) metrics_.CountApiError("list");
    return result;
  }
  common::StatusOr<std::string> ListEach(const k8s::cache::ListOptions& options, std::stop_token stop,
                                         const k8s::cache::ListVisitor& visitor) override {
    auto result = inner_->ListEach(options, stop, visitor);
    if (Failed(result.status())) metrics_.CountApiError("list");
    return result;
  }
  common::StatusOr<std::unique_ptr<k8s::cache::WatchStream>> Watch(const k8s::cache::WatchOptions& options,
                                                                   std::stop_token stop) override {
    auto result = inner_->Watch(options, stop);
    if (Failed(result.status())) metrics_.CountApiError("watch");
    return result;
  }

 private:
  const std::unique_ptr<k8s::cache::ListWatch> inner_;
  DaemonMetrics& metrics_;
};

}  // namespace

std::string_view ImexStateFromCtlAnswer(std::string_view output) {
  const std::size_t end = output.find_last_not_of(" \t\r\n");
  const std::string_view word = end == std::string_view::npos ? std::string_view() : output.substr(0, end + 1);
  for (std::string_view state : kImexStates) {
    if (word == state) return state;
  }
  return "UNKNOWN";
}

DaemonMetrics::DaemonMetrics(common::MetricsRegistry& registry)
    : imex_state_(registry.AddGauge(
          Name("imex_state"),
          "State of this node's nvidia-imex as nvidia-imex-ctl -q reports it (1 for the current state), "
          "NOT_RUNNING without a process, UNKNOWN when the query fails.",
          {"state"})),
      imex_starts_(registry.AddCounter(Name("imex_starts_total"),
                                       "nvidia-imex processes started, by reason (initial, exited: after it "
                                       "exited on its own, peers_changed: IP mode).",
                                       {"reason"})),
      imex_reloads_(registry
                        .AddCounter(Name("imex_reloads_total"),
                                    "SIGUSR1s sent to nvidia-imex to re-read its peers' names.", {})
                        .WithLabels({})),
      first_ready_seconds_(registry.AddGauge(
          Name("imex_first_ready_seconds"),
          "Seconds from the daemon's start to the first READY answer of nvidia-imex.", {})),
      ready_(registry.AddGauge(Name("ready"),
                               "1 when the status this daemon last published for its node is Ready, else 0.", {})),
      clique_daemons_(registry.AddGauge(Name("clique_daemons"),
                                        "Entries of this daemon's clique (own included), by status.", {"status"})),
      imex_peers_(registry
                      .AddGauge(Name("imex_peers"),
                                "Peers nvidia-imex was given (own included): names mapped in the hosts file, "
                                "or IP addresses in the nodes file.",
                                {})
                      .WithLabels({})),
      file_writes_(registry.AddCounter(Name("file_writes_total"),
                                       "Writes of nvidia-imex's files (imexd.cfg, nodes.cfg, hosts), by result.",
                                       {"file", "result"})),
      api_errors_(registry.AddCounter(Name("api_errors_total"), "Failed Kubernetes API requests, by verb.",
                                      {"verb"})),
      fabric_unhealthy_gpus_(registry
                                 .AddGauge(Name("fabric_unhealthy_gpus"),
                                           "GPUs of this node whose NVLink fabric health is Unhealthy.", {})
                                 .WithLabels({})) {
  // Every state, reason, file and verb from the first scrape, so queries
  // (rates, alerts) see zeros rather than absent series.
  for (std::string_view state : kImexStates) imex_state_.WithLabels({std::string(state)});
  SetImexState("NOT_RUNNING");
  for (ImexStartReason reason : {ImexStartReason::kInitial, ImexStartReason::kExited, ImexStartReason::kPeersChanged}) {
    imex_starts_.WithLabels({std::string(ReasonLabel(reason))});
  }
  SetCliqueDaemons({}, "");
  for (DaemonFile file : {DaemonFile::kConfig, DaemonFile::kNodes, DaemonFile::kHosts}) {
    for (const char* result : {"success", "error"}) file_writes_.WithLabels({std::string(FileLabel(file)), result});
  }
  for (std::string_view verb : kApiVerbs) api_errors_.WithLabels({std::string(verb)});
}

void DaemonMetrics::SetImexState(std::string_view state) {
  const std::string_view known = ImexStateFromCtlAnswer(state);
  for (std::string_view each : kImexStates) imex_state_.WithLabels({std::string(each)}).Set(each == known ? 1 : 0);
}

void DaemonMetrics::CountImexStart(ImexStartReason reason) {
  imex_starts_.WithLabels({std::string(ReasonLabel(reason))}).Inc();
}

void DaemonMetrics::CountImexReload() { imex_reloads_.Inc(); }

void DaemonMetrics::SetFirstReady(std::chrono::duration<double> since_start) {
  std::call_once(first_ready_once_, [&] { first_ready_seconds_.WithLabels({}).Set(since_start.count()); });
}

void DaemonMetrics::SetPublishedReady(bool ready) { ready_.WithLabels({}).Set(ready ? 1 : 0); }

void DaemonMetrics::SetCliqueDaemons(const std::vector<CliqueMember>& members, std::string_view clique_id) {
  const auto ready = std::count_if(members.begin(), members.end(), [&](const CliqueMember& m) {
    return m.clique_id == clique_id && m.status == kDaemonReady;
  });
  const auto in_clique = std::count_if(members.begin(), members.end(),
                                       [&](const CliqueMember& m) { return m.clique_id == clique_id; });
  clique_daemons_.WithLabels({std::string(kDaemonReady)}).Set(static_cast<double>(ready));
  clique_daemons_.WithLabels({std::string(kDaemonNotReady)}).Set(static_cast<double>(in_clique - ready));
}

void DaemonMetrics::SetImexPeers(std::size_t peers) { imex_peers_.Set(static_cast<double>(peers)); }

void DaemonMetrics::CountFileWrite(DaemonFile file, bool ok) {
  file_writes_.WithLabels({std::string(FileLabel(file)), ok ? "success" : "error"}).Inc();
}

void DaemonMetrics::CountApiError(std::string_view verb) { api_errors_.WithLabels({std::string(verb)}).Inc(); }

void DaemonMetrics::SetFabricUnhealthyGpus(std::size_t gpus) {
  fabric_unhealthy_gpus_.Set(static_cast<double>(gpus));
}

std::unique_ptr<k8s::cache::ListWatch> CountListWatchErrors(std::unique_ptr<k8s::cache::ListWatch> inner,
                                                            DaemonMetrics& metrics) {
  return std::make_unique<ErrorCountingListWatch>(std::move(inner), metrics);
}

}  // namespace nvdra::computedomain
