#pragma once

// MIG devices made on demand (gate DynamicMIG), as upstream's Prepare,
// Unprepare and start-up clean-up (upstream-inventory.md section 4.2):
//
//   Create   MIG mode on if it is off (Hopper and later switch without a
//            reset), the GPU instance at the allocated placement, then the
//            compute instance as large as it; returns the ids and the MIG
//            device's UUID. A placement another instance holds fails with
//            kFailedPrecondition naming that instance.
//   Destroy  the compute instances, then the GPU instance; absent is fine.
//            MIG mode goes off again once a Hopper-or-later GPU has no
//            instance left, so that its full GPU can be prepared.
//   Sweep    destroys every instance not in a keep set (the instances
//            completed claims hold), at start-up and at each reconcile.
//
// Crash points (NVDRA_TEST_CRASH_AT): mig-after-gi, mig-after-ci.
//
// Ownership: borrows the NVML library, which must outlive it.
// Thread-safety: thread-compatible; the GPU device state calls it under the
// node lock.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "gpu/discovery.h"
#include "nvml/library.h"

namespace nvdra::gpu {

// A MIG device that exists: where it lives and what it is.
struct LiveMig {
  std::string parent_uuid;
  std::uint32_t gi_id = 0;
  std::uint32_t ci_id = 0;
  std::uint32_t gi_profile_id = 0;
  nvml::GpuInstancePlacement placement;
  std::string uuid;  // "MIG-..."
  friend bool operator==(const LiveMig&, const LiveMig&) = default;
};

class DynamicMig {
 public:
  explicit DynamicMig(const nvml::Library& nvml) : nvml_(nvml) {}

  common::StatusOr<LiveMig> Create(const GpuInfo& parent, const MigProfileInfo& profile,
                                   nvml::GpuInstancePlacement placement) const;
  // Destroys GPU instance `gi_id` of `parent` and its compute instances.
  common::Status Destroy(const GpuInfo& parent, std::uint32_t gi_id) const;
  // The GPU instance of `profile` starting at `placement`, if one exists
  // (its ci_id and uuid are not read).
  common::StatusOr<std::optional<LiveMig>> FindAt(const GpuInfo& parent, const MigProfileInfo& profile,
                                                  nvml::GpuInstancePlacement placement) const;
  // Destroys every GPU instance of `gpus` whose (parent UUID, GI id) is not
  // in `keep`; returns how many. Errors of one GPU do not stop the others.
  common::StatusOr<int> Sweep(const std::vector<GpuInfo>& gpus,
                              const std::set<std::pair<std::string, std::uint32_t>>& keep) const;

 private:
  // MIG mode off on a GPU that switches without a reset, once it has no
  // GPU instance left.
  common::Status DisableMigWhenEmpty(const GpuInfo& parent, const nvml::Device& device) const;

  const nvml::Library& nvml_;
};

}  // namespace nvdra::gpu
