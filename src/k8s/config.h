#pragma once

// Where the API server is and how to authenticate to it: RestConfig, loaded
// from kubeconfig files or from in-cluster ServiceAccount files.
//
// Defines: RestConfig, ConfigSources, LoadConfig, LoadKubeconfig,
// LoadInClusterConfig, ConfigSourcesFromEnvironment.
//
// Resolution follows the upstream NVIDIA binaries: the `--kubeconfig` flag
// (twin of KUBECONFIG) names one file or a colon-separated list merged
// first-wins, like kubectl; an empty value means in-cluster config. Only
// ConfigSourcesFromEnvironment reads the environment, and only main calls it.
//
// Certificates and keys are read into memory at load time (the transport
// hands them to TLS as blobs); the bearer token of a `tokenFile` or of
// in-cluster config is re-read as it rotates (FileTokenSource).
//
// Ownership: values; a RestConfig shares its token source (thread-safe) with
// its copies. Thread-safety: thread-compatible values; the loaders are
// re-entrant.

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/flags.h"
#include "common/status.h"
#include "k8s/token_source.h"

namespace nvdra::k8s {

struct RestConfig {
  std::string server;               // "https://host:port", no trailing slash
  std::string ca_pem;               // trusted CAs (PEM); empty: the system store
  bool insecure_skip_tls_verify = false;
  std::string tls_server_name;      // name to verify the server certificate against
  std::string client_cert_pem;      // client certificate chain (PEM), with client_key_pem
  std::string client_key_pem;
  std::string bearer_token;         // a static token; ignored when token_source is set
  std::shared_ptr<FileTokenSource> token_source;  // rotating token file
  std::string default_namespace = "default";  // context namespace or in-cluster namespace file
  double qps = 5;                   // client-side rate limit (token bucket)
  int burst = 10;
  std::string user_agent = "nvdra";
  std::string origin;               // for messages: "kubeconfig /x context y" or "in-cluster"
};

// Everything the loader needs, filled by main (ConfigSourcesFromEnvironment)
// or by a test.
struct ConfigSources {
  // --kubeconfig / KUBECONFIG: one path or a colon-separated list. Empty:
  // in-cluster.
  std::string kubeconfig;
  std::string context;  // overrides current-context when not empty
  // In-cluster: KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT.
  std::string service_host;
  std::string service_port;
  std::filesystem::path service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
  double qps = 5;
  int burst = 10;
};

// Kubeconfig when `sources.kubeconfig` is set, in-cluster otherwise; qps and
// burst copied from `sources`. Errors as for the two loaders below.
common::StatusOr<RestConfig> LoadConfig(const ConfigSources& sources);

// Merges `files` first-wins (the first file defining a cluster, user, context
// or current-context wins) and resolves `context` (or current-context).
// Relative certificate and token paths are relative to the file that names
// them. In a list of several files, missing ones are skipped as kubectl does;
// a single missing file, or a list with none present, is kNotFound.
// kInvalidArgument naming the file and field for bad YAML, an unknown
// context/cluster/user, a missing server, bad base64, or a client certificate
// without its key. A user with no credentials is not an error (anonymous).
// kNotFound / kPermissionDenied naming the file for unreadable certificate,
// key or CA files. `exec` credential plugins are kUnimplemented.
common::StatusOr<RestConfig> LoadKubeconfig(const std::vector<std::filesystem::path>& files,
                                            const std::string& context = "");

// In-cluster config: https://host:port (an IPv6 host is bracketed), the CA
// and namespace files in `service_account_dir`, and its `token` file re-read
// as it rotates. kFailedPrecondition when host or port is empty (not in a
// cluster); kNotFound naming the file when the token or CA is missing. A
// missing namespace file means "default".
common::StatusOr<RestConfig> LoadInClusterConfig(const std::string& host, const std::string& port,
                                                 const std::filesystem::path& service_account_dir);

// Splits a KUBECONFIG-style list on ':' dropping empty entries.
std::vector<std::filesystem::path> SplitKubeconfigList(const std::string& list);

// For main only: the flag values plus KUBERNETES_SERVICE_HOST/PORT from the
// environment.
ConfigSources ConfigSourcesFromEnvironment(const common::KubeClientFlags& flags);

}  // namespace nvdra::k8s
