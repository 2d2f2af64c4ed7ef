// The webhook's AdmissionReview handling: the input is a request body, as any
// pod that reaches the webhook's port may send it.

#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "webhook/admission.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto body = nvdra::fuzz::Text(data, size);
  for (const auto& gates : nvdra::fuzz::GateSettings()) {
    const auto reply = nvdra::webhook::ReviewAdmission("application/json", body, gates);
    if (reply.outcome == nvdra::webhook::AdmissionOutcome::kBadRequest) continue;
    // Every answer that is not a plain-text refusal is an AdmissionReview.
    const auto review = nlohmann::json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
    NVDRA_FUZZ_CHECK(review.is_object() && review.contains("response"),
                     "a reply other than kBadRequest is an AdmissionReview");
    NVDRA_FUZZ_CHECK(reply.http_status == 200, "an AdmissionReview is sent with HTTP 200");
  }
  return 0;
}
