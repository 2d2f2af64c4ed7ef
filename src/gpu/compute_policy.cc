#include "gpu/compute_policy.h"

#include <cstdlib>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/child_process.h"
#include "common/log.h"

namespace nvdra::gpu {

namespace {

// nvidia-smi answers in well under a second; a wedged driver must not hold
// the node's prepare lock for long.
constexpr std::chrono::seconds kToolTimeout{30};

}  // namespace

std::string_view ComputeModeName(ComputeMode mode) {
  switch (mode) {
    case ComputeMode::kDefault: return "DEFAULT";
    case ComputeMode::kExclusiveProcess: return "EXCLUSIVE_PROCESS";
  }
  return "DEFAULT";
}

common::StatusOr<NvidiaSmiComputePolicy> NvidiaSmiComputePolicy::Find(const std::filesystem::path& driver_root,
                                                                      std::filesystem::path nvml_library) {
  static constexpr std::string_view kFolders[] = {"opt/bin", "usr/bin", "usr/sbin", "bin", "sbin"};
  for (std::string_view folder : kFolders) {
    const std::filesystem::path candidate = driver_root / folder / "nvidia-smi";
    std::error_code ec;
    if (std::filesystem::is_regular_file(candidate, ec)) {
      return NvidiaSmiComputePolicy(candidate, std::move(nvml_library));
    }
  }
  return common::NotFoundError(fmt::format(
      "nvidia-smi not found in the driver root {} (looked in opt/bin, usr/bin, usr/sbin, bin, sbin): it sets "
      "the compute mode and time slice of shared GPUs; check --container-driver-root",
      driver_root.string()));
}

NvidiaSmiComputePolicy::NvidiaSmiComputePolicy(std::filesystem::path nvidia_smi, std::filesystem::path nvml_library)
    : nvidia_smi_(std::move(nvidia_smi)), nvml_library_(std::move(nvml_library)) {}

common::Status NvidiaSmiComputePolicy::SetComputeMode(const std::string& gpu_uuid, ComputeMode mode) {
  return Run({"-i", gpu_uuid, "-c", std::string(ComputeModeName(mode))},
             fmt::format("set the compute mode of {} to {}", gpu_uuid, ComputeModeName(mode)));
}

common::Status NvidiaSmiComputePolicy::SetTimeSlice(const std::string& gpu_uuid, api::TimeSliceInterval interval) {
  return Run({"compute-policy", "-i", gpu_uuid, "--set-timeslice", std::to_string(static_cast<int>(interval))},
             fmt::format("set the time slice of {} to {}", gpu_uuid, api::TimeSliceIntervalName(interval)));
}

common::Status NvidiaSmiComputePolicy::Run(const std::vector<std::string>& args, std::string_view what) const {
  common::SpawnOptions spawn;
  spawn.argv.push_back(nvidia_smi_.string());
  spawn.argv.insert(spawn.argv.end(), args.begin(), args.end());
  // Prepended to the inherited LD_PRELOAD, as upstream.
  const char* inherited = std::getenv("LD_PRELOAD");
  spawn.extra_env.push_back(fmt::format("LD_PRELOAD={}{}{}", nvml_library_.string(),
                                        inherited != nullptr && *inherited != '\0' ? ":" : "",
                                        inherited != nullptr ? inherited : ""));
  spawn.capture_output = true;
  common::StatusOr<common::CommandOutput> out = common::RunCommand(spawn, kToolTimeout);
  if (!out.ok()) return out.status().WithContext(fmt::format("{}: nvidia-smi", what));
  if (!out->exit.success()) {
    return common::InternalError(
        fmt::format("{}: {} {} failed ({}): {}", what, nvidia_smi_.string(), fmt::join(args, " "),
                    out->exit.ToString(), out->output));
  }
  LOG_INFO(4, "nvidia-smi", {{"args", fmt::format("{}", fmt::join(args, " "))}});
  return common::OkStatus();
}

}  // namespace nvdra::gpu
