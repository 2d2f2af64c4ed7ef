#pragma once

// The container a createContainer hook runs for: the OCI runtime writes the
// container state (JSON with "bundle") to the hook's stdin; the bundle's
// config.json gives the root filesystem ("root.path", relative to the
// bundle unless absolute).
//
// Defines: ContainerRootFromState, LoadContainerRoot.
//
// Ownership: values only. Thread-safety: thread-safe (LoadContainerRoot reads
// std::cin when asked to, which the caller must not share).

#include <filesystem>
#include <istream>
#include <string_view>

#include "common/status.h"

namespace nvdra::cdihook {

// Reads the OCI state JSON from `state` and returns the container's root
// folder on the host. kInvalidArgument for state that is not JSON, has no
// "bundle", or whose config.json is not JSON or has no "root.path"; kNotFound
// (or another errno mapping) when config.json cannot be read;
// kFailedPrecondition when the root is "/" (the hook would edit the host).
[[nodiscard]] common::StatusOr<std::filesystem::path> ContainerRootFromState(std::istream& state);

// The same, with the state read from the file `container_spec`, or from
// stdin when it is "" or "-" (the toolkit's --container-spec semantics).
[[nodiscard]] common::StatusOr<std::filesystem::path> LoadContainerRoot(
    std::string_view container_spec);

}  // namespace nvdra::cdihook
