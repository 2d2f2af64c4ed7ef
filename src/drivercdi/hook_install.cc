#include "drivercdi/hook_install.h"

#include <system_error>
#include <vector>

#include "common/log.h"

namespace nvdra::drivercdi {

// Upstream's layout: without --nvidia-cdi-hook-path, the hook binary is copied
// into the plugin's folder, a host path the container runtime can run. Ours
// ships next to the plugin binary (or in /usr/bin, as in upstream's image).
std::string InstallCdiHook(const std::filesystem::path& plugin_dir) {
  const std::filesystem::path target = plugin_dir / "nvidia-cdi-hook";
  std::error_code ec;
  std::vector<std::filesystem::path> candidates;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(self.parent_path() / "nvidia-cdi-hook");
  candidates.emplace_back("/usr/bin/nvidia-cdi-hook");
  for (const auto& source : candidates) {
    if (!std::filesystem::is_regular_file(source, ec)) continue;
    std::filesystem::create_directories(plugin_dir, ec);
    const std::filesystem::path temp = plugin_dir / ".nvidia-cdi-hook.tmp";
    std::filesystem::copy_file(source, temp, std::filesystem::copy_options::overwrite_existing, ec);
    if (!ec) std::filesystem::rename(temp, target, ec);
    if (ec) {
      LOG_ERROR("cannot install nvidia-cdi-hook", {{"from", source.string()}, {"err", ec.message()}});
    } else {
      LOG_INFO(2, "installed nvidia-cdi-hook", {{"from", source.string()}, {"to", target.string()}});
    }
    return target.string();
  }
  LOG_INFO(0, "no nvidia-cdi-hook binary found next to the plugin or in /usr/bin; CDI hooks will name a missing file",
           {{"path", target.string()}});
  return target.string();
}

}  // namespace nvdra::drivercdi
