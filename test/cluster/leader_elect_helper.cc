// A process that runs one LeaderElector, for the two-process failover tests in
// leader_election_test.cc. Prints "leading <identity>" when it starts leading
// "leader <holder>" whenever it sees a new holder, and "stopped <identity>" after it stopped (and released, with release=1),
// one flushed line each, so the test can wait on them.
//
// Usage: leader_elect_helper KUBECONFIG NAMESPACE LEASE IDENTITY LEASE_MS RENEW_MS RETRY_MS RELEASE(0|1)
// SIGTERM stops it in order; exit 0 after a clean stop, 1 after losing the
// lease, 2 on bad arguments or set-up errors.

#include <chrono>
#include <cstdio>
#include <iostream>
#include <stop_token>
#include <string>

#include "common/signals.h"
#include "k8s/client.h"
#include "k8s/config.h"
#include "k8s/leader_election.h"

int main(int argc, char** argv) {
  using namespace nvdra;
  if (argc != 9) {
    std::cerr << "usage: " << argv[0]
              << " KUBECONFIG NAMESPACE LEASE IDENTITY LEASE_MS RENEW_MS RETRY_MS RELEASE(0|1)\n";
    return 2;
  }
  auto signals = common::ShutdownSignals::Install();
  if (!signals.ok()) {
    std::cerr << signals.status() << "\n";
    return 2;
  }
  k8s::ConfigSources sources;
  sources.kubeconfig = argv[1];
  sources.qps = 0;
  auto config = k8s::LoadConfig(sources);
  if (!config.ok()) {
    std::cerr << config.status() << "\n";
    return 2;
  }
  k8s::ClientOptions client_options;
  client_options.request_timeout = std::chrono::milliseconds(std::stoi(argv[6]) / 2);  // below the renew deadline
  auto client = k8s::Client::New(*config, client_options);
  if (!client.ok()) {
    std::cerr << client.status() << "\n";
    return 2;
  }
  const std::string identity = argv[4];
  k8s::LeaderElectionConfig le;
  le.lease_namespace = argv[2];
  le.lease_name = argv[3];
  le.identity = identity;
  le.lease_duration = std::chrono::milliseconds(std::stoi(argv[5]));
  le.renew_deadline = std::chrono::milliseconds(std::stoi(argv[6]));
  le.retry_period = std::chrono::milliseconds(std::stoi(argv[7]));
  le.release_on_cancel = std::string(argv[8]) == "1";
  le.on_started_leading = [&identity](std::stop_token) { std::cout << "leading " << identity << std::endl; };
  le.on_new_leader = [](const std::string& leader) { std::cout << "leader " << leader << std::endl; };
  auto elector = k8s::LeaderElector::New(client->get(), le);
  if (!elector.ok()) {
    std::cerr << elector.status() << "\n";
    return 2;
  }
  const common::Status result = (*elector)->Run((*signals)->token());
  std::cout << "stopped " << identity << std::endl;
  if (!result.ok()) {
    std::cerr << result << "\n";
    return 1;
  }
  return 0;
}
