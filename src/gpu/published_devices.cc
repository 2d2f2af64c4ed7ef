#include "gpu/published_devices.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "k8s/quantity.h"

namespace nvdra::gpu {
namespace {

using common::StatusOr;

constexpr const char* kPciBusIdAttribute = "resource.kubernetes.io/pciBusID";
constexpr const char* kPcieRootAttribute = "resource.kubernetes.io/pcieRoot";
constexpr const char* kNumaNodeAttribute = "resource.kubernetes.io/numaNode";
constexpr std::int64_t kMiB = 1024 * 1024;

// Versions every device of the node shares, normalised once.
struct NodeVersions {
  std::string driver;
  std::string cuda_driver;
};

struct GpuVersions {
  std::string compute_capability;
};

// Attributes a MIG device shares with its parent GPU (CommonAttributesMig
// upstream) and the full GPU's own, minus type/uuid/profile.
void AddParentAttributes(const GpuInfo& gpu, const NodeVersions& node, const GpuVersions& versions,
                         const PublishOptions& options, PublishedDevice& device) {
  auto& a = device.attributes;
  a["productName"] = gpu.product_name;
  a["brand"] = gpu.brand;
  a["architecture"] = gpu.architecture;
  a["cudaComputeCapability"] = Version{versions.compute_capability};
  a["driverVersion"] = Version{node.driver};
  a["cudaDriverVersion"] = Version{node.cuda_driver};
  a[kPciBusIdAttribute] = gpu.pci.bus_id;
  if (gpu.pcie_root) a[kPcieRootAttribute] = *gpu.pcie_root;
  if (gpu.numa_node && *gpu.numa_node >= 0) {
    if (options.list_type_attributes) {
      a[kNumaNodeAttribute] = std::vector<std::int64_t>{*gpu.numa_node};
    } else {
      a[kNumaNodeAttribute] = static_cast<std::int64_t>(*gpu.numa_node);
    }
  }
  if (gpu.addressing_mode) a["addressingMode"] = *gpu.addressing_mode;
}

// The seven per-profile dimensions (CommonCapacitiesMig upstream).
std::map<std::string, std::int64_t> MigCapacities(const nvml::GpuInstanceProfile& gi) {
  std::map<std::string, std::int64_t> out;
  for (const MigProfileCount& count : kMigProfileCounts) out[std::string(count.name)] = gi.*count.field;
  out["memory"] = static_cast<std::int64_t>(gi.memory_size_mb) * kMiB;
  return out;
}

// "copyEngines" -> "copy-engines": counters use DNS labels.
std::string CamelToDns(const std::string& name) {
  std::string out;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool upper = c >= 'A' && c <= 'Z';
    if (upper && i > 0) {
      char prev = name[i - 1];
      bool prev_lower_or_digit = (prev >= 'a' && prev <= 'z') || (prev >= '0' && prev <= '9');
      bool next_lower = i + 1 < name.size() && name[i + 1] >= 'a' && name[i + 1] <= 'z';
      bool prev_upper = prev >= 'A' && prev <= 'Z';
      if (prev_lower_or_digit || (prev_upper && next_lower)) out.push_back('-');
    }
    out.push_back(c);
  }
  return ToRfc1123(out);
}

std::map<std::string, std::int64_t> Counters(const std::map<std::string, std::int64_t>& capacities,
                                             std::uint32_t slice_start, std::uint32_t slice_count) {
  std::map<std::string, std::int64_t> counters;
  for (const auto& [name, value] : capacities) counters[CamelToDns(name)] = value;
  for (std::uint32_t i = slice_start; i < slice_start + slice_count; ++i) {
    counters[fmt::format("memory-slice-{}", i)] = 1;
  }
  return counters;
}

std::string CounterSetName(const GpuInfo& gpu) {
  return ToRfc1123(GpuDeviceName(gpu.minor) + "-counter-set");
}

// Upstream's addFabricManagerAttributes: the GPU's module id and, per size,
// the Fabric Manager partition holding it.
void AddFabricManagerAttributes(const GpuInfo& gpu, const PublishOptions& options, PublishedDevice& device) {
  if (!options.fabric_manager_partitioning || !gpu.module_id || *gpu.module_id == 0) return;
  device.attributes["gpuModuleID"] = static_cast<std::int64_t>(*gpu.module_id);
  auto partitions = options.fabric_partitions.find(*gpu.module_id);
  if (partitions == options.fabric_partitions.end()) return;
  for (const auto& [size, id] : partitions->second) {
    device.attributes[fmt::format("partition{}", size)] = static_cast<std::int64_t>(id);
  }
}

PublishedDevice FullGpu(const GpuInfo& gpu, const NodeVersions& node, const GpuVersions& versions,
                        const PublishOptions& options) {
  PublishedDevice device;
  device.name = GpuDeviceName(gpu.minor);
  device.attributes["type"] = std::string("gpu");
  device.attributes["uuid"] = gpu.uuid;
  AddParentAttributes(gpu, node, versions, options, device);
  AddFabricManagerAttributes(gpu, options, device);
  if (gpu.memory_bytes) device.capacity["memory"] = static_cast<std::int64_t>(*gpu.memory_bytes);
  return device;
}

PublishedDevice MigDevice(const GpuInfo& gpu, const std::string& profile,
                          const nvml::GpuInstanceProfile& gi,
                          nvml::GpuInstancePlacement placement, const NodeVersions& node,
                          const GpuVersions& versions, const PublishOptions& options) {
  PublishedDevice device;
  device.name = MigDeviceName(gpu.minor, profile, gi.id, placement.start);
  device.attributes["type"] = std::string("mig");
  device.attributes["parentUUID"] = gpu.uuid;
  device.attributes["profile"] = profile;
  AddParentAttributes(gpu, node, versions, options, device);
  device.capacity = MigCapacities(gi);
  return device;
}

void SortByName(std::vector<PublishedDevice>& devices) {
  std::sort(devices.begin(), devices.end(),
            [](const PublishedDevice& a, const PublishedDevice& b) { return a.name < b.name; });
}

void AddDynamicMig(const GpuInfo& gpu, const NodeVersions& node, const GpuVersions& versions,
                   const PublishOptions& options, PublishedResources& out) {
  std::map<std::string, std::int64_t> max_capacity;
  std::vector<PublishedDevice> parts;
  std::set<std::string> seen;
  const std::uint32_t slices = gpu.MemorySliceCount();
  for (const MigProfileInfo& profile : gpu.mig_profiles) {
    // The 1-slice REV1 compute profile names the same devices as 1_SLICE.
    if (profile.ci_profile_index == kMigRev1ComputeProfileIndex) continue;
    std::string profile_name = profile.name.ToString();
    for (const auto& placement : profile.placements) {
      PublishedDevice device =
          MigDevice(gpu, profile_name, profile.gi, placement, node, versions, options);
      for (const auto& [name, value] : device.capacity) {
        max_capacity[name] = std::max(max_capacity[name], value);
      }
      if (!seen.insert(device.name).second) continue;
      device.consumes_counters.push_back(
          {CounterSetName(gpu), Counters(device.capacity, placement.start, placement.size)});
      parts.push_back(std::move(device));
    }
  }
  // An Ampere GPU with MIG on cannot give its whole self without a reset.
  bool publish_full = !gpu.mig_enabled || gpu.architecture != "Ampere";
  if (publish_full) {
    PublishedDevice full = FullGpu(gpu, node, versions, options);
    if (!max_capacity.empty()) {
      full.capacity = max_capacity;
      full.consumes_counters.push_back({CounterSetName(gpu), Counters(max_capacity, 0, slices)});
    }
    out.devices.push_back(std::move(full));
  }
  SortByName(parts);
  for (auto& part : parts) out.devices.push_back(std::move(part));
  if (!max_capacity.empty()) {
    out.counter_sets.push_back({CounterSetName(gpu), Counters(max_capacity, 0, slices)});
  }
}

}  // namespace

