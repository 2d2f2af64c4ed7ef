// The compute-domain daemon's metrics (daemon_metrics.h) as a scrape shows
// them: nvidia-imex states from nvidia-imex-ctl's answers, clique entries
// counted by status for this clique only, the first READY kept, and failed
// API calls counted by verb where the daemon makes them: CliqueMembership's
// writes (over a scripted HTTP transport) and the informer's list and watch
// (over the fake API of the informer tests). Cancellations are not errors.

#include "computedomain/daemon_metrics.h"

#include <deque>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "computedomain/clique_membership.h"
#include "fake_list_watch.h"
#include "k8s/client.h"

namespace nvdra::computedomain {
namespace {

using common::MetricsRegistry;

// The value of the series written exactly as `series` ("name{a=\"b\"}"), or
// nullopt when the scrape has no such line.
std::optional<double> Sample(const MetricsRegistry& registry, const std::string& series) {
  const std::string text = "\n" + registry.Render();
  const std::size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return std::nullopt;
  const std::size_t begin = at + 1 + series.size() + 1;
  return std::stod(text.substr(begin, text.find('\n', begin) - begin));
}

std::string State(std::string_view state) {
  return "nvdra_compute_domain_daemon_imex_state{state=\"" + std::string(state) + "\"}";
}

TEST(ImexStateFromCtlAnswerTest, OneKnownWordOrUnknown) {
  EXPECT_EQ(ImexStateFromCtlAnswer("READY\n"), "READY");
  EXPECT_EQ(ImexStateFromCtlAnswer("WAITING_FOR_PEERS\n"), "WAITING_FOR_PEERS");
  EXPECT_EQ(ImexStateFromCtlAnswer("INITIALIZING"), "INITIALIZING");
  EXPECT_EQ(ImexStateFromCtlAnswer(""), "UNKNOWN");
  EXPECT_EQ(ImexStateFromCtlAnswer("READY now\n"), "UNKNOWN");
  EXPECT_EQ(ImexStateFromCtlAnswer("connect: connection refused\n"), "UNKNOWN");
  EXPECT_EQ(ImexStateFromCtlAnswer("ready\n"), "UNKNOWN") << "nvidia-imex-ctl prints upper case";
}

TEST(DaemonMetricsTest, StartsNotRunningWithEveryStateAndReasonAtZero) {
  MetricsRegistry registry;
  DaemonMetrics metrics(registry);
  for (std::string_view state : kImexStates) {
    EXPECT_EQ(Sample(registry, State(state)), state == "NOT_RUNNING" ? 1 : 0) << state;
  }
  for (const char* reason : {"initial", "exited", "peers_changed"}) {
    EXPECT_EQ(Sample(registry, std::string("nvdra_compute_domain_daemon_imex_starts_total{reason=\"") + reason + "\"}"),
              0)
        << reason;
  }
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_ready"), std::nullopt)
      << "no readiness without IMEX (a node without a clique ID): nothing for an alert to see as 0";
  for (const char* verb : {"get", "list", "watch", "patch", "apply"}) {
    EXPECT_EQ(Sample(registry, std::string("nvdra_compute_domain_daemon_api_errors_total{verb=\"") + verb + "\"}"), 0)
        << verb;
  }
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_file_writes_total{file=\"hosts\",result=\"error\"}"), 0);
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_imex_first_ready_seconds"), std::nullopt)
      << "no time to READY before READY";
}

TEST(DaemonMetricsTest, ExactlyOneStateIsSet) {
  MetricsRegistry registry;
  DaemonMetrics metrics(registry);
  metrics.SetImexState("WAITING_FOR_PEERS");
  EXPECT_EQ(Sample(registry, State("WAITING_FOR_PEERS")), 1);
  EXPECT_EQ(Sample(registry, State("NOT_RUNNING")), 0);
  metrics.SetImexState("READY");
  EXPECT_EQ(Sample(registry, State("READY")), 1);
  EXPECT_EQ(Sample(registry, State("WAITING_FOR_PEERS")), 0);
  metrics.SetImexState("SOMETHING_NEW");
  EXPECT_EQ(Sample(registry, State("UNKNOWN")), 1);
  EXPECT_EQ(Sample(registry, State("READY")), 0);
  EXPECT_EQ(Sample(registry, State("SOMETHING_NEW")), std::nullopt) << "no label value outside the fixed set";
}

TEST(DaemonMetricsTest, CliqueDaemonsCountOnlyThisCliqueByStatus) {
  MetricsRegistry registry;
  DaemonMetrics metrics(registry);
  const std::vector<CliqueMember> members = {
      {.node_name = "n1", .ip_address = "10.0.0.1", .clique_id = "c1", .index = 0, .status = "Ready"},
      {.node_name = "n2", .ip_address = "10.0.0.2", .clique_id = "c1", .index = 1, .status = "NotReady"},
      {.node_name = "n3", .ip_address = "10.0.0.3", .clique_id = "c1", .index = std::nullopt, .status = ""},
      {.node_name = "n4", .ip_address = "10.0.0.4", .clique_id = "c2", .index = 0, .status = "Ready"},
      {.node_name = "n5", .ip_address = "10.0.0.5", .clique_id = "c1", .index = 2, .status = "Ready"}};
  metrics.SetCliqueDaemons(members, "c1");
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_clique_daemons{status=\"Ready\"}"), 2);
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_clique_daemons{status=\"NotReady\"}"), 2);
  metrics.SetCliqueDaemons({}, "c1");
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_clique_daemons{status=\"Ready\"}"), 0);
}

