#include "k8s/config.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include <yaml-cpp/yaml.h>

#include "k8s/internal/base64.h"

namespace nvdra::k8s {
namespace {

using common::Status;
using common::StatusOr;
namespace fs = std::filesystem;

// One named entry (cluster, user or context) and the file it came from, so
// relative paths and error messages refer to the right file.
struct Entry {
  YAML::Node node;
  fs::path file;
};

struct Merged {
  std::map<std::string, Entry> clusters, users, contexts;
  std::string current_context;
  fs::path current_context_file;
};

StatusOr<std::string> ReadFile(const fs::path& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return common::ErrnoToStatus(errno != 0 ? errno : ENOENT, what + " " + path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A scalar field as a string; "" when absent. kInvalidArgument when present
// but not a scalar.
StatusOr<std::string> Scalar(const YAML::Node& map, const char* key, const std::string& where) {
  const YAML::Node v = map[key];
  if (!v || v.IsNull()) return std::string();
  if (!v.IsScalar()) return common::InvalidArgumentError(where + "." + key + ": not a string");
  return v.as<std::string>();
}

StatusOr<bool> Bool(const YAML::Node& map, const char* key, const std::string& where) {
  const YAML::Node v = map[key];
  if (!v || v.IsNull()) return false;
  try {
    return v.as<bool>();
  } catch (const YAML::Exception&) {
    return common::InvalidArgumentError(where + "." + key + ": not a boolean");
  }
}

// Adds the named entries of `list` (clusters, users or contexts) that are
// not yet known: the first file to define a name wins.
Status MergeList(const YAML::Node& root, const char* list, const char* body, const fs::path& file,
                 std::map<std::string, Entry>& into) {
  const YAML::Node items = root[list];
  if (!items || items.IsNull()) return common::OkStatus();
  const std::string where = file.string() + ": " + list;
  if (!items.IsSequence()) return common::InvalidArgumentError(where + ": not a list");
  for (std::size_t i = 0; i < items.size(); ++i) {
    const YAML::Node item = items[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!item.IsMap()) return common::InvalidArgumentError(at + ": not a map");
    ASSIGN_OR_RETURN(std::string name, Scalar(item, "name", at));
    if (name.empty()) return common::InvalidArgumentError(at + ".name: missing");
    const YAML::Node content = item[body];
    if (content && !content.IsNull() && !content.IsMap()) {
      return common::InvalidArgumentError(at + "." + body + ": not a map");
    }
    into.try_emplace(name, Entry{content ? content : YAML::Node(YAML::NodeType::Map), file});
  }
  return common::OkStatus();
}

Status MergeFile(const fs::path& file, Merged& merged) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(file, "kubeconfig"));
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return common::InvalidArgumentError("kubeconfig " + file.string() + ": " + e.what());
  }
  if (root.IsNull()) return common::OkStatus();  // an empty file adds nothing
  if (!root.IsMap()) return common::InvalidArgumentError("kubeconfig " + file.string() + ": not a map");
  RETURN_IF_ERROR(MergeList(root, "clusters", "cluster", file, merged.clusters));
  RETURN_IF_ERROR(MergeList(root, "users", "user", file, merged.users));
  RETURN_IF_ERROR(MergeList(root, "contexts", "context", file, merged.contexts));
  if (merged.current_context.empty()) {
    ASSIGN_OR_RETURN(merged.current_context, Scalar(root, "current-context", file.string()));
    merged.current_context_file = file;
  }
  return common::OkStatus();
}

fs::path Resolve(const fs::path& relative_to_file, const std::string& path) {
  fs::path p(path);
  if (p.is_relative()) p = relative_to_file.parent_path() / p;
  return p;
}

// PEM from `<key>-data` (base64) or from the file `<key>`; data wins, as in
// client-go. "" when neither is set.
StatusOr<std::string> Pem(const Entry& entry, const std::string& key, const std::string& where) {
  ASSIGN_OR_RETURN(std::string data, Scalar(entry.node, (key + "-data").c_str(), where));
  if (!data.empty()) {
    auto decoded = internal::Base64Decode(data);
    if (!decoded) return common::InvalidArgumentError(where + "." + key + "-data: not valid base64");
    return *decoded;
  }
  ASSIGN_OR_RETURN(std::string path, Scalar(entry.node, key.c_str(), where));
  if (path.empty()) return std::string();
  return ReadFile(Resolve(entry.file, path), where + "." + key);
}

}  // namespace

