#pragma once

// The mock Fabric Manager's view of a node: the "fabricManager" section of a
// mock NVML profile (the partition table FM would load for the baseboard) and
// the profile's GPUs by module id.
//
// Defines: FmPartitionSpec, FmGpu, FmSpec, LoadFmSpec.
//
// Profile section (test/mocknvml/README.md, "Fabric Manager"):
//   "fabricManager": {"maxNvlinksPerGpu": 18, "nvlinkLineRateMBps": 26562,
//                     "reportsNvlinkFailedDevices": false,
//                     "nvswitches": [{"pciBusId": "00000000:05:00.0"}, ...],
//                     "partitions": [{"id": 0, "gpus": [1, ..., 8], "nvlinksPerGpu": 18}, ...]}
// "gpus" are physical ids, which FM's header defines as the GPU module id:
// every one must be the "moduleId" of a device of the profile.
//
// Ownership: plain values. Thread-safety: immutable after LoadFmSpec.

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "profile.h"

namespace nvdra::mocknvml {

struct FmPartitionSpec {
  unsigned id = 0;
  std::vector<unsigned> module_ids;  // in the profile's order, which FM reports
  unsigned nvlinks_per_gpu = 0;      // 0 for a one-GPU partition
};

struct FmGpu {
  unsigned module_id = 0;
  std::string uuid;
  std::string pci_bus_id;  // NVML's spelling, "00000000:18:00.0"
};

struct FmSpec {
  unsigned max_nvlinks_per_gpu = 0;
  unsigned nvlink_line_rate_mbps = 0;
  bool reports_nvlink_failed_devices = true;
  std::vector<std::string> nvswitch_pci_bus_ids;
  std::vector<FmPartitionSpec> partitions;
  std::map<unsigned, FmGpu> gpus;  // by module id

  const FmPartitionSpec* FindPartition(unsigned id) const;
  const FmGpu* FindGpuByUuid(const std::string& uuid) const;
};

// The "fabricManager" section of `profile` (re-read from profile.path), with
// the GPUs of every device of the profile: FM sees GPUs whatever driver holds
// them (passthrough GPUs are on vfio-pci). nullopt when the profile has no
// such section (no Fabric Manager on that node). kInvalidArgument naming the
// field when it is malformed.
StatusOr<std::optional<FmSpec>> LoadFmSpec(const Profile& profile);

}  // namespace nvdra::mocknvml
