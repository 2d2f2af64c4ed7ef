#pragma once

// What every kubelet plugin runs around its own device backend: the
// checkpointed ClaimPreparer over the backend, the ResourceSlicePublisher
// with the plugin's devices, and, after one reconcile of the checkpoint, the
// gRPC servers the kubelet calls. The GPU and compute-domain plugins each
// build their backend and devices, then start one PluginHost.
//
// Ownership: owns the claim reader, preparer, publisher and server; borrows
// the client and the backend, which must outlive it. Destruction stops the
// server first (no new kubelet calls), then the preparer, then the publisher
// (slices stay published: a restarting plugin adopts them).
// Thread-safety: Start and the destructor from one thread; preparer() and
// publisher() are thread-safe objects.

#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "common/status.h"
#include "k8s/client.h"
#include "kubeletplugin/claim_device_backend.h"
#include "kubeletplugin/claim_preparer.h"
#include "kubeletplugin/flags.h"
#include "kubeletplugin/plugin_server.h"
#include "kubeletplugin/resource_slice_publisher.h"

namespace nvdra::kubeletplugin {

struct PluginHostOptions {
  // driver_name, plugin_dir and boot_id are filled by Start from `flags`,
  // the driver name and the boot id file; the rest is the plugin's.
  ClaimPreparerOptions preparer;
  std::filesystem::path boot_id_file = "/proc/sys/kernel/random/boot_id";
  // The plugin's devices, published before serving.
  DriverResources resources;
  // Runs once after the first reconcile, before serving (plugin-specific
  // clean-up that needs the reconciled checkpoint, or a republish of devices
  // that depend on it); may be empty.
  std::function<void(ClaimPreparer& preparer, ResourceSlicePublisher& publisher)> after_reconcile;
  // Removes the plugin's claim CDI specs whose claim UID is not in `keep`;
  // how many went. When set, it runs after the first reconcile if start-up
  // discarded the checkpoint of an earlier boot: those specs describe
  // devices of that boot (a CDI root on disk keeps them). Not after a
  // checkpoint lost without a reboot: its claims' pods still run, and each
  // spec goes at its claim's Unprepare (ClaimDeviceBackend::ForgetUnknownClaim).
  std::function<common::StatusOr<int>(const std::set<std::string>& keep)> remove_claim_specs_except;
};

class PluginHost {
 public:
  // <flags.kubelet_plugins_directory_path>/<driver> is the plugin folder
  // (checkpoint, locks, socket). Errors of the boot id, the checkpoint, the
  // publisher's start and the servers' start.
  static common::StatusOr<std::unique_ptr<PluginHost>> Start(const KubeletPluginFlags& flags,
                                                             const std::string& driver, k8s::Client& client,
                                                             ClaimDeviceBackend& backend, PluginHostOptions options);
  ~PluginHost();
  PluginHost(const PluginHost&) = delete;
  PluginHost& operator=(const PluginHost&) = delete;

  ClaimPreparer& preparer() { return *preparer_; }
  ResourceSlicePublisher& publisher() { return *publisher_; }
  // The kubelet-facing server (device health reports go through it).
  PluginServer& server() { return *server_; }

 private:
  PluginHost() = default;

  std::unique_ptr<ApiClaimReader> claim_reader_;
  std::unique_ptr<ResourceSlicePublisher> publisher_;
  std::unique_ptr<ClaimPreparer> preparer_;
  std::unique_ptr<PluginServer> server_;
};

}  // namespace nvdra::kubeletplugin
