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

// The object's spec.devices (claim) or spec.spec.devices (template); null
// when absent.
const json& DevicesAt(const json& object, bool is_template) {
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

AdmissionReply Respond(const std::string& uid, AdmissionOutcome outcome, std::string resource, std::string message,
                       const std::vector<std::string>& warnings = {}) {
  json response = {{"uid", uid}, {"allowed", outcome == AdmissionOutcome::kAllowed}};
  // kubectl prints each as "Warning: ..." (admission.k8s.io/v1 warnings).
  if (!warnings.empty()) response["warnings"] = warnings;
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

std::string_view AdmissionOutcomeName(AdmissionOutcome outcome) {
  switch (outcome) {
    case AdmissionOutcome::kAllowed: return "allowed";
    case AdmissionOutcome::kDenied: return "denied";
    case AdmissionOutcome::kBadObject: return "bad_object";
    case AdmissionOutcome::kBadRequest: return "bad_request";
  }
  return "unknown";
}

namespace {

// nlohmann's message without its "[json.exception...] " tag, cut to 120
// characters: it quotes the offending text, which may be huge.
std::string ShortJsonError(std::string_view what) {
  if (what.starts_with("[json.exception.")) {
    if (const std::size_t close = what.find("] "); close != std::string_view::npos) what.remove_prefix(close + 2);
  }
  if (what.size() > 120) return std::string(what.substr(0, 120)) + "...";
  return std::string(what);
}

}  // namespace

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
  // A claim the API server accepts has at most 32 requests and 32 configs of
  // at most 10 KiB each: far below this. The parsed tree of a body made of
  // tiny values is ~50 times its size; this keeps it to a few MiB.
  if (common::JsonHasMoreValuesThan(body, kMaxAdmissionValues)) {
    return PlainError(400, fmt::format("failed to read AdmissionReview from request body: more than {} JSON values; "
                                       "no ResourceClaim the API server accepts has that many",
                                       kMaxAdmissionValues));
  }
  json review;
  try {
    review = json::parse(body);
  } catch (const json::out_of_range& e) {
    // A number beyond a 64-bit float (1e400): valid JSON, but nothing here
    // (nor Go's decoder) can hold it.
    return PlainError(400, fmt::format("failed to read AdmissionReview from request body: {}; numbers must fit a "
                                       "64-bit float (write large values as quantity strings, such as \"10Gi\")",
                                       ShortJsonError(e.what())));
  } catch (const json::exception& e) {
    return PlainError(400, fmt::format("failed to read AdmissionReview from request body: not valid JSON ({})",
                                       ShortJsonError(e.what())));
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
  const json& devices = DevicesAt(*object, is_template);
  StatusOr<const json*> configs = api::DeviceConfigList(devices, where);
  if (!configs.ok()) {
    return Respond(uid, AdmissionOutcome::kBadObject, plural,
                   fmt::format("cannot read the {}: {}", plural, configs.status().message()));
  }
  if (operation == "UPDATE") {
    const json* old_object = JsonFind(*request, "oldObject");
    if (old_object != nullptr) {
      StatusOr<const json*> old_configs = api::DeviceConfigList(DevicesAt(*old_object, is_template), where);
      if (old_configs.ok() && **old_configs == **configs) return Respond(uid, AdmissionOutcome::kAllowed, plural, "");
    }
  }
  if (Status valid = api::ValidateDeviceConfigs(devices, where, gates); !valid.ok()) {
    return Respond(uid, AdmissionOutcome::kDenied, plural, std::string(valid.message()));
  }
  return Respond(uid, AdmissionOutcome::kAllowed, plural, "", api::DeviceConfigWarnings(devices, where));
}

}  // namespace nvdra::webhook
