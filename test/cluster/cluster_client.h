#pragma once

// What the cluster-tier suites of the Kubernetes client share: a control
// plane, its REST config, a client on it without a client-side rate limit (the
// suites measure the server, not our limiter), and a namespace for the suite.
// Ownership: ClusterClient owns all three; destroy the client before the
// cluster (member order does). Thread-compatible.

#include <memory>
#include <string>

#include "k8s/client.h"
#include "k8s/config.h"
#include "test_cluster.h"

namespace nvdra::testing {

struct ClusterClient {
  std::unique_ptr<TestCluster> cluster;
  k8s::RestConfig config;
  std::unique_ptr<k8s::Client> client;
};

// Starts a control plane and a client on it and, when `ns` is not empty,
// creates that namespace. Returns "" on success, else what failed (with the
// launcher's log when the cluster did not start).
std::string StartClusterClient(ClusterClient& out, const std::string& ns = "",
                               const k8s::ClientOptions& options = {});

}  // namespace nvdra::testing
