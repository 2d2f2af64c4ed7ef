#pragma once

// KEP-5304 device metadata (gate DeviceMetadata): for each request of a
// prepared claim, a metadata file describing its devices (driver, pool, name
// and the attributes the backend attached to the checkpoint entry) and a
// CDI spec that bind-mounts it read-only into the claim's containers at the
// well-known path; the kubelet gets the spec's CDI device id with the
// request's first device. Laid out as Kubernetes' kubelet-plugin helper
// does, so a workload reads the same file under either driver:
//
//   <plugin dir>/dra-device-metadata/<ns>_<claim>/<request>/metadata.json
//   <cdi root>/<driver>_metadata_<claimUID>_<request>.json  (kind <driver>/metadata)
//   in the container: /var/run/kubernetes.io/dra-device-attributes/
//     resourceclaims/<claim>/<request>/<driver>-metadata.json, or
//     resourceclaimtemplates/<pod claim name>/<request>/... for a claim made
//     from a pod's template (annotation resource.kubernetes.io/pod-claim-name)
//
// The file holds one DeviceMetadata object (metadata.resource.k8s.io/
// v1alpha1) per line-terminated JSON document.
//
// Defines: DeviceMetadataOptions, DeviceMetadataWriter.
// Ownership: holds paths only. Thread-safety: thread-compatible (the
// ClaimPreparer calls it under pu.lock).

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "kubeletplugin/dra_service.h"
#include "kubeletplugin/prepared_devices.h"

namespace nvdra::kubeletplugin {

inline constexpr std::string_view kMetadataApiVersion = "metadata.resource.k8s.io/v1alpha1";
inline constexpr std::string_view kPodClaimNameAnnotation = "resource.kubernetes.io/pod-claim-name";

struct DeviceMetadataOptions {
  std::string driver_name;          // "gpu.nvidia.com"
  std::filesystem::path plugin_dir;  // <plugins>/<driver>; the same path on the host
  std::filesystem::path cdi_root;    // where the kubelet's runtime reads CDI specs
};

class DeviceMetadataWriter {
 public:
  explicit DeviceMetadataWriter(DeviceMetadataOptions options);

  // Writes the files of every request `groups` serve; returns the CDI
  // device id to give the kubelet per request (base request names).
  common::StatusOr<std::map<std::string, std::string>> Write(const ClaimRef& claim,
                                                             const std::optional<std::string>& pod_claim_name,
                                                             const std::vector<PreparedDeviceGroup>& groups) const;
  // Removes the claim's metadata folder and CDI specs; absent files are fine.
  common::Status Remove(const ClaimRef& claim) const;

  // The in-container path of a request's file.
  std::string ContainerPath(const ClaimRef& claim, const std::optional<std::string>& pod_claim_name,
                            const std::string& request) const;

 private:
  std::filesystem::path ClaimDir(const ClaimRef& claim) const;

  DeviceMetadataOptions options_;
};

}  // namespace nvdra::kubeletplugin
