#include "gpu/device_health.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "common/file_io.h"
#include "common/log.h"
#include "gpu/mig_profile.h"
#include "nvml/fabric_health.h"

namespace nvdra::gpu {

using common::Status;
using common::StatusOr;
using nlohmann::json;

namespace {

std::string_view EffectName(TaintEffect effect) { return effect == TaintEffect::kNone ? "None" : "NoSchedule"; }

std::int64_t MillisOf(std::chrono::system_clock::time_point time) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count();
}

json RecordTaint(const DeviceTaint& taint) {
  json entry = DeviceTaintJson(taint);
  entry["sinceMillis"] = MillisOf(taint.since);
  return entry;
}

StatusOr<DeviceTaint> ParseRecordTaint(const json& entry) {
  if (!entry.is_object() || !entry.contains("key") || !entry["key"].is_string() || !entry.contains("effect") ||
      !entry["effect"].is_string()) {
    return common::DataLossError("a taint without key or effect");
  }
  DeviceTaint taint;
  taint.key = entry["key"].get<std::string>();
  if (entry.contains("value") && entry["value"].is_string()) taint.value = entry["value"].get<std::string>();
  const std::string effect = entry["effect"].get<std::string>();
  if (effect == "None") {
    taint.effect = TaintEffect::kNone;
  } else if (effect == "NoSchedule") {
    taint.effect = TaintEffect::kNoSchedule;
  } else {
    return common::DataLossError(fmt::format("taint effect \"{}\"", effect));
  }
  if (entry.contains("sinceMillis") && entry["sinceMillis"].is_number_integer()) {
    taint.since = std::chrono::system_clock::time_point(std::chrono::milliseconds(entry["sinceMillis"].get<std::int64_t>()));
  }
  return taint;
}

}  // namespace

std::string DeviceTaint::Describe() const {
  if (key == kTaintKeyXid) return fmt::format("XID {}", value);
  if (key == kTaintKeyGpuLost) return "GPU lost";
  if (key == kTaintKeyUnmonitored) return "not monitored";
  if (key == kTaintKeyNvlinkFabric) return fmt::format("NVLink fabric {}", value);
  return value.empty() ? key : fmt::format("{}={}", key, value);
}

json DeviceTaintJson(const DeviceTaint& taint) {
  json out = {{"key", taint.key}, {"effect", EffectName(taint.effect)}};
  if (!taint.value.empty()) out["value"] = taint.value;
  return out;
}

// --- Watched devices -----------------------------------------------------------------

std::vector<WatchedDevice> WatchedDevicesOf(const NodeInventory& inventory) {
  std::vector<WatchedDevice> devices;
  for (const GpuInfo& gpu : inventory.gpus) {
    if (!gpu.mig_enabled) {
      devices.push_back({.name = GpuDeviceName(gpu.minor), .gpu_uuid = gpu.uuid, .gpu_instance_id = std::nullopt,
                         .compute_instance_id = std::nullopt});
      continue;
    }
    for (const MigDeviceInfo& mig : gpu.mig_devices) {
      devices.push_back({.name = MigDeviceName(gpu.minor, mig.profile, mig.gi.id, mig.placement.start),
                         .gpu_uuid = gpu.uuid,
                         .gpu_instance_id = mig.gi_id,
                         .compute_instance_id = mig.ci_id});
    }
  }
  return devices;
}

// --- DeviceHealthBook ----------------------------------------------------------------

StatusOr<std::unique_ptr<DeviceHealthBook>> DeviceHealthBook::Open(std::filesystem::path record_file,
                                                                  std::string boot_id,
                                                                  std::set<std::string> devices) {
  std::unique_ptr<DeviceHealthBook> book(
      new DeviceHealthBook(std::move(record_file), std::move(boot_id), std::move(devices)));
  std::error_code ec;
  if (!std::filesystem::exists(book->record_file_, ec)) return book;
  const auto corrupt = [&](std::string_view why) {
    return common::DataLossError(fmt::format(
        "device health record {} cannot be read ({}); remove the file to start with every device healthy "
        "(its taints are lost; the plugin taints devices again on their next NVML event)",
        book->record_file_.string(), why));
  };
  ASSIGN_OR_RETURN(const std::string text, common::ReadWholeFile(book->record_file_));
  const json record = json::parse(text, nullptr, false);
  if (!record.is_object() || !record.contains("devices") || !record["devices"].is_object()) {
    return corrupt("not a JSON object with \"devices\"");
  }
  if (record.value("bootID", std::string()) != book->boot_id_) {
    LOG_INFO(0, "device health record of an earlier boot dropped (a reboot resets the GPUs)",
             {{"file", book->record_file_.string()}});
    return book;
  }
  common::MutexLock lock(book->mu_);
  for (const auto& [device, taints] : record["devices"].items()) {
    if (!book->devices_.contains(device)) continue;  // gone since (MIG reconfigured)
    if (!taints.is_array()) return corrupt(fmt::format("the taints of {} are not a list", device));
    for (const json& entry : taints) {
      StatusOr<DeviceTaint> taint = ParseRecordTaint(entry);
      if (!taint.ok()) return corrupt(fmt::format("{}: {}", device, taint.status().message()));
      book->taints_[device][taint->key] = *std::move(taint);
    }
  }
  return book;
}