std::vector<fs::path> SplitKubeconfigList(const std::string& list) {
  std::vector<fs::path> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t end = list.find(':', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) out.emplace_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

StatusOr<RestConfig> LoadKubeconfig(const std::vector<fs::path>& files, const std::string& context) {
  if (files.empty()) return common::InvalidArgumentError("kubeconfig: no file given");
  Merged merged;
  bool any = false;
  for (const auto& file : files) {
    std::error_code ec;
    if (files.size() > 1 && !fs::exists(file, ec)) continue;  // kubectl skips missing list entries
    RETURN_IF_ERROR(MergeFile(file, merged));
    any = true;
  }
  if (!any) return common::NotFoundError("kubeconfig: none of the listed files exists");

  const std::string files_text = files.size() == 1 ? files[0].string() : "(merged list)";
  const std::string context_name = context.empty() ? merged.current_context : context;
  if (context_name.empty()) {
    return common::InvalidArgumentError("kubeconfig " + files_text + ": current-context is not set");
  }
  auto ctx_it = merged.contexts.find(context_name);
  if (ctx_it == merged.contexts.end()) {
    return common::InvalidArgumentError("kubeconfig " + files_text + ": context \"" + context_name +
                                        "\" not found");
  }
  const Entry& ctx = ctx_it->second;
  const std::string ctx_where = ctx.file.string() + ": contexts[" + context_name + "].context";
  ASSIGN_OR_RETURN(std::string cluster_name, Scalar(ctx.node, "cluster", ctx_where));
  ASSIGN_OR_RETURN(std::string user_name, Scalar(ctx.node, "user", ctx_where));
  ASSIGN_OR_RETURN(std::string ns, Scalar(ctx.node, "namespace", ctx_where));

  RestConfig config;
  config.origin = "kubeconfig " + files_text + " context " + context_name;
  if (!ns.empty()) config.default_namespace = ns;

  auto cl_it = merged.clusters.find(cluster_name);
  if (cl_it == merged.clusters.end()) {
    return common::InvalidArgumentError(ctx_where + ".cluster: cluster \"" + cluster_name + "\" not found");
  }
  const Entry& cluster = cl_it->second;
  const std::string cl_where = cluster.file.string() + ": clusters[" + cluster_name + "].cluster";
  ASSIGN_OR_RETURN(config.server, Scalar(cluster.node, "server", cl_where));
  if (config.server.empty()) return common::InvalidArgumentError(cl_where + ".server: missing");
  while (!config.server.empty() && config.server.back() == '/') config.server.pop_back();
  ASSIGN_OR_RETURN(config.ca_pem, Pem(cluster, "certificate-authority", cl_where));
  ASSIGN_OR_RETURN(config.insecure_skip_tls_verify, Bool(cluster.node, "insecure-skip-tls-verify", cl_where));
  ASSIGN_OR_RETURN(config.tls_server_name, Scalar(cluster.node, "tls-server-name", cl_where));

  if (!user_name.empty()) {
    auto us_it = merged.users.find(user_name);
    if (us_it == merged.users.end()) {
      return common::InvalidArgumentError(ctx_where + ".user: user \"" + user_name + "\" not found");
    }
    const Entry& user = us_it->second;
    const std::string us_where = user.file.string() + ": users[" + user_name + "].user";
    if (user.node["exec"] || user.node["auth-provider"]) {
      return common::UnimplementedError(us_where + ": exec and auth-provider credentials are not supported");
    }
    ASSIGN_OR_RETURN(config.bearer_token, Scalar(user.node, "token", us_where));
    ASSIGN_OR_RETURN(std::string token_file, Scalar(user.node, "tokenFile", us_where));
    if (config.bearer_token.empty() && !token_file.empty()) {
      config.token_source = std::make_shared<FileTokenSource>(Resolve(user.file, token_file));
      // Read once now, so a bad path is reported at start-up, not at the first request.
      RETURN_IF_ERROR(config.token_source->Token().status().WithContext(us_where + ".tokenFile"));
    }
    ASSIGN_OR_RETURN(config.client_cert_pem, Pem(user, "client-certificate", us_where));
    ASSIGN_OR_RETURN(config.client_key_pem, Pem(user, "client-key", us_where));
    if (config.client_cert_pem.empty() != config.client_key_pem.empty()) {
      return common::InvalidArgumentError(us_where + ": client-certificate and client-key must be set together");
    }
  }
  return config;
}

StatusOr<RestConfig> LoadInClusterConfig(const std::string& host, const std::string& port,
                                         const fs::path& service_account_dir) {
  if (host.empty() || port.empty()) {
    return common::FailedPreconditionError(
        "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set "
        "(or pass --kubeconfig)");
  }
  RestConfig config;
  config.origin = "in-cluster";
  const bool ipv6 = host.find(':') != std::string::npos && host.front() != '[';
  config.server = "https://" + (ipv6 ? "[" + host + "]" : host) + ":" + port;
  ASSIGN_OR_RETURN(config.ca_pem, ReadFile(service_account_dir / "ca.crt", "in-cluster CA"));
  config.token_source = std::make_shared<FileTokenSource>(service_account_dir / "token");
  RETURN_IF_ERROR(config.token_source->Token().status().WithContext("in-cluster config"));
  auto ns = ReadFile(service_account_dir / "namespace", "in-cluster namespace");
  if (ns.ok()) {
    std::string trimmed = *ns;
    while (!trimmed.empty() && (trimmed.back() == '\n' || trimmed.back() == ' ')) trimmed.pop_back();
    if (!trimmed.empty()) config.default_namespace = trimmed;
  }
  return config;
}

StatusOr<RestConfig> LoadConfig(const ConfigSources& sources) {
  StatusOr<RestConfig> config =
      sources.kubeconfig.empty()
          ? LoadInClusterConfig(sources.service_host, sources.service_port, sources.service_account_dir)
          : LoadKubeconfig(SplitKubeconfigList(sources.kubeconfig), sources.context);
  if (!config.ok()) return config;
  config->qps = sources.qps;
  config->burst = sources.burst;
  return config;
}

ConfigSources ConfigSourcesFromEnvironment(const common::KubeClientFlags& flags) {
  ConfigSources sources;
  sources.kubeconfig = flags.kubeconfig;
  sources.qps = flags.qps;
  sources.burst = flags.burst;
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  sources.service_host = host != nullptr ? host : "";
  sources.service_port = port != nullptr ? port : "";
  return sources;
}

}  // namespace nvdra::k8s
