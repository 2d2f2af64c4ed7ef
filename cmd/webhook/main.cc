// webhook: validating admission of the driver's opaque device configs in
// ResourceClaims and ResourceClaimTemplates (src/webhook). Serves HTTPS until
// SIGTERM or SIGINT, then stops accepting and finishes requests in progress
// (webhook::RunWebhookProcess).

#include "common/service_main.h"
#include "webhook/config.h"
#include "webhook/process.h"

int main(int argc, char** argv) {
  using namespace nvdra;
  return common::RunService<webhook::Config>(
      webhook::kBinaryName,
      "webhook implements a validating admission webhook complementing a DRA driver plugin: it checks the "
      "resource.nvidia.com opaque configs of ResourceClaims and ResourceClaimTemplates",
      &webhook::RunWebhookProcess, argc, argv);
}