bool DeviceHealthBook::Set(const std::vector<std::string>& devices, const DeviceTaint& taint) {
  common::MutexLock lock(mu_);
  bool changed = false;
  for (const std::string& device : devices) {
    if (!devices_.contains(device)) continue;
    DeviceTaint& slot = taints_[device][taint.key];
    // The time of an unchanged condition stays: the kubelet and Events show
    // when it began.
    if (slot.key == taint.key && slot.value == taint.value && slot.effect == taint.effect) continue;
    slot = taint;
    changed = true;
  }
  dirty_ = dirty_ || changed;
  return changed;
}

bool DeviceHealthBook::ClearLocked(const std::string& device, std::string_view key) {
  auto it = taints_.find(device);
  if (it == taints_.end()) return false;
  bool changed = false;
  if (key.empty()) {
    changed = !it->second.empty();
    it->second.clear();
  } else {
    changed = it->second.erase(std::string(key)) > 0;
  }
  if (it->second.empty()) taints_.erase(it);
  return changed;
}

bool DeviceHealthBook::Clear(const std::vector<std::string>& devices, std::string_view key) {
  common::MutexLock lock(mu_);
  bool changed = false;
  if (devices.empty()) {
    std::vector<std::string> all;
    for (const auto& [device, unused] : taints_) all.push_back(device);
    for (const std::string& device : all) changed = ClearLocked(device, key) || changed;
  } else {
    for (const std::string& device : devices) changed = ClearLocked(device, key) || changed;
  }
  dirty_ = dirty_ || changed;
  return changed;
}

Status DeviceHealthBook::Commit() {
  common::MutexLock lock(mu_);
  if (!dirty_) return common::OkStatus();
  RETURN_IF_ERROR(WriteLocked());
  dirty_ = false;
  ++writes_;
  return common::OkStatus();
}

std::uint64_t DeviceHealthBook::writes() const {
  common::MutexLock lock(mu_);
  return writes_;
}

std::map<std::string, std::vector<DeviceTaint>> DeviceHealthBook::Taints() const {
  common::MutexLock lock(mu_);
  std::map<std::string, std::vector<DeviceTaint>> out;
  for (const auto& [device, by_key] : taints_) {
    for (const auto& [unused, taint] : by_key) out[device].push_back(taint);
  }
  return out;
}

Status DeviceHealthBook::WriteLocked() const {
  json devices = json::object();
  for (const auto& [device, by_key] : taints_) {
    json list = json::array();
    for (const auto& [unused, taint] : by_key) list.push_back(RecordTaint(taint));
    devices[device] = std::move(list);
  }
  const json record = {{"bootID", boot_id_}, {"devices", std::move(devices)}};
  return common::ReplaceFile(record_file_, record.dump(), 0644, /*durable=*/true);
}

// --- NvmlHealthMonitor ---------------------------------------------------------------

namespace {

constexpr std::uint64_t kWatchedEvents = nvml::abi::nvmlEventTypeXidCriticalError |
                                         nvml::abi::nvmlEventTypeDoubleBitEccError |
                                         nvml::abi::nvmlEventTypeSingleBitEccError;

}  // namespace

