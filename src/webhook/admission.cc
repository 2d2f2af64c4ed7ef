#include "webhook/admission.h"

#include <array>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "api/opaque_config.h"
#include "common/json_depth.h"
#include "common/json_fields.h"

namespace nvdra::webhook {

using common::JsonFind;
using common::JsonMember;
using common::JsonString;
using common::Status;
using common::StatusOr;
using nlohmann::json;

namespace {

constexpr std::string_view kAdmissionApiVersion = "admission.k8s.io/v1";
constexpr std::string_view kResourceGroup = "resource.k8s.io";
constexpr std::array<std::string_view, 3> kResourceVersions = {"v1", "v1beta2", "v1beta1"};

// Which config kinds each of our drivers acts on; any other kind under that
// driver is a config the plugin would never apply (or reject at Prepare).
struct DriverKinds {
  std::string_view driver;
  std::vector<api::ConfigKind> kinds;
  std::string_view other_driver;
};

const DriverKinds* KindsOf(std::string_view driver) {
  static const std::array<DriverKinds, 2> table{
      DriverKinds{kGpuDriverName,
                  {api::ConfigKind::kGpuConfig, api::ConfigKind::kMigDeviceConfig, api::ConfigKind::kVfioDeviceConfig},
                  kComputeDomainDriverName},
      DriverKinds{kComputeDomainDriverName,
                  {api::ConfigKind::kComputeDomainChannelConfig, api::ConfigKind::kComputeDomainDaemonConfig},
                  kGpuDriverName},
  };
  for (const DriverKinds& entry : table) {
    if (entry.driver == driver) return &entry;
  }
  return nullptr;
}

std::string KindList(const std::vector<api::ConfigKind>& kinds) {
  std::string out;
  for (api::ConfigKind kind : kinds) out += fmt::format("{}{}", out.empty() ? "" : ", ", api::ConfigKindName(kind));
  return out;
}

// One config's problem, or nullopt when it is valid.
std::optional<std::string> CheckOne(const DriverKinds& driver, const json& parameters, const std::string& where,
                                    const common::FeatureGates& gates) {
  StatusOr<api::OpaqueConfig> decoded = api::DecodeOpaqueConfig(parameters, where);
  if (!decoded.ok()) return std::string(decoded.status().message());
  bool fits = false;
  for (api::ConfigKind kind : driver.kinds) fits = fits || kind == decoded->kind;
  if (!fits) {
    return fmt::format("{}.kind: {} is not a configuration of driver {} (its kinds: {}); set opaque.driver to {}",
                       where, api::ConfigKindName(decoded->kind), driver.driver, KindList(driver.kinds),
                       driver.other_driver);
  }
  if (Status valid = api::ValidateConfig(*decoded, where, gates); !valid.ok()) return std::string(valid.message());
  return std::nullopt;
}

// devices.config, or an empty list; kInvalidArgument when the object is not
// shaped like a claim spec (the API server would not have sent that).
StatusOr<json> ConfigList(const json& devices, std::string_view where) {
  if (devices.is_null()) return json::array();
  if (!devices.is_object()) return common::InvalidArgumentError(fmt::format("{}: must be an object", where));
  const json* config = JsonFind(devices, "config");
  if (config == nullptr) return json::array();
  if (!config->is_array()) return common::InvalidArgumentError(fmt::format("{}.config: must be a list", where));
  return *config;
}

// The object's spec.devices (claim) or spec.spec.devices (template); null
// when absent.
json DevicesAt(const json& object, bool is_template) {
  return is_template ? JsonMember(object, {"spec", "spec", "devices"}) : JsonMember(object, {"spec", "devices"});
}

AdmissionReply PlainError(int http_status, std::string message) {
  AdmissionReply reply;
  reply.http_status = http_status;
  reply.content_type = "text/plain; charset=utf-8";
  reply.body = message + "\n";
  reply.outcome = AdmissionOutcome::kBadRequest;
  reply.message = std::move(message);
  return reply;
}

AdmissionReply Respond(const std::string& uid, AdmissionOutcome outcome, std::string resource, std::string message) {
  json response = {{"uid", uid}, {"allowed", outcome == AdmissionOutcome::kAllowed}};
  if (outcome != AdmissionOutcome::kAllowed) {
    const bool invalid = outcome == AdmissionOutcome::kDenied;
    response["status"] = {{"status", "Failure"},
                          {"code", invalid ? 422 : 400},
                          {"reason", invalid ? "Invalid" : "BadRequest"},
                          {"message", message}};
  }
  AdmissionReply reply;
  reply.body = json{{"apiVersion", kAdmissionApiVersion}, {"kind", "AdmissionReview"}, {"response", response}}.dump();
  reply.outcome = outcome;
  reply.resource = std::move(resource);
  reply.message = std::move(message);
  return reply;
}

bool IsJsonContentType(std::string_view content_type) {
  const std::size_t semicolon = content_type.find(';');
  std::string_view media = content_type.substr(0, semicolon);
  while (!media.empty() && media.back() == ' ') media.remove_suffix(1);
  return media == "application/json";
}

}  // namespace

Status ValidateDeviceConfigs(const json& devices, std::string_view where, const common::FeatureGates& gates) {
  StatusOr<json> configs = ConfigList(devices, where);
  if (!configs.ok()) return configs.status();
  std::vector<std::string> problems;
  for (std::size_t i = 0; i < configs->size(); ++i) {
    const json& entry = (*configs)[i];
    const json* opaque = JsonFind(entry, "opaque");
    if (opaque == nullptr) continue;
    const DriverKinds* driver = KindsOf(JsonString(*opaque, "driver"));
    if (driver == nullptr) continue;
    const json* parameters = JsonFind(*opaque, "parameters");
    const std::string path = fmt::format("{}.config[{}].opaque.parameters", where, i);
    if (auto problem = CheckOne(*driver, parameters != nullptr ? *parameters : json(), path, gates)) {
      problems.push_back(std::move(*problem));
    }
  }
  if (problems.empty()) return common::OkStatus();
  // Bounded: the message goes back to the client and into the API server's
  // log, and a problem can quote the input (an unknown key).
  constexpr std::size_t kListed = 10;
  constexpr std::size_t kProblemChars = 1024;
  std::string joined;
  for (std::size_t i = 0; i < problems.size() && i < kListed; ++i) {
    std::string_view problem = problems[i];
    joined += fmt::format("{}{}{}", i == 0 ? "" : "; ", problem.substr(0, kProblemChars),
                          problem.size() > kProblemChars ? "..." : "");
  }
  if (problems.size() > kListed) joined += fmt::format("; and {} more", problems.size() - kListed);
  return common::InvalidArgumentError(fmt::format("{} configs failed to validate: {}", problems.size(), joined));
}

std::string_view AdmissionOutcomeName(AdmissionOutcome outcome) {
  switch (outcome) {
    case AdmissionOutcome::kAllowed: return "allowed";
    case AdmissionOutcome::kDenied: return "denied";
    case AdmissionOutcome::kBadObject: return "bad_object";
    case AdmissionOutcome::kBadRequest: return "bad_request";
  }
  return "unknown";
}

AdmissionReply ReviewAdmission(std::string_view content_type, std::string_view body,
                               const common::FeatureGates& gates) {
  if (!IsJsonContentType(content_type)) {
    return PlainError(415, fmt::format("contentType={}, expected application/json", content_type));
  }
  if (common::JsonNestsDeeperThan(body)) {
    return PlainError(400, fmt::format("failed to read AdmissionReview from request body: JSON nested deeper than "
                                       "{} levels; no ResourceClaim needs that",
                                       common::kMaxJsonNesting));
  }
  json review = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (review.is_discarded()) {
    return PlainError(400, "failed to read AdmissionReview from request body: not valid JSON");
  }
  if (JsonString(review, "apiVersion") != kAdmissionApiVersion || JsonString(review, "kind") != "AdmissionReview") {
    return PlainError(400, fmt::format("failed to read AdmissionReview from request body: apiVersion \"{}\" kind "
                                       "\"{}\"; expected admission.k8s.io/v1 AdmissionReview (set "
                                       "admissionReviewVersions: [\"v1\"] in the webhook configuration)",
                                       JsonString(review, "apiVersion"), JsonString(review, "kind")));
  }
  const json* request = JsonFind(review, "request");
  if (request == nullptr || !request->is_object()) {
    return PlainError(400, "failed to read AdmissionReview from request body: request is missing");
  }
  const std::string uid = JsonString(*request, "uid");
  if (uid.empty()) return PlainError(400, "failed to read AdmissionReview from request body: request.uid is missing");

  const std::string group = JsonString(*request, {"resource", "group"});
  const std::string version = JsonString(*request, {"resource", "version"});
  const std::string plural = JsonString(*request, {"resource", "resource"});
  bool known_version = false;
  for (std::string_view v : kResourceVersions) known_version = known_version || v == version;
  const bool is_claim = plural == "resourceclaims";
  const bool is_template = plural == "resourceclaimtemplates";
  if (group != kResourceGroup || !known_version || !(is_claim || is_template)) {
    return Respond(uid, AdmissionOutcome::kBadObject, "",
                   fmt::format("expected resource to be one of the supported versions for resourceclaims or "
                               "resourceclaimtemplates (resource.k8s.io v1, v1beta2, v1beta1), got {}/{}, "
                               "Resource={}; limit the webhook's rules to those",
                               group, version, plural));
  }
  // The spec is only written through the main resource, on CREATE and UPDATE.
  const std::string operation = JsonString(*request, "operation");
  if ((operation != "CREATE" && operation != "UPDATE") || !JsonString(*request, "subResource").empty()) {
    return Respond(uid, AdmissionOutcome::kAllowed, plural, "");
  }
  const json* object = JsonFind(*request, "object");
  if (object == nullptr || !object->is_object()) {
    return Respond(uid, AdmissionOutcome::kBadObject, plural,
                   fmt::format("request.object: missing; a {} {} must carry the object", operation, plural));
  }
  const std::string where = is_template ? "spec.spec.devices" : "spec.devices";
  const json devices = DevicesAt(*object, is_template);
  StatusOr<json> configs = ConfigList(devices, where);
  if (!configs.ok()) {
    return Respond(uid, AdmissionOutcome::kBadObject, plural,
                   fmt::format("cannot read the {}: {}", plural, configs.status().message()));
  }
  if (operation == "UPDATE") {
    const json* old_object = JsonFind(*request, "oldObject");
    if (old_object != nullptr) {
      StatusOr<json> old_configs = ConfigList(DevicesAt(*old_object, is_template), where);
      if (old_configs.ok() && *old_configs == *configs) return Respond(uid, AdmissionOutcome::kAllowed, plural, "");
    }
  }
  if (Status valid = ValidateDeviceConfigs(devices, where, gates); !valid.ok()) {
    return Respond(uid, AdmissionOutcome::kDenied, plural, std::string(valid.message()));
  }
  return Respond(uid, AdmissionOutcome::kAllowed, plural, "");
}

}  // namespace nvdra::webhook
