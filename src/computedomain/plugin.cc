#include "computedomain/plugin.h"

#include <cstdlib>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "computedomain/cdi.h"
#include "computedomain/device_state.h"
#include "computedomain/domain_watch.h"
#include "drivercdi/hook_install.h"
#include "k8s/client_from_flags.h"
#include "kubeletplugin/plugin_host.h"
#include "kubeletplugin/plugin_lifecycle.h"
#include "nvml/fabric.h"
#include "nvml/library.h"

namespace nvdra::computedomain {

using common::Status;
using common::StatusOr;

// Declared in destruction order's reverse: the server goes before the
// preparer and the state it calls.
struct ComputeDomainKubeletPlugin::Parts {
  std::unique_ptr<k8s::Client> client;
  std::unique_ptr<nvml::Library> nvml;
  nvml::CliqueOptions clique_options;
  std::unique_ptr<CdCdi> cdi;
  std::unique_ptr<DomainWatch> watch;
  std::unique_ptr<CdDeviceState> device_state;
  std::unique_ptr<kubeletplugin::PluginHost> host;
  PluginEnvironment environment;
  std::string node_name;
  bool clique_label = false;
};

PluginEnvironment PluginEnvironmentFromEnv() {
  PluginEnvironment environment;
  if (const char* path = std::getenv("NVDRA_BOOT_ID_FILE"); path != nullptr && *path != '\0') {
    environment.boot_id_file = path;
  }
  if (const char* path = std::getenv("NVDRA_CD_DAEMON_CONFIG_TEMPLATE"); path != nullptr && *path != '\0') {
    environment.daemon_config_template = path;
  }
  if (const char* ms = std::getenv("NVDRA_PREPARE_READY_WAIT_MS"); ms != nullptr && *ms != '\0') {
    environment.ready_wait = std::chrono::milliseconds(std::strtoll(ms, nullptr, 10));
  }
  if (const char* ms = std::getenv("NVDRA_UNUSED_LABEL_CHECK_MS"); ms != nullptr && *ms != '\0') {
    // A test hook; a zero or unreadable value would make the check spin.
    if (const long long value = std::strtoll(ms, nullptr, 10); value > 0) {
      environment.unused_label_check_interval = std::chrono::milliseconds(value);
    }
  }
  if (const char* path = std::getenv("NVDRA_IMEX_CTL_PATH"); path != nullptr && *path != '\0') {
    environment.imex_ctl_path = path;
  }
  environment.proc = drivercdi::ProcPathsFromEnvironment();
  return environment;
}

namespace {

// The node's GPUs as far as this plugin needs them: the daemon's "all"
// device carries every GPU's device node.
struct NodeGpus {
  std::string driver_version;
  std::vector<unsigned> minors;
};

StatusOr<NodeGpus> ReadNodeGpus(const nvml::Library& nvml) {
  NodeGpus gpus;
  ASSIGN_OR_RETURN(gpus.driver_version, nvml.DriverVersion());
  ASSIGN_OR_RETURN(const std::uint32_t count, nvml.DeviceCount());
  for (std::uint32_t index = 0; index < count; ++index) {
    StatusOr<nvml::Device> device = nvml.DeviceByIndex(index);
    if (!device.ok()) return std::move(device).status().WithContext(fmt::format("GPU {}", index));
    StatusOr<std::uint32_t> minor = device->MinorNumber();
    if (!minor.ok()) return std::move(minor).status().WithContext(fmt::format("GPU {}: minor number", index));
    gpus.minors.push_back(*minor);
  }
  return gpus;
}

// Minimum driver for ComputeDomains with IMEX DNS names (upstream).
constexpr std::string_view kMinDriverForDnsNames = "570.158.01";

std::vector<long> VersionParts(std::string_view version) {
  std::vector<long> parts;
  std::stringstream in{std::string(version)};
  std::string item;
  while (std::getline(in, item, '.')) parts.push_back(std::strtol(item.c_str(), nullptr, 10));
  return parts;
}

nlohmann::json PublishedDevice(const std::string& name) {
  const auto dash = name.rfind('-');
  const std::string type = name.substr(0, dash);
  const std::int64_t id = std::strtoll(name.c_str() + dash + 1, nullptr, 10);
  return {{"name", name}, {"attributes", {{"type", {{"string", type}}}, {"id", {{"int", id}}}}}};
}

Status PatchCliqueLabel(k8s::Client& client, const std::string& node, const std::string& clique_id) {
  nlohmann::json patch = {{"metadata", {{"labels", {{std::string(kGpuCliqueNodeLabel), nullptr}}}}}};
  if (!clique_id.empty()) patch["metadata"]["labels"][std::string(kGpuCliqueNodeLabel)] = clique_id;
  return client.Patch(k8s::resources::kNodes, "", node, k8s::PatchType::kMerge, patch).status();
}

}  // namespace

ComputeDomainKubeletPlugin::ComputeDomainKubeletPlugin(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}

ComputeDomainKubeletPlugin::~ComputeDomainKubeletPlugin() {
  if (!parts_) return;
  if (parts_->watch) parts_->watch->Cancel();  // waiting Prepare calls answer now
  parts_->host.reset();
  if (parts_->watch) parts_->watch->SetDomainDeletedHandler(nullptr);
  parts_->device_state.reset();
  parts_->watch.reset();
  if (parts_->clique_label) {
    if (Status s = PatchCliqueLabel(*parts_->client, parts_->node_name, ""); !s.ok()) {
      LOG_ERROR("cannot remove the node's clique label", {{"label", kGpuCliqueNodeLabel}, {"err", s}});
    }
  }
}

StatusOr<std::unique_ptr<ComputeDomainKubeletPlugin>> ComputeDomainKubeletPlugin::Start(
    const PluginConfig& config, const common::FeatureGates& gates, const PluginEnvironment& environment) {
  auto parts = std::make_unique<Parts>();
  parts->environment = environment;
  parts->node_name = config.plugin.node_name;
  const std::string driver(kDriverName);

  ASSIGN_OR_RETURN(parts->client, k8s::ClientFromFlags(config.kube_client, std::string(kPluginBinaryName)));

  ASSIGN_OR_RETURN(parts->nvml, nvml::Library::Open({.driver_root = config.plugin.container_driver_root,
                                                     .library_path = std::nullopt}));
  ASSIGN_OR_RETURN(const NodeGpus inventory, ReadNodeGpus(*parts->nvml));
  if (!config.imex.host_managed() && gates.Enabled("IMEXDaemonsWithDNSNames") &&
      VersionParts(inventory.driver_version) < VersionParts(kMinDriverForDnsNames)) {
    return common::FailedPreconditionError(
        fmt::format("NVIDIA driver {} is older than {}, the minimum for ComputeDomains with IMEXDaemonsWithDNSNames: "
                    "upgrade the driver, or turn the feature gate off (chart value "
                    "featureGates.IMEXDaemonsWithDNSNames=false; the IMEX daemons then address each other by IP)",
                    inventory.driver_version, kMinDriverForDnsNames));
  }
  parts->clique_options.strict = gates.Enabled("CrashOnNVLinkFabricErrors");
  ASSIGN_OR_RETURN(std::string clique_id, nvml::NodeCliqueId(*parts->nvml, parts->clique_options));
  LOG_INFO(0, "node discovered",
           {{"gpus", inventory.minors.size()}, {"cliqueID", clique_id}, {"driverVersion", inventory.driver_version}});

  const std::filesystem::path plugin_dir =
      std::filesystem::path(config.plugin.kubelet_plugins_directory_path) / driver;
  CdCdiOptions cdi_options;
  cdi_options.cdi_root = config.plugin.cdi_root;
  cdi_options.roots.host_driver_root = config.plugin.nvidia_driver_root;
  cdi_options.roots.container_driver_root = config.plugin.container_driver_root;
  cdi_options.driver_version = inventory.driver_version;
  cdi_options.hook_path = config.plugin.nvidia_cdi_hook_path.empty() ? drivercdi::InstallCdiHook(plugin_dir)
                                                                     : config.plugin.nvidia_cdi_hook_path;
  cdi_options.gpu_minors = inventory.minors;
  cdi_options.proc = environment.proc;
  parts->cdi = std::make_unique<CdCdi>(std::move(cdi_options));
  RETURN_IF_ERROR(parts->cdi->WriteBaseSpec());

  ASSIGN_OR_RETURN(parts->watch, DomainWatch::Start(*parts->client,
                                                    {.node_name = config.plugin.node_name,
                                                     .clique_id = clique_id,
                                                     .driver_namespace = config.plugin.driver_namespace,
                                                     .cliques_enabled = gates.Enabled("ComputeDomainCliques")}));
  CdDeviceStateOptions state_options;
  state_options.node_name = config.plugin.node_name;
  state_options.host_managed = config.imex.host_managed();
  state_options.channel_isolation = config.imex.channel_isolation();
  state_options.channel_count = config.imex_channel_count;
  state_options.domains_dir = plugin_dir / "domains";
  state_options.daemon_config_template = environment.daemon_config_template;
  state_options.dev_root = drivercdi::DevRootFor(config.plugin.container_driver_root);
  state_options.imex_host_socket_path = config.imex_host_socket_path;
  state_options.imex_ctl_path = environment.imex_ctl_path;
  parts->device_state = std::make_unique<CdDeviceState>(std::move(state_options), clique_id, *parts->client,
                                                        *parts->watch, *parts->cdi);
  // A deleted domain's folders go at once (its daemons' Unprepare may have
  // come while it still existed: the workload left first).
  parts->watch->SetDomainDeletedHandler([state = parts->device_state.get()] { state->RemoveStaleDomainDirs(); });

  if (config.gpu_clique_label_enabled && !clique_id.empty()) {
    RETURN_IF_ERROR(PatchCliqueLabel(*parts->client, config.plugin.node_name, clique_id));
    parts->clique_label = true;
  }

  kubeletplugin::PluginHostOptions host_options;
  host_options.preparer.record_aborted = true;
  host_options.preparer.gates = gates;
  host_options.preparer.ready_wait = environment.ready_wait;
  host_options.boot_id_file = environment.boot_id_file;
  kubeletplugin::DesiredSlice slice;
  for (const std::string& name : parts->device_state->PublishedDeviceNames()) {
    slice.devices.push_back(PublishedDevice(name));
  }
  host_options.resources.pools[config.plugin.node_name].slices.push_back(std::move(slice));
  // Before serving, so no Prepare runs meanwhile.
  host_options.after_reconcile = [state = parts->device_state.get()](
                                     kubeletplugin::ClaimPreparer& preparer, kubeletplugin::ResourceSlicePublisher&) {
    StatusOr<kubeletplugin::Checkpoint> checkpoint = preparer.ReadCheckpoint();
    if (!checkpoint.ok()) return;
    if (Status s = state->RemoveUnusedNodeLabel(*checkpoint); !s.ok()) {
      LOG_ERROR("cannot remove the node's unused ComputeDomain label", {{"err", s}});
    }
    state->RemoveStaleDomainDirs();
  };
  host_options.remove_claim_specs_except = [cdi = parts->cdi.get()](const std::set<std::string>& keep) {
    return cdi->RemoveOrphanedClaimSpecs(keep);
  };
  ASSIGN_OR_RETURN(parts->host, kubeletplugin::PluginHost::Start(config.plugin, driver, *parts->client,
                                                                 *parts->device_state, std::move(host_options)));
  return std::unique_ptr<ComputeDomainKubeletPlugin>(new ComputeDomainKubeletPlugin(std::move(parts)));
}

void ComputeDomainKubeletPlugin::Run(std::stop_token stop) {
  // As upstream: only a non-empty, different id replaces the known one.
  auto refresh_clique = [this] {
    StatusOr<std::string> clique = nvml::NodeCliqueId(*parts_->nvml, parts_->clique_options);
    if (!clique.ok()) {
      LOG_ERROR("cannot re-read the node's clique id", {{"err", clique.status()}});
      return;
    }
    if (clique->empty() || *clique == parts_->device_state->clique_id()) return;
    LOG_INFO(0, "clique id changed", {{"old", parts_->device_state->clique_id()}, {"new", *clique}});
    parts_->device_state->set_clique_id(*clique);
    parts_->watch->SetCliqueId(*clique);
    if (parts_->clique_label) {
      if (Status s = PatchCliqueLabel(*parts_->client, parts_->node_name, *clique); !s.ok()) {
        LOG_ERROR("cannot update the node's clique label", {{"err", s}});
      }
    }
  };
  auto release_unused_label = [this] {
    std::set<std::string> domains = parts_->watch->DaemonDomains();
    // Nothing to look at (the common case) costs no lock and no request.
    if (domains.empty()) return;
    Status s = parts_->host->preparer().WithCheckpoint([&](const kubeletplugin::Checkpoint& checkpoint) {
      return parts_->device_state->ReleaseUnusedNodeLabel(checkpoint, domains);
    });
    if (!s.ok()) LOG_ERROR("cannot release the node's unused ComputeDomain label", {{"err", s}});
  };
  // hostManaged: no daemons, so no domains and nothing to do.
  kubeletplugin::RunPeriodic(
      stop, {{parts_->environment.clique_refresh_interval, refresh_clique},
             kubeletplugin::ReconcileTask(parts_->host->preparer(), parts_->environment.reconcile_interval),
             {parts_->environment.unused_label_check_interval, release_unused_label}});
}

}  // namespace nvdra::computedomain