bool DynamicMigCapable(const GpuInfo& gpu) {
  if (!gpu.mig_capable) return false;
  bool toggles_without_reset = gpu.architecture == "Hopper" || gpu.architecture == "Blackwell" ||
                               gpu.architecture == "Rubin";
  return toggles_without_reset || gpu.mig_enabled;
}

StatusOr<std::string> NormalizeVersion(const std::string& text) {
  std::string_view rest = text;
  if (!rest.empty() && rest.front() == 'v') rest.remove_prefix(1);
  std::string core(rest.substr(0, rest.find_first_of("-+")));
  std::string suffix(rest.substr(core.size()));
  std::vector<std::uint64_t> numbers;
  std::size_t pos = 0;
  while (pos <= core.size()) {
    std::size_t dot = core.find('.', pos);
    std::string_view part = std::string_view(core).substr(
        pos, dot == std::string::npos ? std::string::npos : dot - pos);
    std::uint64_t value = 0;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (part.empty() || ec != std::errc() || end != part.data() + part.size()) {
      return common::InvalidArgumentError(
          fmt::format("version \"{}\" is not a version (want up to three dot-separated numbers)", text));
    }
    numbers.push_back(value);
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  if (numbers.empty() || numbers.size() > 3) {
    return common::InvalidArgumentError(
        fmt::format("version \"{}\" has {} numbers; a semantic version has at most three", text,
                    numbers.size()));
  }
  numbers.resize(3, 0);
  return fmt::format("{}.{}.{}{}", numbers[0], numbers[1], numbers[2], suffix);
}

StatusOr<ConsumableShares> ConsumableShares::Parse(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  if (text.empty() || text == "disabled") return ConsumableShares{};
  if (text == "memory") return ConsumableShares{.mode = Mode::kMemory, .shares = 0};
  if (text == "unlimited") return ConsumableShares{.mode = Mode::kUnlimited, .shares = 0};
  std::int64_t shares = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), shares);
  if (ec != std::errc() || end != text.data() + text.size() || shares <= 0) {
    return common::InvalidArgumentError(fmt::format(
        "--consumable-shares: \"{}\" is not disabled, memory, unlimited or a positive integer", text));
  }
  return ConsumableShares{.mode = Mode::kShares, .shares = shares};
}

