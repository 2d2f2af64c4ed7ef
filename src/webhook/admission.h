#pragma once

// The webhook's decision, without HTTP or TLS: an AdmissionReview
// (admission.k8s.io/v1) in, the answer out. Checks every opaque config of our
// two drivers in ResourceClaims and ResourceClaimTemplates of
// resource.k8s.io v1, v1beta2 and v1beta1 with the same strict decoding and
// validation the kubelet plugins apply at Prepare (api::ValidateDeviceConfigs,
// src/api/device_configs.h),
// so a config the webhook admits is one the plugins accept, and the user
// learns about a bad one at `kubectl apply` instead of at pod start.
//
// Defines: kValidatePath, AdmissionOutcome, AdmissionReply, ReviewAdmission.
//
// Differences from upstream's cmd/webhook (which we otherwise answer like):
// - configs of compute-domain.nvidia.com are checked too (upstream checks only
//   gpu.nvidia.com), and a kind given to the wrong driver is rejected;
// - VfioDeviceConfig gets the plugins' own answer, not "unrecognized type";
// - an UPDATE that leaves spec.devices.config unchanged is admitted, so an
//   object created before the webhook (or with an older driver) can still have
//   its finalizers and labels changed and be deleted.
// Thread-safety: pure functions.

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "api/device_configs.h"
#include "common/feature_gates.h"
#include "common/status.h"

namespace nvdra::webhook {

// The path upstream's chart points the ValidatingWebhookConfiguration at.
inline constexpr std::string_view kValidatePath = "/validate-resource-claim-parameters";

// The most JSON values an AdmissionReview may hold (common::JsonHasMoreValuesThan).
inline constexpr std::size_t kMaxAdmissionValues = 100'000;
// Our drivers' names (api/device_configs.h), for the webhook configuration.
using api::kComputeDomainDriverName;
using api::kGpuDriverName;

enum class AdmissionOutcome {
  kAllowed,     // response.allowed = true
  kDenied,      // response.allowed = false: an invalid config
  kBadObject,   // response.allowed = false, reason BadRequest: the object is not a claim/template we read
  kBadRequest,  // no AdmissionReview response: HTTP 400 (or 415 for a wrong content type)
};
std::string_view AdmissionOutcomeName(AdmissionOutcome outcome);  // "allowed", "denied", ...

// What the HTTP layer sends back, and what it is about (for metrics and logs).
struct AdmissionReply {
  int http_status = 200;
  std::string content_type = "application/json";
  std::string body;
  AdmissionOutcome outcome = AdmissionOutcome::kAllowed;
  std::string resource;  // "resourceclaims", "resourceclaimtemplates", or "" when unknown
  std::string message;   // why it was denied or refused; empty when allowed
};

// Answers one POST to kValidatePath. `content_type` must be application/json
// (parameters such as "; charset=utf-8" are accepted), else 415; `body` must
// be an admission.k8s.io/v1 AdmissionReview with a request and its uid, else
// 400 with a plain-text reason. Otherwise the reply is an AdmissionReview
// whose response echoes the uid: allowed, or denied with status code 422,
// reason Invalid and upstream's message form "N configs failed to validate:
// <path>: <problem>; ...", or (an object we cannot read, a resource we do not
// handle) code 400, reason BadRequest. Never throws.
AdmissionReply ReviewAdmission(std::string_view content_type, std::string_view body,
                               const common::FeatureGates& gates);

}  // namespace nvdra::webhook
