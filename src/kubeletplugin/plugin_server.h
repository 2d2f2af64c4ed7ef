#pragma once

// PluginServer: the gRPC side of a DRA kubelet plugin. It serves
//   - plugin registration (pluginregistration.Registration) on
//     <registrar_dir>/<driver>-reg.sock, which the kubelet discovers;
//   - the DRA services on the DRA socket (<plugin_dir>/dra.sock by default):
//     DRAPlugin v1 and v1beta1, translated to a DraDriver, and
//     DRAResourceHealth v1 and v1alpha1, streaming what PublishDeviceHealth
//     is given;
//   - optionally grpc.health.v1.Health on a TCP port for the pod's liveness
//     probe (services "" and "liveness"), SERVING while a GetInfo over the
//     registration socket and an empty NodePrepareResources over the DRA
//     socket both succeed.
// A socket file removed by someone else is noticed (inotify) and bound again;
// the kubelet registers a re-created registration socket afresh and its DRA
// client re-dials the DRA socket by itself, so nothing else is needed.
//
// Start order follows the Go kubeletplugin helper: the DRA socket listens
// before the registration socket appears, so the endpoint is ready when the
// kubelet learns of it.
//
// Ownership: owns its gRPC servers, their socket files (removed on
// destruction) and two threads (socket watcher, liveness prober). Borrows the
// DraDriver, which must outlive it. Destruction ends open health streams,
// gives in-flight calls up to `shutdown_grace`, then cancels them.
// Thread-safety: thread-safe.

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "kubeletplugin/dra_service.h"

namespace nvdra::kubeletplugin {

// Strings for PluginInfo.supported_versions, most preferred first.
inline constexpr const char* kDraPluginV1 = "v1.DRAPlugin";
inline constexpr const char* kDraPluginV1beta1 = "v1beta1.DRAPlugin";
inline constexpr const char* kDraResourceHealthV1 = "v1.DRAResourceHealth";
inline constexpr const char* kDraResourceHealthV1alpha1 = "v1alpha1.DRAResourceHealth";

struct PluginServerOptions {
  std::string driver_name;               // "gpu.nvidia.com"; names the registration socket
  std::filesystem::path registrar_dir;   // the kubelet's plugins_registry; created if missing
  std::filesystem::path plugin_dir;      // <kubelet plugins dir>/<driver>; created if missing
  // Where the DRA service listens. Empty: <plugin_dir>/dra.sock.
  std::filesystem::path dra_socket;
  // The DRA endpoint GetInfo reports, i.e. the path as the kubelet must dial
  // it. Empty: `dra_socket`. Differs only when this process sees the
  // directory at another path than the host does.
  std::filesystem::path advertised_endpoint;
  // TCP port of grpc.health.v1.Health: < 0 off, 0 any free port.
  int healthcheck_port = -1;
  // Address it binds. "[::]" (upstream's default) is every address, IPv4
  // included; tests use "127.0.0.1".
  std::string healthcheck_address = "[::]";
  // How often the liveness prober re-checks the two sockets. The health
  // service answers from the last result (gRPC's built-in health service
  // cannot compute a status per Check call).
  std::chrono::milliseconds health_probe_interval = std::chrono::seconds(5);
  // How long one probe call may take.
  std::chrono::milliseconds health_probe_timeout = std::chrono::seconds(2);
  // How long in-flight calls may run on during shutdown or a socket rebind.
  std::chrono::milliseconds shutdown_grace = std::chrono::seconds(5);
  bool serve_v1 = true;                  // DRAPlugin v1 (kubelet 1.34+)
  bool serve_v1beta1 = true;             // DRAPlugin v1beta1 (kubelet 1.32+)
  // DRAResourceHealth v1 and v1alpha1, served and advertised. Off for a
  // driver that never reports health.
  bool serve_health = true;
};

// What the kubelet last said through NotifyRegistrationStatus.
struct RegistrationState {
  bool notified = false;    // the kubelet has called at least once
  bool registered = false;  // its last call said plugin_registered
  std::string error;        // its last call's error text

  friend bool operator==(const RegistrationState&, const RegistrationState&) = default;
};

class PluginServer {
 public:
  // Creates the directories, removes stale socket files, and starts serving.
  // kInvalidArgument: empty driver name, relative or empty directories, no
  // DRAPlugin version enabled, a socket path longer than sun_path allows.
  // kUnavailable (or the errno's code): a directory cannot be created, a
  // socket or the health port cannot be bound.
  static common::StatusOr<std::unique_ptr<PluginServer>> Start(const PluginServerOptions& options,
                                                               DraDriver& driver);

  ~PluginServer();
  PluginServer(const PluginServer&) = delete;
  PluginServer& operator=(const PluginServer&) = delete;

  // Replaces the device-health report and sends it to every open
  // NodeWatchResources stream; streams opened later get it first. `devices`
  // is the complete list for the driver. A slow stream sees only the newest
  // report, never a backlog.
  void PublishDeviceHealth(std::vector<DeviceHealth> devices);

  // Probes both sockets now, updates the health service, and returns whether
  // both answered. Also run every `health_probe_interval` when the health
  // port is enabled.
  bool ProbeNow();

  [[nodiscard]] RegistrationState registration_state() const;
  [[nodiscard]] const std::filesystem::path& registration_socket() const;
  [[nodiscard]] const std::filesystem::path& dra_socket() const;
  // The bound health port, or -1 when off.
  [[nodiscard]] int healthcheck_port() const;
  // What GetInfo advertises, in order.
  [[nodiscard]] const std::vector<std::string>& supported_versions() const;
  // How many times a removed socket was bound again (for tests and logs).
  [[nodiscard]] int rebinds() const;

 private:
  class Impl;
  // Only Start can name it, so only Start constructs (through make_unique).
  struct PassKey {
    explicit PassKey() = default;
  };

 public:
  PluginServer(PassKey key, std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvdra::kubeletplugin