TEST(DaemonMetricsTest, FirstReadyIsKeptAcrossRestarts) {
  MetricsRegistry registry;
  DaemonMetrics metrics(registry);
  metrics.SetFirstReady(std::chrono::milliseconds(2500));
  metrics.SetFirstReady(std::chrono::seconds(90));
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_imex_first_ready_seconds"), 2.5);
}

TEST(DaemonMetricsTest, CountersAndGauges) {
  MetricsRegistry registry;
  DaemonMetrics metrics(registry);
  metrics.CountImexStart(ImexStartReason::kInitial);
  metrics.CountImexStart(ImexStartReason::kExited);
  metrics.CountImexStart(ImexStartReason::kExited);
  metrics.CountImexReload();
  metrics.CountFileWrite(DaemonFile::kHosts, true);
  metrics.CountFileWrite(DaemonFile::kNodes, false);
  metrics.SetImexPeers(3);
  metrics.SetPublishedReady(true);
  metrics.SetFabricUnhealthyGpus(2);
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_imex_starts_total{reason=\"initial\"}"), 1);
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_imex_starts_total{reason=\"exited\"}"), 2);
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_imex_reloads_total"), 1);
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_file_writes_total{file=\"hosts\",result=\"success\"}"), 1);
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_file_writes_total{file=\"nodes.cfg\",result=\"error\"}"), 1);
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_imex_peers"), 3);
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_ready"), 1);
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_fabric_unhealthy_gpus"), 2);
}

// Answers every request with one status code, recording the methods; a
// request whose stop is requested is cancelled, as the curl transport does.
class StatusTransport final : public k8s::HttpTransport {
 public:
  explicit StatusTransport(int status) : status_(status) {}
  common::StatusOr<k8s::HttpResponse> RoundTrip(const k8s::HttpRequest& request, std::stop_token stop) override {
    if (stop.stop_requested()) return common::CancelledError("request cancelled");
    methods.push_back(request.method);
    k8s::HttpResponse response;
    response.status = status_;
    response.content_type = "application/json";
    response.body = status_ < 300 ? R"({"metadata": {"name": "x"}})"
                                  : R"({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403})";
    return response;
  }
  common::StatusOr<std::unique_ptr<k8s::HttpStream>> OpenStream(const k8s::HttpRequest&, std::stop_token) override {
    return common::UnavailableError("no streams here");
  }
  std::vector<std::string> methods;

 private:
  const int status_;
};

struct Api {
  explicit Api(int status) {
    auto owned = std::make_unique<StatusTransport>(status);
    transport = owned.get();
    k8s::RestConfig config;
    config.server = "https://fake";
    config.qps = 0;
    client = std::make_unique<k8s::Client>(config, std::move(owned));
  }
  StatusTransport* transport = nullptr;
  std::unique_ptr<k8s::Client> client;
};

DaemonIdentity Identity() {
  return {.compute_domain_uid = "u1", .clique_id = "c1", .node_name = "n1", .pod_name = "daemon-n1",
          .pod_namespace = "drv", .pod_uid = "p1", .pod_ip = "10.0.0.1"};
}

TEST(DaemonMetricsTest, FailedMembershipWritesAreCountedByVerb) {
  MetricsRegistry registry;
  DaemonMetrics metrics(registry);
  Api forbidden(403);
  CliqueMembership clique(*forbidden.client, Identity(), MembershipStore::kClique, "", "", &metrics);
  EXPECT_FALSE(clique.LabelPod().ok());
  EXPECT_FALSE(clique.Publish(kDaemonReady).ok());
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_api_errors_total{verb=\"patch\"}"), 2);
  CliqueMembership status(*forbidden.client, Identity(), MembershipStore::kComputeDomainStatus, "cd1", "ns1", &metrics);
  EXPECT_FALSE(status.Publish(kDaemonReady).ok());
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_api_errors_total{verb=\"apply\"}"), 1);
  EXPECT_FALSE(status.Leave().ok());
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_api_errors_total{verb=\"get\"}"), 1);

  // Cancelled calls are not errors; successful ones are not counted.
  std::stop_source cancelled;
  cancelled.request_stop();
  EXPECT_FALSE(clique.LabelPod(cancelled.get_token()).ok());
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_api_errors_total{verb=\"patch\"}"), 2);
  Api fine(200);
  CliqueMembership ok(*fine.client, Identity(), MembershipStore::kClique, "", "", &metrics);
  EXPECT_TRUE(ok.LabelPod().ok());
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_api_errors_total{verb=\"patch\"}"), 2);
}

TEST(DaemonMetricsTest, FailedListsAndWatchesAreCounted) {
  MetricsRegistry registry;
  DaemonMetrics metrics(registry);
  k8s::cache::testing::FakeApi api;
  std::unique_ptr<k8s::cache::ListWatch> counted = CountListWatchErrors(api.NewListWatch(), metrics);
  api.QueueList(common::UnavailableError("connection refused"));
  api.QueueList({}, "7");
  EXPECT_FALSE(counted->List({}, {}).ok());
  EXPECT_TRUE(counted->List({}, {}).ok());
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_api_errors_total{verb=\"list\"}"), 1);
  api.FailNextWatch(common::UnavailableError("reset"));
  EXPECT_FALSE(counted->Watch({}, {}).ok());
  EXPECT_TRUE(counted->Watch({}, {}).ok());
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_api_errors_total{verb=\"watch\"}"), 1);
  std::stop_source cancelled;
  cancelled.request_stop();
  EXPECT_EQ(counted->List({}, cancelled.get_token()).status().code(), common::StatusCode::kCancelled);
  EXPECT_EQ(Sample(registry, "nvdra_compute_domain_daemon_api_errors_total{verb=\"list\"}"), 1);
}

}  // namespace
}  // namespace nvdra::computedomain
