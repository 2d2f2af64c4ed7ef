#include "kubeletplugin/device_metadata.h"

#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file_io.h"

namespace nvdra::kubeletplugin {

namespace fs = std::filesystem;
using common::Status;
using common::StatusOr;
using nlohmann::ordered_json;

namespace {

constexpr char kMetadataFolder[] = "dra-device-metadata";
constexpr char kContainerFolder[] = "/var/run/kubernetes.io/dra-device-attributes";

// "<request>/<subrequest>" -> "<request>": containers name base requests.
std::string BaseRequest(const std::string& request) { return request.substr(0, request.find('/')); }

}  // namespace

DeviceMetadataWriter::DeviceMetadataWriter(DeviceMetadataOptions options) : options_(std::move(options)) {}

fs::path DeviceMetadataWriter::ClaimDir(const ClaimRef& claim) const {
  return options_.plugin_dir / kMetadataFolder / (claim.ns + "_" + claim.name);
}

std::string DeviceMetadataWriter::ContainerPath(const ClaimRef& claim, const std::optional<std::string>& pod_claim_name,
                                                const std::string& request) const {
  if (pod_claim_name && !pod_claim_name->empty()) {
    return fmt::format("{}/resourceclaimtemplates/{}/{}/{}-metadata.json", kContainerFolder, *pod_claim_name,
                       request, options_.driver_name);
  }
  return fmt::format("{}/resourceclaims/{}/{}/{}-metadata.json", kContainerFolder, claim.name, request,
                     options_.driver_name);
}

StatusOr<std::map<std::string, std::string>> DeviceMetadataWriter::Write(
    const ClaimRef& claim, const std::optional<std::string>& pod_claim_name,
    const std::vector<PreparedDeviceGroup>& groups) const {
  // Devices by the request (as allocated, subrequest included) they serve.
  std::map<std::string, std::vector<const CheckpointedDevice*>> by_request;
  for (const PreparedDeviceGroup& group : groups) {
    for (const PreparedDeviceEntry& entry : group.devices) {
      for (const std::string& request : entry.device.device.requests) by_request[request].push_back(&entry.device);
    }
  }
  std::map<std::string, std::string> cdi_ids;
  for (const auto& [request, devices] : by_request) {
    const std::string base = BaseRequest(request);
    ordered_json listed = ordered_json::array();
    for (const CheckpointedDevice* device : devices) {
      ordered_json entry = {{"driver", options_.driver_name},
                            {"pool", device->device.pool_name},
                            {"name", device->device.device_name}};
      if (device->metadata.is_object()) {
        if (auto attributes = device->metadata.find("Attributes");
            attributes != device->metadata.end() && attributes->is_object() && !attributes->empty()) {
          entry["attributes"] = *attributes;
        }
        if (auto network = device->metadata.find("NetworkData");
            network != device->metadata.end() && network->is_object()) {
          entry["networkData"] = *network;
        }
      }
      listed.push_back(std::move(entry));
    }
    ordered_json document = {{"kind", "DeviceMetadata"},
                             {"apiVersion", kMetadataApiVersion},
                             {"metadata",
                              {{"name", claim.name}, {"namespace", claim.ns}, {"uid", claim.uid}, {"generation", 1}}}};
    if (pod_claim_name) document["podClaimName"] = *pod_claim_name;
    document["requests"] = ordered_json::array({{{"name", request}, {"devices", std::move(listed)}}});
    const fs::path file = ClaimDir(claim) / base / "metadata.json";
    // 0644: a container reads the file, the runtime the spec.
    RETURN_IF_ERROR(common::ReplaceFile(file, document.dump(2) + "\n", 0644, /*durable=*/false));

    const std::string device_name = claim.uid + "_" + base;
    const ordered_json spec = {
        {"cdiVersion", "0.5.0"},
        {"kind", options_.driver_name + "/metadata"},
        {"devices",
         ordered_json::array({{{"name", device_name},
                               {"containerEdits",
                                {{"mounts", ordered_json::array({{{"hostPath", file.string()},
                                                                  {"containerPath", ContainerPath(claim, pod_claim_name, base)},
                                                                  {"options", {"ro", "bind"}}}})}}}}})}};
    RETURN_IF_ERROR(common::ReplaceFile(
        options_.cdi_root / fmt::format("{}_metadata_{}_{}.json", options_.driver_name, claim.uid, base),
        spec.dump() + "\n", 0644, /*durable=*/false));
    cdi_ids[base] = options_.driver_name + "/metadata=" + device_name;
  }
  return cdi_ids;
}

Status DeviceMetadataWriter::Remove(const ClaimRef& claim) const {
  std::error_code ec;
  if (!claim.name.empty()) {
    fs::remove_all(ClaimDir(claim), ec);
    if (ec) return common::ErrnoToStatus(ec.value(), "remove " + ClaimDir(claim).string());
  }
  const std::string prefix = fmt::format("{}_metadata_{}_", options_.driver_name, claim.uid);
  for (const auto& entry : fs::directory_iterator(options_.cdi_root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0 || !name.ends_with(".json")) continue;
    fs::remove(entry.path(), ec);
    if (ec) return common::ErrnoToStatus(ec.value(), "remove " + entry.path().string());
  }
  return common::OkStatus();
}

}  // namespace nvdra::kubeletplugin
