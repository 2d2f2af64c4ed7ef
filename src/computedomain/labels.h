#pragma once

// The label and annotation keys (and values) the compute-domain components
// agree on: the kubelet plugin labels the node, the controller selects daemon
// pods and nodes by them, the daemon annotates its pod. Upstream's names.
//
// Thread-safety: constants only.

#include <string_view>

namespace nvdra::computedomain {

// On a node: the ComputeDomain UID whose channel a pod on it holds (the
// daemon DaemonSet's node selector); on the objects the controller makes for
// a domain: that domain's UID.
inline constexpr std::string_view kComputeDomainLabel = "resource.nvidia.com/computeDomain";
// On a daemon pod: its clique ID (empty included, as upstream).
inline constexpr std::string_view kComputeDomainCliqueLabel = "resource.nvidia.com/computeDomain.cliqueID";
// The values of kDaemonStatusAnnotation.
inline constexpr std::string_view kDaemonReady = "Ready";
inline constexpr std::string_view kDaemonNotReady = "NotReady";
// On a daemon pod: its IMEX daemon's status (kDaemonReady/kDaemonNotReady).
inline constexpr std::string_view kDaemonStatusAnnotation = "resource.nvidia.com/computeDomain.daemonStatus";
// On a daemon pod, ours (upstream has no per-node reason): why its daemon
// says NotReady, when it knows (kReasonFabricUnhealthy), and a message for
// people. Absent while Ready or when the cause is only nvidia-imex's own
// readiness. The controller copies them into the entry's `reason` and
// `message` (optional fields of both CRDs; docs/computedomains.md).
inline constexpr std::string_view kDaemonStatusReasonAnnotation =
    "resource.nvidia.com/computeDomain.daemonStatusReason";
inline constexpr std::string_view kDaemonStatusMessageAnnotation =
    "resource.nvidia.com/computeDomain.daemonStatusMessage";
// The entry's `reason` when a GPU of the node reports its NVLink fabric
// unhealthy (fabric_health.h).
inline constexpr std::string_view kReasonFabricUnhealthy = "FabricUnhealthy";
// On a daemon pod: the pod IP its daemon was started with (the downward
// API's status.podIP). The kubelet reports status.podIP only with the pod's
// next status update, under load up to a second after the daemon started
// and published; the controller takes this one until status.podIP is there.
inline constexpr std::string_view kDaemonIpAnnotation = "resource.nvidia.com/computeDomain.daemonIP";

}  // namespace nvdra::computedomain
