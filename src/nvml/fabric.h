#pragma once

// The node's Multi-Node NVLink clique id, from each GPU's fabric info.
//
// A clique id is "<cluster UUID, lowercase 8-4-4-4-12>.<clique id decimal>",
// e.g. "1b2c3d4e-0000-4000-8000-00000000abcd.7"; the empty string means the
// node is not in an IMEX-capable NVLink domain (not an error). Rules
// (../shared/reference/dra-wire-facts.md section 7.5, the NVIDIA driver's):
//
//  legacy (default): a GPU counts only when its fabric call succeeds with state
//    COMPLETED, status SUCCESS and a non-zero cluster UUID; anything else
//    (not supported, in progress, failed registration) is "no clique" for that
//    GPU. A failing call other than NOT_SUPPORTED is an error.
//  strict (gate CrashOnNVLinkFabricErrors): NOT_SUPPORTED, state NOT_SUPPORTED
//    and a zero cluster UUID are "no clique"; any other state than COMPLETED,
//    or a non-SUCCESS fabric status, is an error (kFailedPrecondition) so the
//    plugin refuses to start instead of publishing a wrong clique. With
//    `ignore_incomplete_registration` (FabricManagerPartitioning on a
//    single-node NVLink system, where GPUs register only once their partition
//    is activated) a not-COMPLETED state is "no clique" instead.
//  both: every counted GPU must report the same cluster UUID and clique id,
//    otherwise kFailedPrecondition naming the GPUs that disagree.
//
// Thread-safety: free functions over values; NodeCliqueId is as thread-safe as
// the Library.

#include <array>
#include <string>
#include <vector>

#include "common/status.h"
#include "nvml/library.h"

namespace nvdra::nvml {

struct CliqueOptions {
  bool strict = false;
  bool ignore_incomplete_registration = false;
};

// One GPU's answer to the fabric-info call (or why there is none).
struct DeviceFabric {
  std::string uuid;  // for messages
  StatusOr<FabricInfo> info = common::UnknownError("not read");
};

// "8-4-4-4-12" lowercase hex of a cluster UUID.
std::string FormatClusterUuid(const std::array<unsigned char, abi::kGpuFabricUuidLength>& uuid);

// The clique id of a node whose GPUs answered `devices`; "" when none is
// fabric attached. Errors as described above.
StatusOr<std::string> DeriveCliqueId(const std::vector<DeviceFabric>& devices,
                                     const CliqueOptions& options);

// Reads every GPU's fabric info through `library` and derives the clique id.
StatusOr<std::string> NodeCliqueId(const Library& library, const CliqueOptions& options);

}  // namespace nvdra::nvml
