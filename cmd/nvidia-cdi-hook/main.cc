// nvidia-cdi-hook: the OCI createContainer hooks named in the GPU plugin's CDI
// specs, command-line compatible with nvidia-container-toolkit's binary of
// the same name: `create-symlinks --link <target>::<link>...`,
// `enable-cuda-compat --host-driver-version <version>`,
// `update-ldcache --folder <dir>...` and `disable-device-node-modification`.
// The runtime passes the container state on stdin. The toolkit's other
// hooks, which our specs never name, are accepted and ignored with a
// warning, as the toolkit itself treats hooks it does not know, so a spec
// written for a newer toolkit does not fail the container.

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "cdihook/container_state.h"
#include "cdihook/cuda_compat.h"
#include "cdihook/device_node_params.h"
#include "cdihook/ldcache.h"
#include "cdihook/symlinks.h"
#include "common/flags.h"
#include "common/log.h"

namespace {

// The toolkit's hooks that our GPU plugin never emits (see src/gpu/cdi.h).
constexpr std::array<std::string_view, 6> kIgnoredHooks = {
    "chmod", "create-soname-symlinks", "update-nvidia-params", "apply-cuda-memory-limits", "check-requirements",
    "update-application-profile"};

int Fail(std::string_view hook, const nvdra::common::Status& status) {
  LOG_ERROR("hook failed", {{"hook", hook}, {"err", status}});
  nvdra::common::FlushLogs();
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace nvdra;
  constexpr std::string_view kName = "nvidia-cdi-hook";
  CLI::App app("OCI createContainer hooks for NVIDIA CDI specs (create-symlinks, enable-cuda-compat, "
               "update-ldcache, disable-device-node-modification); "
               "the container state is read from stdin",
               std::string(kName));
  common::CommonFlags common_flags;
  bool debug = false;
  bool quiet = false;
  common::AddCommonFlags(app, common_flags, kName);
  common::WithEnv(app.add_flag("-d,--debug", debug, "Log at debug verbosity (-v 4)"),
                  {"NVIDIA_CDI_DEBUG"});
  common::WithEnv(app.add_flag("--quiet", quiet, "Log only warnings and errors; overrides --debug"),
                  {"NVIDIA_CDI_QUIET"});
  app.require_subcommand(0, 1);

  // Testing only in the toolkit too: the state from a file instead of stdin.
  std::string container_spec;
  constexpr std::string_view kSpecHelp = "Read the OCI container state from this file ('-': stdin)";

  std::vector<std::string> links;
  CLI::App* symlinks = app.add_subcommand("create-symlinks", "Create symlinks in the container");
  symlinks->add_option("--link", links,
                       "A link to create, as <target>::<link>; whatever is at <link> is replaced")
      ->delimiter(',');
  symlinks->add_option("--container-spec", container_spec, std::string(kSpecHelp))->group("");

  cdihook::LdcacheOptions ldcache;
  std::string ldconfig_path = ldcache.ldconfig_path.string();
  CLI::App* update_ldcache =
      app.add_subcommand("update-ldcache", "Update the container's ldcache by running ldconfig");
  update_ldcache->add_option("--folder", ldcache.folders,
                             "A library folder (container path) to add to the ldcache")
      ->delimiter(',');
  update_ldcache->add_option("--ldconfig-path", ldconfig_path, "The host's ldconfig program")
      ->capture_default_str();
  update_ldcache->add_option("--container-spec", container_spec, std::string(kSpecHelp))->group("");

  cdihook::CudaCompatOptions cuda_compat;
  CLI::App* enable_cuda_compat = app.add_subcommand(
      "enable-cuda-compat",
      "Put the image's CUDA forward-compatibility libraries (/usr/local/cuda/compat) first in the ldcache when "
      "they are of a newer major version than the host driver");
  enable_cuda_compat->add_option("--host-driver-version", cuda_compat.host_driver_version,
                                 "The host driver's version; without it the hook does nothing");
  enable_cuda_compat->add_option("--container-spec", container_spec, std::string(kSpecHelp))->group("");

  CLI::App* disable_device_node_modification = app.add_subcommand(
      "disable-device-node-modification",
      "Mount a read-only copy of the driver's /proc/driver/nvidia/params with ModifyDeviceFiles: 0 over the "
      "container's, so that CUDA in the container does not create device nodes");
  disable_device_node_modification->add_option("--container-spec", container_spec, std::string(kSpecHelp))
      ->group("");

  std::vector<CLI::App*> ignored;
  for (std::string_view name : kIgnoredHooks) {
    CLI::App* sub =
        app.add_subcommand(std::string(name), "Accepted for compatibility with the toolkit's specs; ignored");
    sub->allow_extras();
    ignored.push_back(sub);
  }
  // A hook name we do not know ends parsing; it is reported after the parse.
  app.prefix_command();

  if (auto exit_code = common::ParseFlags(app, argc, argv)) return *exit_code;
  const std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front().starts_with('-')) {
    return common::ExitForBadFlags(app, common::InvalidArgumentError("unknown flag " + rest.front()));
  }
  if (quiet) {
    common_flags.verbosity = 0;
  } else if (debug && common_flags.verbosity < 4) {
    common_flags.verbosity = 4;
  }
  common::StatusOr<common::FeatureGates> gates = common::ApplyCommonFlags(common_flags);
  if (!gates.ok()) return common::ExitForBadFlags(app, gates.status());

  if (symlinks->parsed()) {
    common::StatusOr<std::filesystem::path> root = cdihook::LoadContainerRoot(container_spec);
    if (!root.ok()) return Fail("create-symlinks", root.status());
    common::Status status = cdihook::CreateSymlinks(*root, links);
    return status.ok() ? 0 : Fail("create-symlinks", status);
  }
  if (update_ldcache->parsed()) {
    common::StatusOr<std::filesystem::path> root = cdihook::LoadContainerRoot(container_spec);
    if (!root.ok()) return Fail("update-ldcache", root.status());
    ldcache.container_root = *root;
    ldcache.ldconfig_path = ldconfig_path;
    ldcache.host_is_debian_like = cdihook::IsDebianLike("/");
    common::Status status = cdihook::UpdateLdcache(ldcache);
    return status.ok() ? 0 : Fail("update-ldcache", status);
  }
  if (enable_cuda_compat->parsed()) {
    // As the toolkit: without a version there is nothing to compare, and the
    // state is not even read.
    if (cuda_compat.host_driver_version.empty()) return 0;
    common::StatusOr<std::filesystem::path> root = cdihook::LoadContainerRoot(container_spec);
    if (!root.ok()) return Fail("enable-cuda-compat", root.status());
    cuda_compat.container_root = *root;
    auto written = cdihook::EnableCudaCompat(cuda_compat);
    return written.ok() ? 0 : Fail("enable-cuda-compat", written.status());
  }
  if (disable_device_node_modification->parsed()) {
    common::StatusOr<std::filesystem::path> root = cdihook::LoadContainerRoot(container_spec);
    if (!root.ok()) return Fail("disable-device-node-modification", root.status());
    auto mounted = cdihook::DisableDeviceNodeModification({.container_root = *root});
    return mounted.ok() ? 0 : Fail("disable-device-node-modification", mounted.status());
  }
  for (const CLI::App* sub : ignored) {
    if (sub->parsed()) {
      LOG_WARNING("hook not used by this driver's CDI specs; ignored", {{"hook", sub->get_name()}});
      return 0;
    }
  }
  LOG_WARNING(rest.empty() ? "no CDI hook specified" : "unsupported CDI hook; skipped",
              {{"hook", rest.empty() ? std::string() : rest.front()}});
  return 0;
}
