#pragma once

// What the controller reads off an IMEX daemon's pod, and off any cached
// object, straight from the informer's shared json. Why not a typed view
// (k8s/objects): a view owns a copy, and a reconcile reads every daemon pod of its domain
// (copying them was most of the controller's CPU time at 18 nodes). Fields
// without a function here are read with common/json_fields.h, which does
// not copy either.
// Defines: LabelOf(), HasLabelKey(), IsDeleting(),
// DaemonPodNode(), DaemonPodIp(), DaemonPodStatus(), DaemonPodReason(),
// DaemonPodMessage(), PodIsReady().
//
// Ownership: none. Thread-safety: pure functions.

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace nvdra::computedomain::controller {

// metadata.labels[key]; "" when absent.
std::string LabelOf(const nlohmann::json& object, std::string_view key);
// Whether metadata.labels has `key` (whatever its value, "" included).
bool HasLabelKey(const nlohmann::json& object, std::string_view key);
// Whether metadata.deletionTimestamp is set.
bool IsDeleting(const nlohmann::json& object);

// spec.nodeName; "" until scheduled.
std::string DaemonPodNode(const nlohmann::json& pod);
// The kubelet's status.podIP, or until the kubelet reports it, the one its
// daemon published (kDaemonIpAnnotation).
std::string DaemonPodIp(const nlohmann::json& pod);
// The daemon's status as it published it (kDaemonStatusAnnotation):
// kDaemonReady, else kDaemonNotReady.
std::string DaemonPodStatus(const nlohmann::json& pod);
// Why its daemon says NotReady (kDaemonStatusReasonAnnotation) and the
// message (kDaemonStatusMessageAnnotation, capped by CapStatusMessage); ""
// when absent or when the daemon says Ready (a leftover is not a reason).
std::string DaemonPodReason(const nlohmann::json& pod);
std::string DaemonPodMessage(const nlohmann::json& pod);
// The pod's Ready condition is True.
bool PodIsReady(const nlohmann::json& pod);

}  // namespace nvdra::computedomain::controller
