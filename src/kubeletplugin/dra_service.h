#pragma once

// The driver-neutral face of a DRA kubelet plugin: what the gRPC layer
// (PluginServer, plugin_server.h) calls for NodePrepareResources and
// NodeUnprepareResources, whatever API version the kubelet used (v1 or
// v1beta1), and the device-health values it streams to the kubelet.
//
// Defines: ClaimRef, PreparedDevice, PrepareResult, DraDriver,
// DeviceHealthStatus, DeviceHealth.
//
// Ownership: plain values; a DraDriver is borrowed by PluginServer and must
// outlive it. Thread-safety: DraDriver implementations must be thread-safe
// (see below); the structs are thread-compatible values.

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace nvdra::kubeletplugin {

// A claim as the kubelet names it in a request.
struct ClaimRef {
  std::string uid;
  std::string name;
  std::string ns;

  friend bool operator==(const ClaimRef&, const ClaimRef&) = default;
};

// One device prepared for a claim, as the kubelet receives it.
struct PreparedDevice {
  // Requests of the claim this device serves; empty means all of them.
  // Subrequest names ("<request>/<sub>") may be given as they are: the gRPC
  // layer cuts them to "<request>", since containers reference base requests.
  std::vector<std::string> requests;
  std::string pool_name;
  std::string device_name;
  // Fully qualified CDI device IDs ("vendor/class=name"); may be empty.
  std::vector<std::string> cdi_device_ids;
  // The allocation's share of a device that serves several claims
  // (consumable capacity); DRAPlugin v1 passes it on, v1beta1 has no field.
  std::optional<std::string> share_id{};

  friend bool operator==(const PreparedDevice&, const PreparedDevice&) = default;
};

// The outcome for one claim. A non-empty `error` means preparing failed (the
// kubelet fails the pod start and retries later) and `devices` is ignored.
// An empty device list with no error is a valid success.
struct PrepareResult {
  std::vector<PreparedDevice> devices;
  std::string error;

  friend bool operator==(const PrepareResult&, const PrepareResult&) = default;
};

// Implemented by each plugin (gpu, compute-domain). Called concurrently from
// gRPC threads, so implementations must be thread-safe; both calls may repeat
// for the same claim (kubelet restarts and retries) and must be idempotent.
class DraDriver {
 public:
  virtual ~DraDriver() = default;

  // Keyed by claim UID. Every requested UID should have an entry: the gRPC
  // layer fills a missing one with an error, because the kubelet rejects a
  // reply that leaves a claim out. Not called for an empty request.
  virtual std::map<std::string, PrepareResult> PrepareResourceClaims(
      const std::vector<ClaimRef>& claims) = 0;

  // Claim UID -> error ("" = unprepared). Unpreparing an unknown claim is a
  // success. Missing entries are filled as for Prepare.
  virtual std::map<std::string, std::string> UnprepareResourceClaims(
      const std::vector<ClaimRef>& claims) = 0;
};

// Health of one device as the kubelet's DRAResourceHealth API spells it.
enum class DeviceHealthStatus { kUnknown, kHealthy, kUnhealthy };

// One device's entry in a health report. A report is always the complete list
// for the driver: devices left out become Unknown at the kubelet once their
// timeout passes.
struct DeviceHealth {
  std::string pool_name;
  std::string device_name;
  DeviceHealthStatus health = DeviceHealthStatus::kUnknown;
  // When the status was last determined; the epoch is sent as 0 ("unset").
  std::chrono::system_clock::time_point last_updated{};
  // How long the kubelet trusts this entry; zero or less means the kubelet's
  // default (30 s in 1.35+).
  std::chrono::seconds health_check_timeout{0};
  // Free text for people (kubelet 1.36+); cut to 1024 characters on the wire.
  std::string message;

  friend bool operator==(const DeviceHealth&, const DeviceHealth&) = default;
};

}  // namespace nvdra::kubeletplugin
