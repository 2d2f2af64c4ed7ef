#include "gpu/device_health_reporter.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/log.h"
#include "k8s/rest_list_watch.h"

namespace nvdra::gpu {

using common::StatusOr;
using nlohmann::json;

namespace {

std::string_view TrimSpaces(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  return text;
}

}  // namespace

std::vector<kubeletplugin::DeviceHealth> HealthReport(const std::string& pool, const std::vector<std::string>& devices,
                                                      const std::map<std::string, std::vector<DeviceTaint>>& taints,
                                                      std::chrono::seconds timeout) {
  std::vector<kubeletplugin::DeviceHealth> report;
  const auto now = std::chrono::system_clock::now();
  for (const std::string& device : devices) {
    kubeletplugin::DeviceHealth health{.pool_name = pool,
                                       .device_name = device,
                                       .health = kubeletplugin::DeviceHealthStatus::kHealthy,
                                       .last_updated = now,
                                       .health_check_timeout = timeout,
                                       .message = ""};
    if (auto it = taints.find(device); it != taints.end()) {
      std::vector<std::string> parts;
      for (const DeviceTaint& taint : it->second) {
        if (taint.effect == TaintEffect::kNoSchedule) health.health = kubeletplugin::DeviceHealthStatus::kUnhealthy;
        parts.push_back(fmt::format("{} ({})", taint.Describe(), taint.effect == TaintEffect::kNoSchedule
                                                                     ? "taint effect NoSchedule"
                                                                     : "taint effect None"));
      }
      health.message = fmt::format("{}", fmt::join(parts, "; "));
    }
    report.push_back(std::move(health));
  }
  return report;
}

StatusOr<std::vector<std::string>> ParseHealthReset(std::string_view value, const std::set<std::string>& known) {
  value = TrimSpaces(value);
  if (value == "all") return std::vector<std::string>{};
  std::vector<std::string> devices;
  while (!value.empty()) {
    const auto comma = value.find(',');
    const std::string_view item = TrimSpaces(value.substr(0, comma));
    if (!item.empty()) {
      if (!known.contains(std::string(item))) {
        return common::InvalidArgumentError(fmt::format(
            "annotation {}: \"{}\" is not a device of this node; give \"all\" or device names from its "
            "ResourceSlice such as \"{}\"",
            kDeviceHealthResetAnnotation, item, known.empty() ? "gpu-0" : *known.begin()));
      }
      devices.emplace_back(item);
    }
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
  }
  if (devices.empty()) {
    return common::InvalidArgumentError(fmt::format(
        "annotation {} is empty; give \"all\" or comma-separated device names", kDeviceHealthResetAnnotation));
  }
  return devices;
}

StatusOr<std::unique_ptr<DeviceHealthReporter>> DeviceHealthReporter::Start(k8s::Client& client,
                                                                           DeviceHealthBook& book,
                                                                           DeviceHealthReporterOptions options) {
  std::unique_ptr<DeviceHealthReporter> reporter(new DeviceHealthReporter(client, book, std::move(options)));
  {
    common::MutexLock lock(reporter->mu_);
    reporter->node_ = k8s::ObjectReference{.api_version = "v1",
                                           .kind = "Node",
                                           .namespace_ = "",
                                           .name = reporter->options_.node_name,
                                           .uid = "",
                                           .resource_version = ""};
  }
  ASSIGN_OR_RETURN(reporter->events_,
                   k8s::EventRecorder::New(&client, {.reporting_controller = "gpu.nvidia.com/kubelet-plugin",
                                                     .reporting_instance = reporter->options_.node_name}));
  k8s::cache::InformerOptions informer_options;
  informer_options.description = "v1/nodes (" + reporter->options_.node_name + ", device health reset)";
  informer_options.field_selector = "metadata.name=" + reporter->options_.node_name;
  reporter->node_informer_ = std::make_unique<k8s::cache::Informer>(
      std::make_unique<k8s::RestListWatch>(client, k8s::resources::kNodes, ""), informer_options);
  DeviceHealthReporter* self = reporter.get();
  reporter->node_informer_->AddEventHandler(k8s::cache::EventHandler{
      .on_add = [self](const k8s::cache::ObjectPtr& node) { self->OnNode(node); },
      .on_update = [self](const k8s::cache::ObjectPtr&, const k8s::cache::ObjectPtr& node) { self->OnNode(node); },
      .on_delete = nullptr,
      .needs_old_object = false,
  });
  reporter->node_informer_->Start();
  return reporter;
}

DeviceHealthReporter::~DeviceHealthReporter() {
  if (node_informer_) node_informer_->Stop();
}

void DeviceHealthReporter::PublishAll() {
  const auto taints = book_.Taints();
  if (options_.publish_taints) options_.publish_taints(taints);
  if (options_.publish_health) {
    options_.publish_health(HealthReport(options_.node_name, options_.devices, taints, options_.health_check_timeout));
  }
}

void DeviceHealthReporter::Heartbeat() {
  if (!options_.publish_health) return;
  options_.publish_health(
      HealthReport(options_.node_name, options_.devices, book_.Taints(), options_.health_check_timeout));
}

void DeviceHealthReporter::OnChange(const std::vector<HealthNote>& notes) {
  PublishAll();
  k8s::ObjectReference node;
  {
    common::MutexLock lock(mu_);
    node = node_;
  }
  for (const HealthNote& note : notes) {
    events_->Emit(node, note.recovered ? k8s::EventType::kNormal : k8s::EventType::kWarning,
                  note.recovered ? "DeviceHealthy" : "DeviceUnhealthy", "DeviceHealthCheck",
                  note.repeats > 1 ? fmt::format("{}: {} (the latest of {} such events)", fmt::join(note.devices, ", "),
                                                 note.text, note.repeats)
                                   : fmt::format("{}: {}", fmt::join(note.devices, ", "), note.text));
  }
}

void DeviceHealthReporter::OnNode(const k8s::cache::ObjectPtr& node) {
  if (node == nullptr) return;
  const json& metadata = node->contains("metadata") ? (*node)["metadata"] : json::object();
  {
    common::MutexLock lock(mu_);
    node_.uid = metadata.value("uid", "");
  }
  if (!metadata.contains("annotations") || !metadata["annotations"].is_object()) return;
  const json& annotations = metadata["annotations"];
  auto it = annotations.find(std::string(kDeviceHealthResetAnnotation));
  if (it == annotations.end() || !it->is_string()) return;
  const std::string value = it->get<std::string>();
  StatusOr<std::vector<std::string>> devices = ParseHealthReset(value, book_.devices());
  std::vector<HealthNote> notes;
  if (!devices.ok()) {
    LOG_WARNING("device health reset refused", {{"error", devices.status().ToString()}});
    k8s::ObjectReference ref;
    {
      common::MutexLock lock(mu_);
      ref = node_;
    }
    events_->Emit(ref, k8s::EventType::kWarning, "DeviceHealthResetRefused", "DeviceHealthCheck",
                  devices.status().message());
  } else {
    const std::map<std::string, std::vector<DeviceTaint>> before = book_.Taints();
    book_.Clear(*devices, "");
    if (common::Status written = book_.Commit(); !written.ok()) {
      LOG_ERROR("device health reset: writing the health record failed", {{"error", written.ToString()}});
    }
    std::vector<std::string> names;
    for (const auto& [device, unused] : before) {
      if (devices->empty() || std::find(devices->begin(), devices->end(), device) != devices->end()) {
        names.push_back(device);
      }
    }
    LOG_INFO(0, "device health reset by the Node annotation", {{"value", value}, {"cleared", names.size()}});
    if (!names.empty()) {
      notes.push_back({.recovered = true,
                       .devices = names,
                       .text = fmt::format("taints cleared by annotation {}", kDeviceHealthResetAnnotation)});
    }
  }
  if (!notes.empty()) OnChange(notes);
  // Done (or refused with an Event): the annotation goes, so the next reset
  // is a new one. Setting it to null removes it; a conflict is harmless.
  json patch = {{"metadata", {{"annotations", {{std::string(kDeviceHealthResetAnnotation), nullptr}}}}}};
  auto removed = client_.Patch(k8s::resources::kNodes, "", options_.node_name, k8s::PatchType::kMerge, patch);
  if (!removed.ok()) {
    LOG_WARNING("device health reset: removing the Node annotation failed",
                {{"error", removed.status().ToString()}});
  }
}

}  // namespace nvdra::gpu