namespace {

// Upstream's applyConsumableShares: the device may serve several claims,
// its memory (rounded down to whole MiB) is consumable, and in integer mode
// so is a count of shares.
void ApplyConsumableShares(const ConsumableShares& shares, PublishedDevice& device) {
  if (!shares.enabled()) return;
  device.allow_multiple_allocations = true;
  auto memory = device.capacity.find("memory");
  if (memory == device.capacity.end()) return;
  constexpr std::int64_t kStep = kMiB;
  memory->second = memory->second / kStep * kStep;
  const std::int64_t max = memory->second;
  switch (shares.mode) {
    case ConsumableShares::Mode::kMemory:
      device.request_policies["memory"] = {.default_value = max, .min = kStep, .max = max, .step = kStep};
      break;
    case ConsumableShares::Mode::kUnlimited:
    case ConsumableShares::Mode::kShares:
      device.request_policies["memory"] = {.default_value = 0, .min = 0, .max = max, .step = kStep};
      break;
    case ConsumableShares::Mode::kDisabled:
      break;
  }
  if (shares.mode == ConsumableShares::Mode::kShares) {
    device.capacity["shares"] = shares.shares;
    device.request_policies["shares"] = {.default_value = 1, .min = 1, .max = shares.shares, .step = 1};
  }
}

// A PCI function passed through with vfio-pci (upstream's VfioDeviceInfo
// GetDevice). `parent` is the NVML GPU on that function, when NVML sees it.
PublishedDevice VfioDevice(std::size_t index, const PciGpuFunction& function, const GpuInfo* parent,
                           const PublishOptions& options) {
  PublishedDevice device;
  device.name = VfioDeviceName(index);
  auto& a = device.attributes;
  a["type"] = std::string("vfio");
  a["uuid"] = VfioDeviceUuid(function.bus_id);
  a["deviceID"] = fmt::format("0x{:04x}", function.device_id);
  a["vendorID"] = fmt::format("0x{:04x}", function.vendor_id);
  // Upstream takes the PCI ID database's name; the image has no pci.ids, so
  // NVML's name of the GPU on that function stands in when NVML sees it.
  a["productName"] = parent != nullptr ? parent->product_name : fmt::format("NVIDIA device 0x{:04x}", function.device_id);
  a["iommuFDEnabled"] = options.iommufd_enabled;
  a[kPciBusIdAttribute] = function.bus_id;
  if (function.pcie_root) a[kPcieRootAttribute] = *function.pcie_root;
  if (function.numa_node) {
    if (options.list_type_attributes) {
      a[kNumaNodeAttribute] = std::vector<std::int64_t>{*function.numa_node};
    } else {
      a[kNumaNodeAttribute] = static_cast<std::int64_t>(*function.numa_node);
    }
  }
  device.capacity["addressableMemory"] = static_cast<std::int64_t>(function.addressable_memory_bytes);
  if (parent != nullptr) AddFabricManagerAttributes(*parent, options, device);
  return device;
}

}  // namespace

std::string VfioDeviceName(std::size_t index) { return fmt::format("gpu-vfio-{}", index); }

