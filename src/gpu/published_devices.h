#pragma once

// What the GPU plugin publishes in its ResourceSlices, built from a
// NodeInventory: device names, attributes, capacities and (DynamicMIG) counter
// sets, exactly as upstream spells them (../shared/reference/
// upstream-inventory.md section 3.1), because DeviceClass CEL selectors and
// users' claims match on them.
//
//   MIG off:              gpu-<minor> with memory.
//   MIG on (static):      one device per existing MIG device, with uuid and
//                         memorySlice<i> capacities; no full GPU.
//   DynamicMIG:           the full GPU (unless an Ampere GPU already has MIG
//                         on) with per-dimension maximum capacities, plus every
//                         profile x placement; all consume counters of the
//                         GPU's counter set gpu-<minor>-counter-set.
//
//   PassthroughSupport:   besides, gpu-vfio-<n> for every NVIDIA GPU PCI
//                         function (n: its place in bus-id order), with
//                         addressableMemory; the full GPU and its MIG devices
//                         are the twin's siblings (VfioSiblings).
//
//   FabricManagerPartitioning: gpuModuleID and partition<N> on full GPUs and
//                         VFIO devices.
// Thread-safety: values and pure functions.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "gpu/discovery.h"
#include "gpu/pci_sysfs.h"

namespace nvdra::gpu {

// A semantic version attribute value ("580.159.4").
struct Version {
  std::string value;
  friend bool operator==(const Version&, const Version&) = default;
};

using AttributeValue = std::variant<std::string, std::int64_t, bool, Version, std::vector<std::int64_t>>;

struct CounterConsumption {
  std::string counter_set;
  std::map<std::string, std::int64_t> counters;
};

// A consumable capacity's request policy (resource.k8s.io/v1
// CapacityRequestPolicy): what a request gets by default and what it may ask.
struct CapacityRequestPolicy {
  std::int64_t default_value = 0;
  std::int64_t min = 0;
  std::int64_t max = 0;
  std::int64_t step = 1;
  friend bool operator==(const CapacityRequestPolicy&, const CapacityRequestPolicy&) = default;
};

// --consumable-shares (gate ConsumableShares), as upstream: how several
// claims share one GPU through the scheduler's consumable capacity.
//  memory     each claim takes `memory` (default: all of it), 1Mi steps;
//  unlimited  each claim takes `memory` (default: none), 1Mi steps;
//  N > 0      as unlimited, plus a `shares` capacity of N (default 1).
// Whether DynamicMIG publishes a GPU's MIG profiles: it can change MIG mode
// without a reset (Hopper and later), or MIG is on already (Ampere).
bool DynamicMigCapable(const GpuInfo& gpu);

// The compute-instance profile index of the 1-slice REV1 variant, which names
// the same devices as 1_SLICE and is not published.
inline constexpr std::uint32_t kMigRev1ComputeProfileIndex = 0x7;

struct ConsumableShares {
  enum class Mode { kDisabled, kMemory, kUnlimited, kShares };
  Mode mode = Mode::kDisabled;
  std::int64_t shares = 0;  // kShares only

  // "disabled", "memory", "unlimited" or a positive integer (spaces around
  // are ignored, as upstream); kInvalidArgument otherwise.
  static common::StatusOr<ConsumableShares> Parse(std::string_view text);
  bool enabled() const { return mode != Mode::kDisabled; }
};

struct PublishedDevice {
  std::string name;
  // Unqualified names are in the driver's domain (gpu.nvidia.com);
  // Kubernetes' standard ones carry their "resource.kubernetes.io/" prefix.
  std::map<std::string, AttributeValue> attributes;
  std::map<std::string, std::int64_t> capacity;  // published as BinarySI quantities
  // Consumable capacity (--consumable-shares): per capacity name.
  std::map<std::string, CapacityRequestPolicy> request_policies;
  bool allow_multiple_allocations = false;
  std::vector<CounterConsumption> consumes_counters;
  // Device taints (resource.k8s.io/v1 DeviceTaint JSON without timeAdded):
  // the health monitor's, set at publishing time, never by BuildPublishedResources.
  std::vector<nlohmann::json> taints;
};

struct CounterSet {
  std::string name;
  std::map<std::string, std::int64_t> counters;
};

struct PublishedResources {
  std::vector<PublishedDevice> devices;  // per GPU in index order; a GPU's MIG devices by name
  std::vector<CounterSet> counter_sets;
};

struct PublishOptions {
  bool dynamic_mig = false;                  // gate DynamicMIG
  bool fabric_manager_partitioning = false;  // gate FabricManagerPartitioning: gpuModuleID
  // FabricManagerPartitioning on an NVSwitch node: GPU module id -> partition
  // size -> partition id, published as partition<size> on full and VFIO
  // devices (gpu/fabric_partitions.h).
  std::map<std::uint32_t, std::map<std::size_t, std::uint32_t>> fabric_partitions{};
  bool list_type_attributes = false;         // gate DRAListTypeAttributes: numaNode as a list
  ConsumableShares consumable_shares{};      // full GPUs and static MIG devices
  // PassthroughSupport: the node's NVIDIA GPU PCI functions (PciSysfs::ListGpus
  // order) and whether the host has IOMMUFD; empty: no VFIO devices.
  std::vector<PciGpuFunction> vfio_functions{};
  bool iommufd_enabled = false;
};

// "gpu-vfio-<index>".
std::string VfioDeviceName(std::size_t index);

// kInvalidArgument when a version reported by NVML cannot be made a semantic
// version (the API server would reject the slice).
common::StatusOr<PublishedResources> BuildPublishedResources(const NodeInventory& inventory,
                                                             const PublishOptions& options);

// "580.159.04" -> "580.159.4", "9.0" -> "9.0.0": the loose parsing upstream's
// semver library applies, printed as strict semver 2.0.0.
common::StatusOr<std::string> NormalizeVersion(const std::string& text);

// resource.k8s.io/v1 JSON: a Device ({"name", "attributes", "capacity",
// "consumesCounters", "taints"}) and a CounterSet ({"name", "counters"}).
nlohmann::json DeviceToJson(const PublishedDevice& device);
nlohmann::json CounterSetToJson(const CounterSet& set);

}  // namespace nvdra::gpu
