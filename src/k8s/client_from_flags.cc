#include "k8s/client_from_flags.h"

#include <utility>

#include "k8s/config.h"

namespace nvdra::k8s {

common::StatusOr<std::unique_ptr<Client>> ClientFromFlags(const common::KubeClientFlags& flags,
                                                          const std::string& user_agent, ClientOptions options) {
  common::StatusOr<RestConfig> rest = LoadConfig(ConfigSourcesFromEnvironment(flags));
  if (!rest.ok()) return rest.status().WithContext("load the API server configuration");
  if (!user_agent.empty()) rest->user_agent = user_agent;
  common::StatusOr<std::unique_ptr<Client>> client = Client::New(*rest, std::move(options));
  if (!client.ok()) return client.status().WithContext("create the API client");
  return client;
}

}  // namespace nvdra::k8s
