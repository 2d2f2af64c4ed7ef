#include "computedomain/controller/daemon_pods.h"

#include "computedomain/clique_membership.h"

namespace nvdra::computedomain::controller {

using nlohmann::json;

namespace {

// metadata.<map>[key] ("labels" or "annotations"); nullptr when absent.
const json* MetadataEntry(const json& o, const char* map_name, std::string_view key) {
  auto metadata = o.find("metadata");
  if (metadata == o.end() || !metadata->is_object()) return nullptr;
  auto map = metadata->find(map_name);
  if (map == metadata->end() || !map->is_object()) return nullptr;
  auto it = map->find(std::string(key));
  return it == map->end() ? nullptr : &*it;
}

std::string MetadataValue(const json& o, const char* map_name, std::string_view key) {
  const json* value = MetadataEntry(o, map_name, key);
  return value != nullptr && value->is_string() ? value->get<std::string>() : "";
}

}  // namespace

std::string JsonString(const json& object, const json::json_pointer& pointer) {
  if (!object.contains(pointer)) return "";
  const json& value = object.at(pointer);
  return value.is_string() ? value.get<std::string>() : "";
}

std::string LabelOf(const json& object, std::string_view key) { return MetadataValue(object, "labels", key); }

bool HasLabelKey(const json& object, std::string_view key) {
  return MetadataEntry(object, "labels", key) != nullptr;
}

bool IsDeleting(const json& object) { return object.contains("/metadata/deletionTimestamp"_json_pointer); }

std::string DaemonPodNode(const json& pod) { return JsonString(pod, "/spec/nodeName"_json_pointer); }

std::string DaemonPodIp(const json& pod) {
  std::string ip = JsonString(pod, "/status/podIP"_json_pointer);
  return ip.empty() ? MetadataValue(pod, "annotations", kDaemonIpAnnotation) : ip;
}

std::string DaemonPodStatus(const json& pod) {
  return MetadataValue(pod, "annotations", kDaemonStatusAnnotation) == kDaemonReady ? std::string(kDaemonReady)
                                                                                   : std::string(kDaemonNotReady);
}

bool PodIsReady(const json& pod) {
  if (!pod.contains("/status/conditions"_json_pointer)) return false;
  for (const json& c : pod["status"]["conditions"]) {
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  }
  return false;
}

}  // namespace nvdra::computedomain::controller