StatusOr<std::unique_ptr<NvmlHealthMonitor>> NvmlHealthMonitor::Start(const nvml::Library& library,
                                                                      DeviceHealthBook& book,
                                                                      HealthMonitorOptions options) {
  StatusOr<nvml::EventSet> set = library.CreateEventSet();
  if (!set.ok()) return set.status().WithContext("NVMLDeviceHealthCheck: creating the NVML event set");
  std::unique_ptr<NvmlHealthMonitor> monitor(
      new NvmlHealthMonitor(library, *std::move(set), book, std::move(options)));
  // Registered before the thread starts, so an event that comes after Start
  // returns is never missed.
  std::vector<HealthNote> notes = monitor->RegisterAll();
  for (const WatchedDevice& device : monitor->options_.devices) {
    auto& gpus = monitor->fabric_gpus_;
    if (std::find(gpus.begin(), gpus.end(), device.gpu_uuid) != gpus.end()) continue;
    StatusOr<nvml::Device> gpu = library.DeviceByUuid(device.gpu_uuid);
    StatusOr<nvml::FabricInfo> fabric = gpu.ok() ? gpu->GpuFabricInfo(nvml::Device::FabricCall::kPreferVersioned) : StatusOr<nvml::FabricInfo>(gpu.status());
    if (fabric.ok() && fabric->state != nvml::abi::NVML_GPU_FABRIC_STATE_NOT_SUPPORTED) gpus.push_back(device.gpu_uuid);
  }
  monitor->CheckFabric(notes);
  monitor->Commit();
  if (!notes.empty() && monitor->options_.on_change) monitor->options_.on_change(notes);
  monitor->thread_ = std::jthread([m = monitor.get()](std::stop_token stop) { m->Run(stop); });
  return monitor;
}

NvmlHealthMonitor::NvmlHealthMonitor(const nvml::Library& library, nvml::EventSet set, DeviceHealthBook& book,
                                     HealthMonitorOptions options)
    : library_(library), set_(std::move(set)), book_(book), options_(std::move(options)) {}

NvmlHealthMonitor::~NvmlHealthMonitor() {
  thread_.request_stop();
  if (thread_.joinable()) thread_.join();
}

std::vector<std::string> NvmlHealthMonitor::DevicesOfGpu(const std::string& uuid) const {
  std::vector<std::string> out;
  for (const WatchedDevice& device : options_.devices) {
    if (device.gpu_uuid == uuid) out.push_back(device.name);
  }
  return out;
}

void NvmlHealthMonitor::Record(const std::vector<std::string>& devices, const DeviceTaint& taint, std::string text,
                               std::vector<HealthNote>& notes) {
  if (!book_.Set(devices, taint)) return;
  for (HealthNote& note : notes) {
    if (!note.recovered && note.key == taint.key && note.devices == devices) {
      note.text = std::move(text);
      ++note.repeats;
      return;
    }
  }
  notes.push_back({.recovered = false, .devices = devices, .text = std::move(text), .key = taint.key, .repeats = 1});
}

std::vector<HealthNote> NvmlHealthMonitor::RegisterAll() {
  std::vector<HealthNote> notes;
  std::vector<std::string> uuids;
  for (const WatchedDevice& device : options_.devices) {
    if (std::find(uuids.begin(), uuids.end(), device.gpu_uuid) == uuids.end()) uuids.push_back(device.gpu_uuid);
  }
  const auto now = std::chrono::system_clock::now();
  for (const std::string& uuid : uuids) {
    const std::vector<std::string> devices = DevicesOfGpu(uuid);
    Status status = [&]() -> Status {
      ASSIGN_OR_RETURN(const nvml::Device gpu, library_.DeviceByUuid(uuid));
      ASSIGN_OR_RETURN(const std::uint64_t supported, gpu.SupportedEventTypes());
      return set_.Register(gpu, kWatchedEvents & supported);
    }();
    if (status.ok()) {
      if (book_.Clear(devices, kTaintKeyUnmonitored)) {
        notes.push_back({.recovered = true, .devices = devices, .text = fmt::format("GPU {} is monitored again", uuid)});
      }
      continue;
    }
    LOG_WARNING("device health: the GPU's events cannot be watched; its devices get the unmonitored taint",
                {{"gpu", uuid}, {"error", status.ToString()}});
    Record(devices,
           DeviceTaint{.key = std::string(kTaintKeyUnmonitored), .value = "", .effect = TaintEffect::kNone, .since = now},
           fmt::format("GPU {} is not monitored: {}", uuid, status.message()), notes);
  }
  return notes;
}

