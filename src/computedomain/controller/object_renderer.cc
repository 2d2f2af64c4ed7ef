#include "computedomain/controller/object_renderer.h"

#include <string>

#include <fmt/format.h>

#include "computedomain/clique_membership.h"
#include "computedomain/config.h"

namespace nvdra::computedomain::controller {

using common::StatusOr;
using nlohmann::json;

namespace {

using k8s::FeatureGatesEnvLine;
using k8s::ImagePullSecretsLine;

// The daemon container's metrics lines (placeholders METRICS_ENDPOINT_ENV,
// METRICS_PATH_ENV and METRICS_PORTS), each "" without an endpoint.
std::string MetricsEnvLine(std::string_view name, std::string_view endpoint, std::string_view value) {
  if (endpoint.empty()) return "";
  return fmt::format("- {{name: {}, value: {}}}", name, k8s::YamlQuoted(value));
}
std::string MetricsPortsLine(std::string_view endpoint, int port) {
  if (endpoint.empty()) return "";
  return fmt::format("ports: [{{name: {}, containerPort: {}, protocol: TCP}}]", kDaemonMetricsPortName, port);
}

// A request's selectors matching only `channel`'s device, or "".
std::string ChannelSelectorsLine(std::optional<int> channel) {
  if (!channel) return "";
  return fmt::format("selectors: [{{cel: {{expression: {}}}}}]",
                     k8s::YamlQuoted(fmt::format("device.attributes[\"compute-domain.nvidia.com\"].id == {}", *channel)));
}

}  // namespace

std::string DaemonObjectName(std::string_view cd_uid) { return fmt::format("computedomain-daemon-{}", cd_uid); }

TemplateValues DomainObjectRenderer::CommonValues(std::string_view ns, std::string_view name,
                                                  std::string_view cd_uid) {
  return {{"NAMESPACE", std::string(ns)},
          {"NAME", std::string(name)},
          {"FINALIZER", std::string(kFinalizer)},
          {"COMPUTE_DOMAIN_LABEL_KEY", std::string(kComputeDomainLabel)},
          {"COMPUTE_DOMAIN_UID", std::string(cd_uid)},
          {"TARGET_LABEL_KEY", std::string(kTargetLabel)}};
}

StatusOr<json> DomainObjectRenderer::DaemonSet(std::string_view cd_uid) const {
  TemplateValues values = CommonValues(options_.driver_namespace, DaemonObjectName(cd_uid), cd_uid);
  values.insert({{"IMAGE_NAME", options_.image_name},
                 {"LOG_VERBOSITY", std::to_string(options_.log_verbosity_cd_daemon)},
                 {"MAX_NODES_PER_IMEX_DOMAIN", std::to_string(options_.max_nodes_per_imex_domain)},
                 {"RESOURCE_CLAIM_TEMPLATE_NAME", DaemonObjectName(cd_uid)},
                 {"IMAGE_PULL_SECRETS", ImagePullSecretsLine(options_.image_pull_secret_names)},
                 {"FEATURE_GATES_ENV", FeatureGatesEnvLine(options_.daemon_feature_gates)},
                 {"METRICS_ENDPOINT_ENV",
                  MetricsEnvLine("HTTP_ENDPOINT", options_.daemon_http_endpoint, options_.daemon_http_endpoint)},
                 {"METRICS_PATH_ENV",
                  MetricsEnvLine("METRICS_PATH", options_.daemon_http_endpoint, options_.daemon_metrics_path)},
                 {"METRICS_PORTS", MetricsPortsLine(options_.daemon_http_endpoint, options_.daemon_metrics_port)}});
  return RenderTemplate(kDaemonSetTemplate, options_.templates.daemon_set, values);
}

StatusOr<json> DomainObjectRenderer::DaemonClaimTemplate(std::string_view cd_uid) const {
  return RenderTemplate(kDaemonClaimTemplate, options_.templates.daemon_claim,
                        CommonValues(options_.driver_namespace, DaemonObjectName(cd_uid), cd_uid));
}

StatusOr<json> DomainObjectRenderer::WorkloadClaimTemplate(const k8s::ComputeDomain& cd,
                                                           std::optional<int> channel) const {
  TemplateValues values = CommonValues(cd.namespace_name(), cd.channel_resource_claim_template_name(), cd.uid());
  // hostManaged always asks for one channel, as upstream.
  values["ALLOCATION_MODE"] = options_.host_managed ? "Single" : cd.channel_allocation_mode();
  values["CHANNEL_SELECTORS"] = ChannelSelectorsLine(channel);
  return RenderTemplate(kWorkloadClaimTemplate, options_.templates.workload_claim, values);
}

}  // namespace nvdra::computedomain::controller
