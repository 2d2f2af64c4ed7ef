#pragma once

// Shows the device health book (gpu/device_health.h) to everyone who needs
// it, and takes an operator's clearing of it:
//   - the ResourceSlices: each device's taints (the scheduler's view);
//   - the kubelet: the DRAResourceHealth report (pods' allocatedResourcesStatus),
//     Unhealthy while a device has a NoSchedule taint, sent on every change and
//     again every `heartbeat` (the kubelet forgets a device not reported within
//     its health check timeout);
//   - Node Events: DeviceUnhealthy (Warning) and DeviceHealthy (Normal), one per
//     change, naming the devices and the condition;
//   - the Node annotation gpu.nvidia.com/device-health-reset: "all" or a
//     comma-separated list of device names clears those devices' taints (for
//     an XID, once the operator has dealt with its cause); the plugin removes
//     the annotation once done.
//
// Ownership: owns the Node informer and the event recorder; borrows the book
// and the client. Thread-safety: thread-safe; callbacks may come from the
// monitor thread, the informer's dispatch thread and the periodic task.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "gpu/device_health.h"
#include "k8s/cache/informer.h"
#include "k8s/client.h"
#include "k8s/event_recorder.h"
#include "kubeletplugin/dra_service.h"

namespace nvdra::gpu {

inline constexpr std::string_view kDeviceHealthResetAnnotation = "gpu.nvidia.com/device-health-reset";

struct DeviceHealthReporterOptions {
  std::string node_name;
  // Every device in the kubelet report (the published full GPUs and MIG devices).
  std::vector<std::string> devices;
  // How long the kubelet trusts a report, and how often it is sent anyway.
  std::chrono::seconds health_check_timeout{60};
  // Devices' taints to the slices (the complete map each time).
  std::function<void(const std::map<std::string, std::vector<DeviceTaint>>& taints)> publish_taints;
  // The complete report to the kubelet; empty until the server runs.
  std::function<void(std::vector<kubeletplugin::DeviceHealth> report)> publish_health;
};

// The kubelet report for `devices` given the book's taints.
std::vector<kubeletplugin::DeviceHealth> HealthReport(const std::string& pool, const std::vector<std::string>& devices,
                                                      const std::map<std::string, std::vector<DeviceTaint>>& taints,
                                                      std::chrono::seconds timeout);

// "all" -> every device (empty list); "gpu-0, gpu-1" -> those. kInvalidArgument
// for an empty value or a name not among `known`.
common::StatusOr<std::vector<std::string>> ParseHealthReset(std::string_view value,
                                                            const std::set<std::string>& known);

class DeviceHealthReporter {
 public:
  // Starts the Node informer and the event recorder.
  static common::StatusOr<std::unique_ptr<DeviceHealthReporter>> Start(k8s::Client& client, DeviceHealthBook& book,
                                                                       DeviceHealthReporterOptions options);
  ~DeviceHealthReporter();
  DeviceHealthReporter(const DeviceHealthReporter&) = delete;
  DeviceHealthReporter& operator=(const DeviceHealthReporter&) = delete;

  // The book changed: publish everything, record one Event per note.
  void OnChange(const std::vector<HealthNote>& notes);
  // Sends the kubelet report again (the periodic task).
  void Heartbeat();

 private:
  DeviceHealthReporter(k8s::Client& client, DeviceHealthBook& book, DeviceHealthReporterOptions options)
      : client_(client), book_(book), options_(std::move(options)) {}
  void OnNode(const k8s::cache::ObjectPtr& node);
  void PublishAll();

  k8s::Client& client_;
  DeviceHealthBook& book_;
  const DeviceHealthReporterOptions options_;
  common::Mutex mu_;
  k8s::ObjectReference node_ GUARDED_BY(mu_);  // uid once the informer saw the Node
  std::unique_ptr<k8s::EventRecorder> events_;
  std::unique_ptr<k8s::cache::Informer> node_informer_;  // last: stopped first
};

}  // namespace nvdra::gpu
