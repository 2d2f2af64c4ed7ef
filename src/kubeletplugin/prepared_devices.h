#pragma once

// What a plugin prepared for a claim, typed: groups of devices that share one
// applied configuration, each device one kind of a closed set (std::variant),
// and the one codec between that model and the "preparedDevices" JSON of
// upstream's checkpoint.json, written and read by both kubelet plugins.
//
// Defines: CheckpointedDevice, PreparedGpu, PreparedMig, PreparedVfio,
// PreparedChannel, PreparedDaemon, PreparedDeviceKind, PreparedDeviceEntry,
// GpuConfigState, CdConfigState, PreparedDeviceGroup, PreparedDeviceKindName,
// KubeletDevices, EncodePreparedGroups, DecodePreparedGroups.
//
// The JSON shapes (upstream's Go structs, field order and omitempty as there;
// test/data/checkpoint/ holds files the Go types wrote):
//   GPU plugin group:  {"devices":[{"gpu":G|null,"mig":M|null[,"vfio":V]}],
//                       "configState":{["mpsControlDaemonID":s,]["mpsApplied":b,]["timeSliceApplied":b]}}
//     G = {"info":{"uuid":s},"device":D}
//     M = {"concrete":{"parentMinor":n,"giId":n,"ciId":n,"migUUID":s,"parentUUID":s[,"parentPCIBusID":s]},"device":D}
//     V = {"info":{"uuid":s[,"pciBusID":s]},"device":D}
//   compute-domain plugin group: {"devices":[{"channel":C|null,"daemon":A|null}],
//                       "configState":{"Type":s,"ComputeDomain":s}}
//     C, A = {"info":{"id":n},"device":D}
//   D = {"Requests":[s],"PoolName":s,"DeviceName":s,"CDIDeviceIDs":[s][,"ShareID":s][,"Metadata":{...}]}
// A group belongs to the compute-domain family when its configState or one of
// its entries carries a compute-domain key; otherwise to the GPU family. The
// two families never mix in one group.
//
// Ownership: values. Thread-safety: thread-compatible values, pure functions.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "kubeletplugin/dra_service.h"

namespace nvdra::kubeletplugin {

// Upstream's kubeletplugin.Device as the checkpoint records it: what the
// kubelet received, plus the fields the kubelet API does not carry.
struct CheckpointedDevice {
  PreparedDevice device;
  std::optional<std::string> share_id;  // "ShareID": consumable-capacity share
  nlohmann::ordered_json metadata;      // "Metadata": kept as written; null when absent

  friend bool operator==(const CheckpointedDevice&, const CheckpointedDevice&) = default;
};

// A full GPU ("gpu").
struct PreparedGpu {
  std::string uuid;
  friend bool operator==(const PreparedGpu&, const PreparedGpu&) = default;
};

// A MIG device ("mig"): the live GPU and compute instance it is.
struct PreparedMig {
  int parent_minor = 0;
  int gi_id = 0;
  int ci_id = 0;
  std::string mig_uuid;
  std::string parent_uuid;
  std::string parent_pci_bus_id;  // omitted when empty
  friend bool operator==(const PreparedMig&, const PreparedMig&) = default;
};

// A GPU passed through with vfio-pci ("vfio").
struct PreparedVfio {
  std::string uuid;
  std::string pci_bus_id;  // omitted when empty
  friend bool operator==(const PreparedVfio&, const PreparedVfio&) = default;
};

// An IMEX channel ("channel").
struct PreparedChannel {
  int id = 0;
  friend bool operator==(const PreparedChannel&, const PreparedChannel&) = default;
};

// A compute-domain daemon device ("daemon").
struct PreparedDaemon {
  int id = 0;
  friend bool operator==(const PreparedDaemon&, const PreparedDaemon&) = default;
};

// New kinds (MPS, shares, fabric partitions) are added here; every
// std::visit over the variant then fails to compile until it handles them.
using PreparedDeviceKind = std::variant<PreparedGpu, PreparedMig, PreparedVfio, PreparedChannel, PreparedDaemon>;

// The JSON key of a kind: "gpu", "mig", "vfio", "channel", "daemon" (also the
// device_type label of nvidia_dra_prepared_devices).
std::string_view PreparedDeviceKindName(const PreparedDeviceKind& kind);

struct PreparedDeviceEntry {
  PreparedDeviceKind kind;
  CheckpointedDevice device;
  friend bool operator==(const PreparedDeviceEntry&, const PreparedDeviceEntry&) = default;
};

// What the GPU plugin applied to a group (sharing).
struct GpuConfigState {
  std::string mps_control_daemon_id;    // omitted when empty
  std::optional<bool> mps_applied;      // omitted when unset
  std::optional<bool> time_slice_applied;  // omitted when unset
  // Fabric Manager partitions the plugin activated for the claim
  // ("fabricPartitionIDs", ours alone; upstream's decoder ignores it).
  // nullopt: not recorded (no fabric on the node, or an older plugin wrote
  // the entry); empty: the claim needs none.
  std::optional<std::vector<std::uint32_t>> fabric_partition_ids{};
  friend bool operator==(const GpuConfigState&, const GpuConfigState&) = default;
};

// What the compute-domain plugin prepared a group for.
struct CdConfigState {
  std::string type;            // "Type": "channel" or "daemon"
  std::string compute_domain;  // "ComputeDomain": the domain's UID
  friend bool operator==(const CdConfigState&, const CdConfigState&) = default;
};

using PreparedConfigState = std::variant<GpuConfigState, CdConfigState>;

struct PreparedDeviceGroup {
  std::vector<PreparedDeviceEntry> devices;
  PreparedConfigState config_state;
  friend bool operator==(const PreparedDeviceGroup&, const PreparedDeviceGroup&) = default;
};

// The devices of `groups` as the kubelet wants them, in order.
std::vector<PreparedDevice> KubeletDevices(const std::vector<PreparedDeviceGroup>& groups);

// The "preparedDevices" array in upstream's shapes (see the file comment).
// An empty vector gives [] (the checkpoint codec omits it).
nlohmann::ordered_json EncodePreparedGroups(const std::vector<PreparedDeviceGroup>& groups);

// Parses "preparedDevices" (an array, or null for none). kDataLoss naming the
// path below `where` for a wrong type, an entry of no known kind or of two
// kinds, or an entry whose kind does not fit its group's family. Unknown
// members are ignored, as Go's decoder ignores them.
common::StatusOr<std::vector<PreparedDeviceGroup>> DecodePreparedGroups(const nlohmann::ordered_json& value,
                                                                        std::string_view where);

}  // namespace nvdra::kubeletplugin
