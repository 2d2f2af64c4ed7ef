#include "computedomain/controller/daemon_pods.h"

#include "common/json_fields.h"
#include "computedomain/clique_membership.h"

namespace nvdra::computedomain::controller {

using common::JsonFind;
using common::JsonString;
using nlohmann::json;

std::string LabelOf(const json& object, std::string_view key) {
  return JsonString(object, {"metadata", "labels", key});
}

bool HasLabelKey(const json& object, std::string_view key) {
  return JsonFind(object, {"metadata", "labels", key}) != nullptr;
}

bool IsDeleting(const json& object) { return object.contains("/metadata/deletionTimestamp"_json_pointer); }

std::string DaemonPodNode(const json& pod) { return JsonString(pod, {"spec", "nodeName"}); }

std::string DaemonPodIp(const json& pod) {
  std::string ip = JsonString(pod, {"status", "podIP"});
  return ip.empty() ? JsonString(pod, {"metadata", "annotations", kDaemonIpAnnotation}) : ip;
}

std::string DaemonPodStatus(const json& pod) {
  const bool ready = JsonString(pod, {"metadata", "annotations", kDaemonStatusAnnotation}) == kDaemonReady;
  return std::string(ready ? kDaemonReady : kDaemonNotReady);
}

std::string DaemonPodReason(const json& pod) {
  if (DaemonPodStatus(pod) == kDaemonReady) return "";
  return JsonString(pod, {"metadata", "annotations", kDaemonStatusReasonAnnotation});
}

std::string DaemonPodMessage(const json& pod) {
  if (DaemonPodStatus(pod) == kDaemonReady) return "";
  return CapStatusMessage(JsonString(pod, {"metadata", "annotations", kDaemonStatusMessageAnnotation}));
}

bool PodIsReady(const json& pod) {
  const json& conditions = common::JsonMember(pod, {"status", "conditions"});
  if (!conditions.is_array()) return false;
  for (const json& c : conditions) {
    if (JsonString(c, "type") == "Ready") return JsonString(c, "status") == "True";
  }
  return false;
}

}  // namespace nvdra::computedomain::controller
