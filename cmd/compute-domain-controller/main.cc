// compute-domain-controller: the cluster-wide controller that turns
// ComputeDomains into IMEX daemons, claim templates and status
// (src/computedomain/controller/). Flags as upstream's plus
// --templates-dir, --imex-channel-count and --workers; the process itself is
// controller::RunControllerProcess.

#include "common/service_main.h"
#include "computedomain/config.h"
#include "computedomain/controller/process.h"

int main(int argc, char** argv) {
  using namespace nvdra;
  return common::RunService<computedomain::ControllerConfig>(
      computedomain::kControllerBinaryName,
      "Reconciles ComputeDomains into IMEX daemons, claim templates and status",
      &computedomain::controller::RunControllerProcess, argc, argv);
}
