#pragma once

// ComputePolicy: how the GPU plugin changes a full GPU's compute mode and
// time-slice interval for the sharing strategies (upstream-inventory.md
// sections 4.2 and 8.4). The real one runs nvidia-smi from the driver root,
// as upstream does: NVML has no call for the time slice, and the driver
// checks the caller's privileges the same way for both settings.
//
//   nvidia-smi -i <uuid> -c DEFAULT|EXCLUSIVE_PROCESS
//   nvidia-smi compute-policy -i <uuid> --set-timeslice <0..3>
//
// with LD_PRELOAD naming the driver root's libnvidia-ml.so.1 (nvidia-smi in
// a container does not find the library on its own).
//
// Ownership: NvidiaSmiComputePolicy holds paths only. Thread-safety:
// thread-safe (each call runs its own process).

#include <chrono>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/opaque_config.h"
#include "common/status.h"

namespace nvdra::gpu {

// The compute modes the sharing strategies use (nvidia-smi -c's names).
enum class ComputeMode { kDefault, kExclusiveProcess };
std::string_view ComputeModeName(ComputeMode mode);  // "DEFAULT", "EXCLUSIVE_PROCESS"

class ComputePolicy {
 public:
  virtual ~ComputePolicy() = default;
  // Errors name the GPU and carry the tool's output.
  virtual common::Status SetComputeMode(const std::string& gpu_uuid, ComputeMode mode) = 0;
  virtual common::Status SetTimeSlice(const std::string& gpu_uuid, api::TimeSliceInterval interval) = 0;
};

class NvidiaSmiComputePolicy final : public ComputePolicy {
 public:
  // Finds nvidia-smi in the driver root as upstream (opt/bin, usr/bin,
  // usr/sbin, bin, sbin). kNotFound names the folders searched.
  static common::StatusOr<NvidiaSmiComputePolicy> Find(const std::filesystem::path& driver_root,
                                                       std::filesystem::path nvml_library);

  NvidiaSmiComputePolicy(std::filesystem::path nvidia_smi, std::filesystem::path nvml_library);

  common::Status SetComputeMode(const std::string& gpu_uuid, ComputeMode mode) override;
  common::Status SetTimeSlice(const std::string& gpu_uuid, api::TimeSliceInterval interval) override;

  const std::filesystem::path& nvidia_smi() const { return nvidia_smi_; }

 private:
  common::Status Run(const std::vector<std::string>& args, std::string_view what) const;

  std::filesystem::path nvidia_smi_;
  std::filesystem::path nvml_library_;
};

// Where nvidia-smi is missing: every call fails with the reason. Lets a node
// without nvidia-smi serve exclusive claims while the sharing gates are off.
class MissingComputePolicy final : public ComputePolicy {
 public:
  explicit MissingComputePolicy(common::Status why) : why_(std::move(why)) {}
  common::Status SetComputeMode(const std::string&, ComputeMode) override { return why_; }
  common::Status SetTimeSlice(const std::string&, api::TimeSliceInterval) override { return why_; }

 private:
  common::Status why_;
};

}  // namespace nvdra::gpu
