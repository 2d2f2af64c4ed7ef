#include "cluster_client.h"

#include <sstream>

namespace nvdra::testing {

std::string StartClusterClient(ClusterClient& out, const std::string& ns,
                               const k8s::ClientOptions& options) {
  std::string error;
  out.cluster = TestCluster::Start(&error);
  if (out.cluster == nullptr) return "control plane did not start: " + error;
  k8s::ConfigSources sources;
  sources.kubeconfig = out.cluster->kubeconfig().string();
  sources.qps = 0;  // no client-side limit
  auto config = k8s::LoadConfig(sources);
  if (!config.ok()) return "kubeconfig: " + config.status().ToString();
  out.config = *config;
  auto client = k8s::Client::New(*config, options);
  if (!client.ok()) return "client: " + client.status().ToString();
  out.client = std::move(*client);
  if (!ns.empty()) {
    auto created = out.client->Create(
        k8s::resources::kNamespaces, "",
        {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
    if (!created.ok()) return "namespace " + ns + ": " + created.status().ToString();
  }
  return "";
}

}  // namespace nvdra::testing