void NvmlHealthMonitor::Apply(const nvml::Event& event, std::vector<HealthNote>& notes) {
  std::uint64_t xid = 0;
  if (event.type == nvml::abi::nvmlEventTypeXidCriticalError) {
    xid = event.data;
  } else if (event.type == nvml::abi::nvmlEventTypeDoubleBitEccError) {
    xid = kDoubleBitEccXid;
  } else {
    // Single-bit ECC errors are corrected; registered as upstream does, but
    // they do not make a device unhealthy.
    LOG_INFO(4, "device health: event skipped", {{"type", event.type}, {"gpu", event.device_uuid}});
    return;
  }
  if (event.device_uuid.empty()) {
    // NVML could not say which GPU: as upstream, every device is suspect.
    LOG_WARNING("device health: an event names no GPU; treating every GPU as lost", {{"xid", xid}});
    ApplyGpuLost(notes);
    return;
  }
  std::vector<std::string> devices;
  const bool whole_gpu = !event.gpu_instance_id.has_value();
  for (const WatchedDevice& device : options_.devices) {
    if (device.gpu_uuid != event.device_uuid) continue;
    // An event of the whole GPU reaches its MIG devices too.
    if (whole_gpu || (device.gpu_instance_id == event.gpu_instance_id &&
                      (!event.compute_instance_id || device.compute_instance_id == event.compute_instance_id))) {
      devices.push_back(device.name);
    }
  }
  if (devices.empty()) {
    LOG_INFO(4, "device health: event for a device not published here",
             {{"gpu", event.device_uuid}, {"xid", xid}});
    return;
  }
  const TaintEffect effect = options_.xids.IsApplicationXid(xid) ? TaintEffect::kNone : TaintEffect::kNoSchedule;
  LOG_INFO(0, "device health: XID event",
           {{"gpu", event.device_uuid}, {"xid", xid}, {"effect", EffectName(effect)}, {"devices", devices.size()}});
  Record(devices,
         DeviceTaint{.key = std::string(kTaintKeyXid), .value = std::to_string(xid), .effect = effect,
                     .since = std::chrono::system_clock::now()},
         fmt::format("XID {} on GPU {}{} ({})", xid, event.device_uuid,
                     event.type == nvml::abi::nvmlEventTypeDoubleBitEccError ? ", a double-bit ECC error" : "",
                     EffectName(effect)),
         notes);
}

void NvmlHealthMonitor::ApplyGpuLost(std::vector<HealthNote>& notes) {
  // NVML's wait says a GPU is lost, not which: each GPU is asked, and those
  // that do not answer are the lost ones. If all answer, all are suspect.
  std::vector<std::string> lost;
  std::vector<std::string> all;
  for (const WatchedDevice& device : options_.devices) {
    if (std::find(all.begin(), all.end(), device.gpu_uuid) != all.end()) continue;
    all.push_back(device.gpu_uuid);
    StatusOr<nvml::Device> gpu = library_.DeviceByUuid(device.gpu_uuid);
    Status answer = gpu.ok() ? gpu->Memory().status() : gpu.status();
    if (nvml::IsGpuLost(answer)) lost.push_back(device.gpu_uuid);
  }
  if (lost.empty()) lost = all;
  const auto now = std::chrono::system_clock::now();
  for (const std::string& uuid : lost) {
    lost_gpus_.insert(uuid);
    LOG_WARNING("device health: GPU lost", {{"gpu", uuid}});
    Record(DevicesOfGpu(uuid),
           DeviceTaint{.key = std::string(kTaintKeyGpuLost), .value = "", .effect = TaintEffect::kNoSchedule, .since = now},
           fmt::format("GPU {} is lost (it fell off the bus or stopped answering)", uuid), notes);
  }
}

void NvmlHealthMonitor::CheckLostGpus(std::vector<HealthNote>& notes) {
  for (auto it = lost_gpus_.begin(); it != lost_gpus_.end();) {
    StatusOr<nvml::Device> gpu = library_.DeviceByUuid(*it);
    Status answer = gpu.ok() ? gpu->Memory().status() : gpu.status();
    if (!answer.ok() && !nvml::IsNotSupported(answer)) {
      ++it;
      continue;
    }
    const std::vector<std::string> devices = DevicesOfGpu(*it);
    book_.Clear(devices, kTaintKeyGpuLost);
    LOG_INFO(0, "device health: GPU answers again", {{"gpu", *it}});
    notes.push_back({.recovered = true, .devices = devices, .text = fmt::format("GPU {} answers NVML again", *it)});
    it = lost_gpus_.erase(it);
  }
}

