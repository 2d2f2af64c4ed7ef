#pragma once

// Installs nvidia-cdi-hook where the CDI specs of both kubelet plugins name
// it: a copy in the plugin's folder under the kubelet root, which the host's
// container runtime can run (upstream's layout).
//
// Thread-safety: one call at a time per plugin folder (start-up).

#include <filesystem>
#include <string>

namespace nvdra::drivercdi {

// Copies nvidia-cdi-hook (found next to this binary, or in /usr/bin) into
// `plugin_dir` and returns the copy's path, which the CDI specs name when
// --nvidia-cdi-hook-path is empty. The copy replaces an older one atomically
// (rename). Failures are logged; the path is returned anyway, since the
// specs must name something and an operator can put the file there.
std::string InstallCdiHook(const std::filesystem::path& plugin_dir);

}  // namespace nvdra::drivercdi
