#pragma once

// The API client a binary builds from its --kubeconfig, --kube-api-qps and
// --kube-api-burst flags: kubeconfig or in-cluster configuration (the
// environment's KUBECONFIG and service-account files, read here on main's
// behalf), then a curl-backed Client.
//
// Thread-safety: a function without shared state; called at start-up.

#include <memory>
#include <string>

#include "common/flags.h"
#include "common/status.h"
#include "k8s/client.h"

namespace nvdra::k8s {

// `user_agent` empty keeps the default. Errors of LoadConfig ("load the API
// server configuration: ...") and Client::New ("create the API client: ...").
common::StatusOr<std::unique_ptr<Client>> ClientFromFlags(const common::KubeClientFlags& flags,
                                                          const std::string& user_agent = "",
                                                          ClientOptions options = {});

}  // namespace nvdra::k8s
