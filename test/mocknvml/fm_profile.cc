#include "fm_profile.h"

#include <set>

#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "fabricmanager/fm_abi.h"

namespace nvdra::mocknvml {
namespace {

using json = nlohmann::json;
namespace fm = nvdra::fabricmanager::abi;

Status Bad(const std::string& field, const std::string& what) {
  return common::InvalidArgumentError("fabricManager." + field + ": " + what);
}

StatusOr<unsigned> Unsigned(const json& object, const std::string& key, const std::string& field) {
  if (!object.contains(key)) return Bad(field, "missing");
  const json& v = object.at(key);
  if (!v.is_number_unsigned() || v.get<unsigned long long>() > 0xffffffffULL) {
    return Bad(field, "expected an unsigned integer");
  }
  return v.get<unsigned>();
}

StatusOr<FmSpec> ParseSection(const json& section, const Profile& profile) {
  if (!section.is_object()) return common::InvalidArgumentError("fabricManager: expected an object");
  static const std::set<std::string> kKeys = {"maxNvlinksPerGpu", "nvlinkLineRateMBps",
                                              "reportsNvlinkFailedDevices", "nvswitches", "partitions"};
  for (const auto& [key, value] : section.items()) {
    if (!kKeys.contains(key)) return Bad(key, "unknown key");
  }
  FmSpec spec;
  ASSIGN_OR_RETURN(spec.max_nvlinks_per_gpu, Unsigned(section, "maxNvlinksPerGpu", "maxNvlinksPerGpu"));
  ASSIGN_OR_RETURN(spec.nvlink_line_rate_mbps, Unsigned(section, "nvlinkLineRateMBps", "nvlinkLineRateMBps"));
  if (section.contains("reportsNvlinkFailedDevices")) {
    if (!section.at("reportsNvlinkFailedDevices").is_boolean()) {
      return Bad("reportsNvlinkFailedDevices", "expected true or false");
    }
    spec.reports_nvlink_failed_devices = section.at("reportsNvlinkFailedDevices").get<bool>();
  }
  if (section.contains("nvswitches")) {
    const json& switches = section.at("nvswitches");
    if (!switches.is_array()) return Bad("nvswitches", "expected an array");
    for (std::size_t i = 0; i < switches.size(); ++i) {
      const std::string field = "nvswitches[" + std::to_string(i) + "].pciBusId";
      if (!switches[i].is_object() || !switches[i].contains("pciBusId") ||
          !switches[i].at("pciBusId").is_string()) {
        return Bad(field, "expected a string");
      }
      spec.nvswitch_pci_bus_ids.push_back(switches[i].at("pciBusId").get<std::string>());
    }
  }

  for (const GpuSpec& gpu : profile.gpus) {
    if (!gpu.module_id) continue;
    spec.gpus[*gpu.module_id] = FmGpu{*gpu.module_id, gpu.uuid, gpu.pci.busId};
  }

  if (!section.contains("partitions") || !section.at("partitions").is_array()) {
    return Bad("partitions", "expected an array");
  }
  const json& partitions = section.at("partitions");
  if (partitions.size() > fm::FM_MAX_FABRIC_PARTITIONS) {
    return Bad("partitions", "more than FM_MAX_FABRIC_PARTITIONS (64)");
  }
  std::set<unsigned> ids;
  for (std::size_t i = 0; i < partitions.size(); ++i) {
    const std::string at = "partitions[" + std::to_string(i) + "]";
    const json& entry = partitions[i];
    if (!entry.is_object()) return Bad(at, "expected an object");
    FmPartitionSpec partition;
    ASSIGN_OR_RETURN(partition.id, Unsigned(entry, "id", at + ".id"));
    if (!ids.insert(partition.id).second) return Bad(at + ".id", "duplicate");
    ASSIGN_OR_RETURN(partition.nvlinks_per_gpu, Unsigned(entry, "nvlinksPerGpu", at + ".nvlinksPerGpu"));
    if (partition.nvlinks_per_gpu > spec.max_nvlinks_per_gpu) {
      return Bad(at + ".nvlinksPerGpu", "more than maxNvlinksPerGpu");
    }
    if (!entry.contains("gpus") || !entry.at("gpus").is_array() || entry.at("gpus").empty() ||
        entry.at("gpus").size() > fm::FM_MAX_NUM_GPUS) {
      return Bad(at + ".gpus", "expected 1 to 16 module ids");
    }
    std::set<unsigned> seen;
    for (const json& id : entry.at("gpus")) {
      if (!id.is_number_unsigned()) return Bad(at + ".gpus", "expected module ids");
      const unsigned module_id = id.get<unsigned>();
      if (!spec.gpus.contains(module_id)) {
        return Bad(at + ".gpus", "module id " + std::to_string(module_id) + " is no device's moduleId");
      }
      if (!seen.insert(module_id).second) {
        return Bad(at + ".gpus", "module id " + std::to_string(module_id) + " twice");
      }
      partition.module_ids.push_back(module_id);
    }
    spec.partitions.push_back(std::move(partition));
  }
  return spec;
}

}  // namespace

const FmPartitionSpec* FmSpec::FindPartition(unsigned id) const {
  for (const FmPartitionSpec& p : partitions) {
    if (p.id == id) return &p;
  }
  return nullptr;
}

const FmGpu* FmSpec::FindGpuByUuid(const std::string& uuid) const {
  for (const auto& [module_id, gpu] : gpus) {
    if (gpu.uuid == uuid) return &gpu;
  }
  return nullptr;
}

StatusOr<std::optional<FmSpec>> LoadFmSpec(const Profile& profile) {
  StatusOr<std::string> text = common::ReadWholeFile(profile.path);
  if (!text.ok()) return text.status().WithContext("cannot read profile");
  json root;
  try {
    root = json::parse(*text);
  } catch (const json::exception& e) {
    return common::InvalidArgumentError("profile " + profile.path.string() + ": " + e.what());
  }
  if (!root.is_object() || !root.contains("fabricManager") || root.at("fabricManager").is_null()) {
    return std::optional<FmSpec>();
  }
  StatusOr<FmSpec> spec = ParseSection(root.at("fabricManager"), profile);
  if (!spec.ok()) return spec.status().WithContext("profile " + profile.path.string());
  return std::optional<FmSpec>(std::move(*spec));
}

}  // namespace nvdra::mocknvml