StatusOr<PublishedResources> BuildPublishedResources(const NodeInventory& inventory,
                                                     const PublishOptions& options) {
  NodeVersions node;
  ASSIGN_OR_RETURN(node.driver, NormalizeVersion(inventory.driver_version));
  ASSIGN_OR_RETURN(node.cuda_driver, NormalizeVersion(inventory.cuda_driver_version));
  PublishedResources out;
  for (const GpuInfo& gpu : inventory.gpus) {
    GpuVersions versions;
    ASSIGN_OR_RETURN(versions.compute_capability, NormalizeVersion(gpu.cuda_compute_capability));
    if (options.dynamic_mig && DynamicMigCapable(gpu)) {
      AddDynamicMig(gpu, node, versions, options, out);
      continue;
    }
    if (!gpu.mig_enabled) {
      out.devices.push_back(FullGpu(gpu, node, versions, options));
      ApplyConsumableShares(options.consumable_shares, out.devices.back());
      continue;
    }
    std::vector<PublishedDevice> migs;
    for (const MigDeviceInfo& mig : gpu.mig_devices) {
      PublishedDevice device =
          MigDevice(gpu, mig.profile, mig.gi, mig.placement, node, versions, options);
      device.attributes["uuid"] = mig.uuid;
      for (std::uint32_t i = mig.placement.start; i < mig.placement.start + mig.placement.size; ++i) {
        device.capacity[fmt::format("memorySlice{}", i)] = 1;
      }
      ApplyConsumableShares(options.consumable_shares, device);
      migs.push_back(std::move(device));
    }
    SortByName(migs);
    for (auto& device : migs) out.devices.push_back(std::move(device));
  }
  for (std::size_t i = 0; i < options.vfio_functions.size(); ++i) {
    const PciGpuFunction& function = options.vfio_functions[i];
    const auto parent = std::find_if(inventory.gpus.begin(), inventory.gpus.end(),
                                     [&](const GpuInfo& gpu) { return gpu.pci.bus_id == function.bus_id; });
    out.devices.push_back(
        VfioDevice(i, function, parent == inventory.gpus.end() ? nullptr : &*parent, options));
  }
  return out;
}

nlohmann::json DeviceToJson(const PublishedDevice& device) {
  nlohmann::json attributes = nlohmann::json::object();
  for (const auto& [name, value] : device.attributes) {
    nlohmann::json v;
    std::visit(
        [&v](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::string>) {
            v["string"] = x;
          } else if constexpr (std::is_same_v<T, std::int64_t>) {
            v["int"] = x;
          } else if constexpr (std::is_same_v<T, bool>) {
            v["bool"] = x;
          } else if constexpr (std::is_same_v<T, Version>) {
            v["version"] = x.value;
          } else {
            v["ints"] = x;
          }
        },
        value);
    attributes[name] = std::move(v);
  }
  nlohmann::json out = {{"name", device.name}, {"attributes", std::move(attributes)}};
  if (!device.capacity.empty()) {
    nlohmann::json capacity = nlohmann::json::object();
    for (const auto& [name, value] : device.capacity) {
      capacity[name] = {{"value", k8s::FormatBinarySI(value)}};
      if (auto policy = device.request_policies.find(name); policy != device.request_policies.end()) {
        capacity[name]["requestPolicy"] = {{"default", k8s::FormatBinarySI(policy->second.default_value)},
                                           {"validRange",
                                            {{"min", k8s::FormatBinarySI(policy->second.min)},
                                             {"max", k8s::FormatBinarySI(policy->second.max)},
                                             {"step", k8s::FormatBinarySI(policy->second.step)}}}};
      }
    }
    out["capacity"] = std::move(capacity);
  }
  if (device.allow_multiple_allocations) out["allowMultipleAllocations"] = true;
  if (!device.consumes_counters.empty()) {
    nlohmann::json consumes = nlohmann::json::array();
    for (const auto& c : device.consumes_counters) {
      nlohmann::json counters = nlohmann::json::object();
      for (const auto& [name, value] : c.counters) {
        counters[name] = {{"value", k8s::FormatBinarySI(value)}};
      }
      consumes.push_back({{"counterSet", c.counter_set}, {"counters", std::move(counters)}});
    }
    out["consumesCounters"] = std::move(consumes);
  }
  if (!device.taints.empty()) out["taints"] = device.taints;
  return out;
}

nlohmann::json CounterSetToJson(const CounterSet& set) {
  nlohmann::json counters = nlohmann::json::object();
  for (const auto& [name, value] : set.counters) {
    counters[name] = {{"value", k8s::FormatBinarySI(value)}};
  }
  return {{"name", set.name}, {"counters", std::move(counters)}};
}

}  // namespace nvdra::gpu