void NvmlHealthMonitor::Commit() {
  // On failure the taints stay in memory and published; only a restart
  // before the next successful write would forget them.
  if (Status written = book_.Commit(); !written.ok()) {
    LOG_ERROR("device health: writing the health record failed", {{"error", written.ToString()}});
  }
}

void NvmlHealthMonitor::CheckFabric(std::vector<HealthNote>& notes) {
  if (fabric_gpus_.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  if (fabric_checked_ != std::chrono::steady_clock::time_point{} && now - fabric_checked_ < options_.wait_turn) return;
  fabric_checked_ = now;
  for (const std::string& uuid : fabric_gpus_) {
    if (lost_gpus_.contains(uuid)) continue;
    StatusOr<nvml::Device> gpu = library_.DeviceByUuid(uuid);
    StatusOr<nvml::FabricInfo> fabric = gpu.ok() ? gpu->GpuFabricInfo(nvml::Device::FabricCall::kPreferVersioned) : StatusOr<nvml::FabricInfo>(gpu.status());
    if (!fabric.ok()) {
      LOG_INFO(4, "device health: reading the fabric info failed", {{"gpu", uuid}, {"error", fabric.status().ToString()}});
      continue;
    }
    const nvml::FabricVerdict verdict = nvml::JudgeFabric(*fabric);
    const std::vector<std::string> devices = DevicesOfGpu(uuid);
    if (verdict != nvml::FabricVerdict::kFine) {
      const bool unhealthy = verdict == nvml::FabricVerdict::kUnhealthy;
      DeviceTaint taint{.key = std::string(kTaintKeyNvlinkFabric),
                        .value = unhealthy ? "unhealthy" : "limited-capacity",
                        .effect = unhealthy ? TaintEffect::kNoSchedule : TaintEffect::kNone,
                        .since = std::chrono::system_clock::now()};
      Record(devices, taint, fmt::format("NVLink fabric {}: {}", taint.value, nvml::DescribeFabric(uuid, *fabric)),
             notes);
      continue;
    }
    if (book_.Clear(devices, kTaintKeyNvlinkFabric)) {
      LOG_INFO(0, "device health: NVLink fabric healthy again", {{"gpu", uuid}});
      notes.push_back({.recovered = true, .devices = devices, .text = fmt::format("NVLink fabric of GPU {} is healthy again", uuid)});
    }
  }
}

void NvmlHealthMonitor::Run(std::stop_token stop) {
  // A GPU recorded lost before a restart is asked again at the first turn.
  for (const auto& [device, taints] : book_.Taints()) {
    for (const DeviceTaint& taint : taints) {
      if (taint.key != kTaintKeyGpuLost) continue;
      for (const WatchedDevice& watched : options_.devices) {
        if (watched.name == device) lost_gpus_.insert(watched.gpu_uuid);
      }
    }
  }
  const auto turn = static_cast<std::uint32_t>(options_.wait_turn.count());
  while (!stop.stop_requested()) {
    std::vector<HealthNote> notes;
    StatusOr<nvml::Event> event = set_.Wait(turn);
    std::size_t taken = 0;
    bool pause = false;
    // One batch: the first event, then whatever is already queued.
    while (true) {
      if (event.ok()) {
        ++events_seen_;
        Apply(*event, notes);
      } else if (nvml::IsGpuLost(event.status())) {
        ++events_seen_;
        ApplyGpuLost(notes);
      } else {
        if (event.status().code() != common::StatusCode::kDeadlineExceeded) {
          LOG_INFO(4, "device health: waiting for NVML events failed; retrying",
                   {{"error", event.status().ToString()}});
          pause = true;
        }
        break;
      }
      // A lost GPU may make every wait fail at once: not in a tight loop.
      if (!event.ok()) {
        pause = true;
        break;
      }
      // The batch is full: what is still queued waits for the next turn.
      if (++taken == options_.max_batch) break;
      event = set_.Wait(0);
    }
    if (!lost_gpus_.empty()) CheckLostGpus(notes);
    CheckFabric(notes);
    // One record write per batch, before anyone is told.
    Commit();
    if (!notes.empty() && options_.on_change) options_.on_change(notes);
    if (pause) {
      std::mutex mu;
      std::condition_variable_any woken;
      std::unique_lock lock(mu);
      woken.wait_for(lock, stop, options_.wait_turn, [] { return false; });
    }
  }
}

}  // namespace nvdra::gpu
