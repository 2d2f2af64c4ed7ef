#include "cdihook/hook_commands.h"

#include <array>
#include <filesystem>
#include <utility>

#include <fmt/format.h>

#include "cdihook/container_state.h"
#include "cdihook/device_node_params.h"
#include "cdihook/symlinks.h"
#include "common/log.h"

namespace nvdra::cdihook {
namespace {

// The toolkit's hooks that our plugins never emit (see drivercdi/driver_edits.h).
constexpr std::array<std::string_view, 6> kIgnoredHooks = {
    "chmod", "create-soname-symlinks", "update-nvidia-params", "apply-cuda-memory-limits", "check-requirements",
    "update-application-profile"};

}  // namespace

CLI::App* HookCommands::AddHook(CLI::App& app, std::string name, std::string description) {
  CLI::App* command = app.add_subcommand(std::move(name), std::move(description));
  // Testing only in the toolkit too: the state from a file instead of stdin.
  command->add_option("--container-spec", container_spec_, "Read the OCI container state from this file ('-': stdin)")
      ->group("");
  return command;
}

HookCommands::HookCommands(CLI::App& app) {
  CLI::App* symlinks = AddHook(app, "create-symlinks", "Create symlinks in the container");
  symlinks->add_option("--link", links_, "A link to create, as <target>::<link>; whatever is at <link> is replaced")
      ->delimiter(',');
  hooks_.push_back({symlinks, [this]() -> common::Status {
                      ASSIGN_OR_RETURN(const std::filesystem::path root, LoadContainerRoot(container_spec_));
                      return CreateSymlinks(root, links_);
                    }});

  CLI::App* ldcache = AddHook(app, "update-ldcache", "Update the container's ldcache by running ldconfig");
  ldcache->add_option("--folder", ldcache_.folders, "A library folder (container path) to add to the ldcache")
      ->delimiter(',');
  ldcache->add_option("--ldconfig-path", ldconfig_path_, "The host's ldconfig program")->capture_default_str();
  hooks_.push_back({ldcache, [this]() -> common::Status {
                      ASSIGN_OR_RETURN(ldcache_.container_root, LoadContainerRoot(container_spec_));
                      ldcache_.ldconfig_path = ldconfig_path_;
                      ldcache_.host_is_debian_like = IsDebianLike("/");
                      return UpdateLdcache(ldcache_);
                    }});

  CLI::App* cuda_compat = AddHook(
      app, "enable-cuda-compat",
      "Put the image's CUDA forward-compatibility libraries (/usr/local/cuda/compat) first in the ldcache when "
      "they are of a newer major version than the host driver");
  cuda_compat->add_option("--host-driver-version", cuda_compat_.host_driver_version,
                          "The host driver's version; without it the hook does nothing");
  hooks_.push_back({cuda_compat, [this]() -> common::Status {
                      // As the toolkit: without a version there is nothing to
                      // compare, and the state is not even read.
                      if (cuda_compat_.host_driver_version.empty()) return common::OkStatus();
                      ASSIGN_OR_RETURN(cuda_compat_.container_root, LoadContainerRoot(container_spec_));
                      return EnableCudaCompat(cuda_compat_).status();
                    }});

  CLI::App* device_nodes = AddHook(
      app, "disable-device-node-modification",
      "Mount a read-only copy of the driver's /proc/driver/nvidia/params with ModifyDeviceFiles: 0 over the "
      "container's, so that CUDA in the container does not create device nodes");
  hooks_.push_back({device_nodes, [this]() -> common::Status {
                      ASSIGN_OR_RETURN(const std::filesystem::path root, LoadContainerRoot(container_spec_));
                      return DisableDeviceNodeModification({.container_root = root}).status();
                    }});

  for (std::string_view name : kIgnoredHooks) {
    CLI::App* ignored =
        app.add_subcommand(std::string(name), "Accepted for compatibility with the toolkit's specs; ignored");
    ignored->allow_extras();
    hooks_.push_back({ignored, nullptr});
  }
}

common::Status HookCommands::RunParsed(const std::vector<std::string>& rest) {
  for (const Hook& hook : hooks_) {
    if (!hook.command->parsed()) continue;
    if (!hook.run) {
      LOG_WARNING("hook not used by this driver's CDI specs; ignored", {{"hook", hook.command->get_name()}});
      return common::OkStatus();
    }
    common::Status status = hook.run();
    if (!status.ok()) return std::move(status).WithContext(hook.command->get_name());
    return common::OkStatus();
  }
  LOG_WARNING(rest.empty() ? "no CDI hook specified" : "unsupported CDI hook; skipped",
              {{"hook", rest.empty() ? std::string() : rest.front()}});
  return common::OkStatus();
}

}  // namespace nvdra::cdihook
