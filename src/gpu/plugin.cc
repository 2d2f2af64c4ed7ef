#include "gpu/plugin.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/file_io.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/metrics_server.h"
#include "common/mutex.h"
#include "drivercdi/hook_install.h"
#include "gpu/claim_cdi.h"
#include "gpu/device_health.h"
#include "gpu/device_health_reporter.h"
#include "gpu/device_state.h"
#include "gpu/discovery.h"
#include "gpu/dynamic_mig.h"
#include "gpu/fabric_partitions.h"
#include "gpu/mps_daemon.h"
#include "gpu/published_devices.h"
#include "gpu/vfio_passthrough.h"
#include "common/json_fields.h"
#include "k8s/client_from_flags.h"
#include "k8s/event_recorder.h"
#include "kubeletplugin/plugin_host.h"
#include "kubeletplugin/plugin_lifecycle.h"
#include "kubeletplugin/plugin_metrics.h"
#include "nvml/library.h"

namespace nvdra::gpu {

using common::StatusOr;

class SlicePublication;

// Declared in destruction order's reverse: the host (its server first) goes
// before the device state and CDI writer its calls use.
struct GpuKubeletPlugin::Parts {
  std::unique_ptr<common::MetricsRegistry> metrics_registry;
  std::unique_ptr<kubeletplugin::PluginMetrics> metrics;
  std::unique_ptr<k8s::Client> client;
  std::unique_ptr<nvml::Library> nvml;
  std::unique_ptr<GpuCdi> cdi;
  std::unique_ptr<ComputePolicy> compute_policy;
  std::unique_ptr<ApiMpsDeployments> mps_deployments;  // MPSSupport only
  std::unique_ptr<MpsDaemons> mps;                     // MPSSupport only
  std::unique_ptr<DynamicMig> dynamic_mig;             // DynamicMIG only
  std::unique_ptr<VfioPassthrough> vfio;               // PassthroughSupport only
  std::unique_ptr<FabricPartitions> fabric;           // a fabric gate on, on an NVSwitch node only
  std::unique_ptr<k8s::EventRecorder> claim_events;   // FabricTopologySupport only
  std::unique_ptr<SlicePublication> publication;
  std::unique_ptr<GpuDeviceState> device_state;
  std::unique_ptr<DeviceHealthBook> health_book;  // NVMLDeviceHealthCheck only
  std::unique_ptr<kubeletplugin::PluginHost> host;
  // NVMLDeviceHealthCheck only; after the host, whose server they feed, so
  // they stop before it.
  std::unique_ptr<DeviceHealthReporter> health_reporter;
  std::unique_ptr<NvmlHealthMonitor> health_monitor;
  std::unique_ptr<common::MetricsServer> metrics_server;  // --http-endpoint; null when empty
  PluginEnvironment environment;
};

PluginEnvironment PluginEnvironmentFromEnv() {
  PluginEnvironment environment;
  if (const char* path = std::getenv("NVDRA_BOOT_ID_FILE"); path != nullptr && *path != '\0') {
    environment.boot_id_file = path;
  }
  if (const char* dir = std::getenv("NVDRA_TEMPLATES_DIR"); dir != nullptr && *dir != '\0') {
    environment.templates_dir = dir;
  }
  return environment;
}

namespace {

// How the pool's slices carry DynamicMIG's counter sets, as upstream: API
// servers before 1.35 take one slice per GPU with its devices and counter set;
// 1.35 and later one slice of counter sets, then one slice of devices per GPU.
enum class CounterLayout { kNone, kCombined, kSplit };

kubeletplugin::DriverResources SlicesFor(const std::string& node_name, const PublishedResources& published,
                                         CounterLayout layout) {
  kubeletplugin::DriverResources resources;
  auto& slices = resources.pools[node_name].slices;
  if (layout == CounterLayout::kNone || published.counter_sets.empty()) {
    kubeletplugin::DesiredSlice slice;
    for (const PublishedDevice& device : published.devices) slice.devices.push_back(DeviceToJson(device));
    for (const CounterSet& set : published.counter_sets) slice.shared_counters.push_back(CounterSetToJson(set));
    slices.push_back(std::move(slice));
    return resources;
  }
  // Devices by the counter set (GPU) they consume, in publishing order;
  // devices that consume none (GPUs without MIG) share the first slice.
  std::vector<std::string> order;
  std::map<std::string, kubeletplugin::DesiredSlice> by_set;
  for (const PublishedDevice& device : published.devices) {
    const std::string set = device.consumes_counters.empty() ? "" : device.consumes_counters.front().counter_set;
    if (!by_set.contains(set)) order.push_back(set);
    by_set[set].devices.push_back(DeviceToJson(device));
  }
  if (layout == CounterLayout::kSplit) {
    kubeletplugin::DesiredSlice counters;
    for (const CounterSet& set : published.counter_sets) counters.shared_counters.push_back(CounterSetToJson(set));
    slices.push_back(std::move(counters));
  } else {
    for (const CounterSet& set : published.counter_sets) {
      by_set[set.name].shared_counters.push_back(CounterSetToJson(set));
      by_set[set.name].counters_with_devices = true;
      if (std::find(order.begin(), order.end(), set.name) == order.end()) order.push_back(set.name);
    }
  }
  for (const std::string& set : order) slices.push_back(std::move(by_set[set]));
  return resources;
}

}  // namespace

// The slices as they should be now: every published device but those the
// device state withdraws (VFIO siblings), in the counter layout. Publish may
// come before the publisher exists (the first reconcile runs inside
// PluginHost::Start): it is then only remembered, and Attach publishes it.
// Thread-safety: thread-safe.
class SlicePublication {
 public:
  SlicePublication(std::string node_name, PublishedResources all, CounterLayout layout)
      : node_name_(std::move(node_name)), all_(std::move(all)), layout_(layout) {}

  kubeletplugin::DriverResources Resources() const {
    common::MutexLock lock(mu_);
    return ResourcesLocked();
  }
  void Publish(const std::set<std::string>& withdrawn) {
    common::MutexLock lock(mu_);
    if (withdrawn != withdrawn_) {
      LOG_INFO(1, "republishing: devices withdrawn while their GPU's sibling is prepared",
               {{"withdrawn", fmt::format("{}", fmt::join(withdrawn, ","))}});
    }
    withdrawn_ = withdrawn;
    if (publisher_ != nullptr) publisher_->Update(ResourcesLocked());
  }
  // The health monitor's taints, the complete map each time.
  void SetTaints(const std::map<std::string, std::vector<DeviceTaint>>& taints) {
    common::MutexLock lock(mu_);
    std::map<std::string, std::vector<nlohmann::json>> as_json;
    for (const auto& [device, list] : taints) {
      for (const DeviceTaint& taint : list) as_json[device].push_back(DeviceTaintJson(taint));
    }
    if (as_json == taints_) return;
    LOG_INFO(1, "republishing: device taints changed", {{"taintedDevices", as_json.size()}});
    taints_ = std::move(as_json);
    if (publisher_ != nullptr) publisher_->Update(ResourcesLocked());
  }
  void Attach(kubeletplugin::ResourceSlicePublisher& publisher) {
    common::MutexLock lock(mu_);
    publisher_ = &publisher;
    publisher_->Update(ResourcesLocked());
  }

 private:
  kubeletplugin::DriverResources ResourcesLocked() const REQUIRES(mu_) {
    PublishedResources shown;
    shown.counter_sets = all_.counter_sets;
    for (const PublishedDevice& device : all_.devices) {
      if (withdrawn_.contains(device.name)) continue;
      shown.devices.push_back(device);
      if (auto it = taints_.find(device.name); it != taints_.end()) shown.devices.back().taints = it->second;
    }
    return SlicesFor(node_name_, shown, layout_);
  }

  const std::string node_name_;
  const PublishedResources all_;
  const CounterLayout layout_;
  mutable common::Mutex mu_;
  std::set<std::string> withdrawn_ GUARDED_BY(mu_);
  std::map<std::string, std::vector<nlohmann::json>> taints_ GUARDED_BY(mu_);
  kubeletplugin::ResourceSlicePublisher* publisher_ GUARDED_BY(mu_) = nullptr;
};

namespace {

// The boot id, without its newline; `what` names the feature that needs it.
StatusOr<std::string> ReadBootId(const std::filesystem::path& file, std::string_view what) {
  StatusOr<std::string> boot_id = common::ReadWholeFile(file);
  if (!boot_id.ok()) return boot_id.status().WithContext(fmt::format("reading the boot id for {}", what));
  while (!boot_id->empty() && (boot_id->back() == '\n' || boot_id->back() == ' ')) boot_id->pop_back();
  return boot_id;
}

// The API server's minor version ("37", "37+" -> 37).
StatusOr<int> ServerMinorVersion(k8s::Client& client) {
  k8s::RestRequest request;
  request.path = "/version";
  auto response = client.Do(request);
  if (!response.ok()) return response.status().WithContext("reading the API server's /version");
  const nlohmann::json version = nlohmann::json::parse(response->body, nullptr, false);
  const std::string minor = version.is_object() ? version.value("minor", "") : "";
  const int value = std::atoi(minor.c_str());
  if (value <= 0) return common::InternalError("the API server's /version has no minor version: " + response->body);
  return value;
}

// FabricTopologySupport limited to labelled nodes: the gates this node runs
// with (the Node is read once, at start-up; a label change needs a restart
// of the plugin pod, as docs/fabric-manager.md says).
StatusOr<common::FeatureGates> NodeFeatureGates(const PluginConfig& config, const common::FeatureGates& gates,
                                                k8s::Client& client) {
  const std::string& label = config.fabric_topology_node_label;
  if (label.empty() || !gates.Enabled(common::kFabricTopologySupport)) return gates;
  auto node = client.Get(k8s::resources::kNodes, "", config.plugin.node_name);
  if (!node.ok()) return node.status().WithContext("FabricTopologySupport: reading this node's labels");
  const std::string value = common::JsonString(common::JsonMember(*node, {"metadata", "labels"}), label);
  const bool on = value == "true";
  LOG_INFO(0, on ? "FabricTopologySupport: on for this node (its label says so)"
                 : "FabricTopologySupport: off for this node (not labelled); fabricTopologyConfig claims are refused "
                   "here",
           {{"label", label}, {"value", value}, {"node", config.plugin.node_name}});
  if (on) return gates;
  return gates.WithOverrides({{std::string(common::kFabricTopologySupport), false}});
}

// FabricManagerPartitioning or FabricTopologySupport: Fabric Manager's
// partitions, when the node has an NVSwitch fabric (null otherwise: no
// partition attributes, no activation, as upstream; the log says why), and
// their attributes.
StatusOr<std::unique_ptr<FabricPartitions>> OpenFabricPartitions(const PluginConfig& config,
                                                                 const NodeInventory& inventory,
                                                                 PublishOptions& publish) {
  if (!NodeHasNvSwitchFabric(config.host_root)) {
    LOG_INFO(0, "Fabric Manager: no NVSwitch fabric on this node; no partition attributes are published and "
                "Prepare activates no partition",
             {{"looked", (std::filesystem::path(config.host_root) / "proc/driver/nvidia-nvswitch/devices").string()}});
    return std::unique_ptr<FabricPartitions>();
  }
  const fabricmanager::Address address = FabricManagerAddressFromEnv(config.plugin.container_driver_root);
  StatusOr<std::unique_ptr<FmFabricPartitions>> fabric = FmFabricPartitions::Open(
      {.driver_root = config.plugin.container_driver_root, .library_path = std::nullopt}, address,
      std::chrono::seconds(10));
  if (!fabric.ok()) {
    return fabric.status().WithContext(
        "Fabric Manager: reading its partitions (is nvidia-fabricmanager running in "
        "shared NVSwitch mode, FABRIC_MODE=1? Set NVIDIA_FABRICMANAGER_ADDRESS or NVIDIA_FABRICMANAGER_UNIX_SOCKET "
        "where it listens elsewhere)");
  }
  for (const GpuInfo& gpu : inventory.gpus) {
    if (!gpu.module_id || *gpu.module_id == 0) continue;
    ASSIGN_OR_RETURN(publish.fabric_partitions[*gpu.module_id], (*fabric)->table().BySize(*gpu.module_id));
  }
  LOG_INFO(0, "Fabric Manager: partitions read",
           {{"partitions", (*fabric)->table().partitions().size()}, {"address", address.ToString()}});
  return std::unique_ptr<FabricPartitions>(*std::move(fabric));
}

// The MPS control daemons' parts: the template, the Deployment watch.
StatusOr<std::unique_ptr<MpsDaemons>> StartMps(const PluginConfig& config, const common::FeatureGates& gates,
                                               const PluginEnvironment& environment,
                                               const std::filesystem::path& plugin_dir, k8s::Client& client,
                                               ComputePolicy& compute_policy,
                                               std::unique_ptr<ApiMpsDeployments>& deployments) {
  const std::filesystem::path template_path = environment.templates_dir / kMpsDaemonTemplate;
  StatusOr<std::string> template_text = common::ReadWholeFile(template_path);
  if (!template_text.ok()) {
    return common::NotFoundError(fmt::format("MPSSupport: the MPS control daemon template {} cannot be read ({}); "
                                             "the driver's image ships it in /templates",
                                             template_path.string(), template_text.status().message()));
  }
  ASSIGN_OR_RETURN(deployments,
                   ApiMpsDeployments::Start(client, config.plugin.driver_namespace, std::chrono::seconds(60)));
  MpsOptions options;
  options.node_name = config.plugin.node_name;
  options.driver_namespace = config.plugin.driver_namespace;
  options.image_name = config.image_name;
  options.image_pull_policy = config.image_pull_policy;
  options.image_pull_secrets = config.image_pull_secrets;
  options.service_account_name = config.service_account_name;
  options.feature_gates = gates.ToString();
  options.control_files_root = plugin_dir / "mps";
  options.host_driver_root = config.plugin.nvidia_driver_root;
  options.container_driver_root = config.plugin.container_driver_root;
  options.template_text = *std::move(template_text);
  return std::make_unique<MpsDaemons>(std::move(options), *deployments, compute_policy);
}

}  // namespace

namespace {

// NVMLDeviceHealthCheck: the reporter (slices, kubelet, Events, the reset
// annotation), then the NVML event monitor that feeds it.
common::Status StartHealthCheck(const PluginConfig& config, GpuKubeletPlugin::Parts& parts,
                                std::vector<WatchedDevice> watched) {
  ASSIGN_OR_RETURN(XidPolicy xids, XidPolicy::Parse(config.additional_xids_to_ignore));
  DeviceHealthReporterOptions options;
  options.node_name = config.plugin.node_name;
  for (const WatchedDevice& device : watched) options.devices.push_back(device.name);
  options.publish_taints = [publication = parts.publication.get()](
                               const std::map<std::string, std::vector<DeviceTaint>>& taints) {
    publication->SetTaints(taints);
  };
  options.publish_health = [host = parts.host.get()](std::vector<kubeletplugin::DeviceHealth> report) {
    host->server().PublishDeviceHealth(std::move(report));
  };
  ASSIGN_OR_RETURN(parts.health_reporter,
                   DeviceHealthReporter::Start(*parts.client, *parts.health_book, std::move(options)));
  parts.health_reporter->Heartbeat();
  HealthMonitorOptions monitor;
  monitor.devices = std::move(watched);
  monitor.xids = std::move(xids);
  monitor.on_change = [reporter = parts.health_reporter.get()](const std::vector<HealthNote>& notes) {
    reporter->OnChange(notes);
  };
  ASSIGN_OR_RETURN(parts.health_monitor, NvmlHealthMonitor::Start(*parts.nvml, *parts.health_book, std::move(monitor)));
  LOG_INFO(0, "NVMLDeviceHealthCheck: watching NVML events",
           {{"devices", parts.health_book->devices().size()}, {"ignoredXids", fmt::format("{}", fmt::join(xids.ignored(), ","))}});
  return common::OkStatus();
}

}  // namespace

GpuKubeletPlugin::GpuKubeletPlugin(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}

GpuKubeletPlugin::~GpuKubeletPlugin() {
  // Claims waiting for an MPS daemon return now, so the server's shutdown
  // does not wait out their deadline.
  if (parts_ && parts_->mps_deployments) parts_->mps_deployments->Cancel();
}

StatusOr<std::unique_ptr<GpuKubeletPlugin>> GpuKubeletPlugin::Start(const PluginConfig& config,
                                                                   const common::FeatureGates& cluster_gates,
                                                                   const PluginEnvironment& environment) {
  auto parts = std::make_unique<Parts>();
  parts->environment = environment;
  const std::string driver(kDriverName);

  // Checkpoint device kinds of this plugin, for nvidia_dra_prepared_devices.
  parts->metrics_registry = std::make_unique<common::MetricsRegistry>();
  parts->metrics = std::make_unique<kubeletplugin::PluginMetrics>(
      *parts->metrics_registry, driver, config.plugin.node_name, std::vector<std::string>{"gpu", "mig", "vfio"});
  ASSIGN_OR_RETURN(parts->metrics_server, common::StartMetricsServerFromFlags(*parts->metrics_registry, config.metrics));

  ASSIGN_OR_RETURN(parts->client, k8s::ClientFromFlags(config.kube_client, std::string(kBinaryName)));
  ASSIGN_OR_RETURN(const common::FeatureGates gates, NodeFeatureGates(config, cluster_gates, *parts->client));

  // NVML is loaded from the driver root as this container sees it.
  ASSIGN_OR_RETURN(parts->nvml, nvml::Library::Open({.driver_root = config.plugin.container_driver_root, .library_path = std::nullopt}));
  DiscoveryOptions discovery;
  discovery.sysfs_root = environment.sysfs_root;
  ASSIGN_OR_RETURN(NodeInventory inventory, DiscoverDevices(*parts->nvml, discovery));
  const std::filesystem::path plugin_dir =
      std::filesystem::path(config.plugin.kubelet_plugins_directory_path) / driver;
  PublishOptions publish;
  if (gates.Enabled(common::kPassthroughSupport)) {
    ASSIGN_OR_RETURN(const std::string boot_id, ReadBootId(environment.boot_id_file, "PassthroughSupport"));
    ASSIGN_OR_RETURN(VfioPassthrough vfio,
                     VfioPassthrough::Open({.host_root = config.host_root,
                                            .record_file = plugin_dir / "vfio-bindings.json",
                                            .boot_id = boot_id}));
    parts->vfio = std::make_unique<VfioPassthrough>(std::move(vfio));
    publish.vfio_functions = parts->vfio->functions();
    publish.iommufd_enabled = parts->vfio->iommufd_available();
    LOG_INFO(0, "PassthroughSupport: GPU PCI functions found",
             {{"functions", publish.vfio_functions.size()}, {"iommufd", publish.iommufd_enabled},
              {"hostRoot", config.host_root}});
  }
  const bool fabric_topology = gates.Enabled(common::kFabricTopologySupport);
  if (gates.Enabled(common::kFabricManagerPartitioning) || fabric_topology) {
    ASSIGN_OR_RETURN(parts->fabric, OpenFabricPartitions(config, inventory, publish));
    // gpuModuleID always; partition<N> only where FM gave partitions.
    publish.fabric_manager_partitioning = true;
  }
  if (fabric_topology) {
    // fabricTopologyConfig's notes (Disabled, VGPU, FullPassthrough) go to
    // the claim as Events.
    ASSIGN_OR_RETURN(parts->claim_events,
                     k8s::EventRecorder::New(parts->client.get(), {.reporting_controller = "gpu.nvidia.com/kubelet-plugin",
                                                                   .reporting_instance = config.plugin.node_name}));
  }
  publish.list_type_attributes = gates.Enabled("DRAListTypeAttributes");
  publish.dynamic_mig = gates.Enabled(common::kDynamicMIG);
  // Validated with the flags (and refused without the ConsumableShares gate).
  ASSIGN_OR_RETURN(publish.consumable_shares, ConsumableShares::Parse(config.consumable_shares));
  ASSIGN_OR_RETURN(PublishedResources published, BuildPublishedResources(inventory, publish));
  LOG_INFO(0, "discovered devices",
           {{"gpus", inventory.gpus.size()}, {"devices", published.devices.size()},
            {"driverVersion", inventory.driver_version}});

  GpuCdiOptions cdi_options;
  cdi_options.cdi_root = config.plugin.cdi_root;
  cdi_options.driver_root = config.plugin.nvidia_driver_root;
  cdi_options.container_driver_root = config.plugin.container_driver_root;
  cdi_options.driver_version = inventory.driver_version;
  cdi_options.hook_path = config.plugin.nvidia_cdi_hook_path.empty() ? drivercdi::InstallCdiHook(plugin_dir)
                                                                     : config.plugin.nvidia_cdi_hook_path;
  ASSIGN_OR_RETURN(parts->cdi, GpuCdi::Create(cdi_options));
  // nvidia-smi sets the compute mode and time slice of shared GPUs. Without
  // it a node still serves exclusive claims, unless a sharing gate is on.
  StatusOr<NvidiaSmiComputePolicy> nvidia_smi =
      NvidiaSmiComputePolicy::Find(config.plugin.container_driver_root, parts->nvml->path());
  if (nvidia_smi.ok()) {
    parts->compute_policy = std::make_unique<NvidiaSmiComputePolicy>(*std::move(nvidia_smi));
  } else if (gates.Enabled(common::kTimeSlicingSettings) || gates.Enabled(common::kMPSSupport)) {
    return nvidia_smi.status();
  } else {
    parts->compute_policy = std::make_unique<MissingComputePolicy>(nvidia_smi.status());
  }
  if (gates.Enabled(common::kMPSSupport)) {
    ASSIGN_OR_RETURN(parts->mps, StartMps(config, gates, environment, plugin_dir, *parts->client,
                                          *parts->compute_policy, parts->mps_deployments));
  }
  CounterLayout layout = CounterLayout::kNone;
  if (publish.dynamic_mig) {
    parts->dynamic_mig = std::make_unique<DynamicMig>(*parts->nvml);
    ASSIGN_OR_RETURN(const int minor, ServerMinorVersion(*parts->client));
    layout = minor < 35 ? CounterLayout::kCombined : CounterLayout::kSplit;
    LOG_INFO(1, "DynamicMIG: partitionable devices",
             {{"counterSets", published.counter_sets.size()}, {"serverMinor", minor},
              {"layout", layout == CounterLayout::kSplit ? "split" : "combined"}});
  }
  parts->publication = std::make_unique<SlicePublication>(config.plugin.node_name, published, layout);
  // DeviceMetadata (needs PassthroughSupport): VFIO devices' attributes go
  // to the workload in a metadata file, as upstream's.
  std::map<std::string, nlohmann::json> device_metadata;
  if (gates.Enabled(common::kDeviceMetadata)) {
    for (const PublishedDevice& device : published.devices) {
      auto type = device.attributes.find("type");
      if (type != device.attributes.end() && type->second == AttributeValue(std::string("vfio"))) {
        device_metadata[device.name] = DeviceToJson(device)["attributes"];
      }
    }
  }
  parts->device_state = std::make_unique<GpuDeviceState>(
      std::move(inventory), *parts->cdi, *parts->compute_policy,
      GpuDeviceStateOptions{
          .shares_devices = publish.consumable_shares.enabled(),
          .mps = parts->mps.get(),
          .dynamic_mig = parts->dynamic_mig.get(),
          .vfio = parts->vfio.get(),
          .fabric = parts->fabric.get(),
          .exact_set_partitions = gates.Enabled(common::kFabricManagerPartitioning),
          .on_fabric_note = [events = parts->claim_events.get()](const kubeletplugin::ClaimRef& claim,
                                                                 const std::string& note) {
            if (events == nullptr) return;
            events->Emit(k8s::ObjectReference{.api_version = "resource.k8s.io/v1",
                                              .kind = "ResourceClaim",
                                              .namespace_ = claim.ns,
                                              .name = claim.name,
                                              .uid = claim.uid,
                                              .resource_version = ""},
                         k8s::EventType::kNormal, "FabricTopologyNotApplied", "PrepareResources", note);
          },
          .on_withdrawn_changed = [publication = parts->publication.get()](
                                      const std::set<std::string>& withdrawn) { publication->Publish(withdrawn); },
          .device_metadata = std::move(device_metadata)});

  // NVMLDeviceHealthCheck: the taints recorded before a restart are in the
  // first slices already.
  const bool health_check = gates.Enabled(common::kNVMLDeviceHealthCheck);
  std::vector<WatchedDevice> watched;
  if (health_check) {
    watched = WatchedDevicesOf(parts->device_state->inventory());
    std::set<std::string> names;
    for (const WatchedDevice& device : watched) names.insert(device.name);
    ASSIGN_OR_RETURN(const std::string boot_id, ReadBootId(environment.boot_id_file, "NVMLDeviceHealthCheck"));
    ASSIGN_OR_RETURN(parts->health_book,
                     DeviceHealthBook::Open(plugin_dir / "device-health.json", boot_id, std::move(names)));
    parts->publication->SetTaints(parts->health_book->Taints());
  }

  kubeletplugin::PluginHostOptions host_options;
  host_options.preparer.metrics = parts->metrics.get();
  host_options.preparer.gates = gates;
  host_options.preparer.device_metadata = gates.Enabled(common::kDeviceMetadata);
  host_options.boot_id_file = environment.boot_id_file;
  host_options.resources = parts->publication->Resources();
  host_options.after_reconcile = [publication = parts->publication.get()](
                                     kubeletplugin::ClaimPreparer&, kubeletplugin::ResourceSlicePublisher& publisher) {
    // From now on the device state's withdrawals reach the API server.
    publication->Attach(publisher);
  };
  // After a reboot (PluginHostOptions::remove_claim_specs_except says why
  // only then).
  host_options.remove_claim_specs_except = [cdi = parts->cdi.get()](const std::set<std::string>& keep) {
    return cdi->RemoveOrphanedClaimSpecs(keep);
  };
  ASSIGN_OR_RETURN(parts->host, kubeletplugin::PluginHost::Start(config.plugin, driver, *parts->client,
                                                                 *parts->device_state, std::move(host_options)));
  if (health_check) RETURN_IF_ERROR(StartHealthCheck(config, *parts, std::move(watched)));
  return std::unique_ptr<GpuKubeletPlugin>(new GpuKubeletPlugin(std::move(parts)));
}

void GpuKubeletPlugin::Run(std::stop_token stop) {
  std::vector<kubeletplugin::PeriodicTask> tasks = {
      kubeletplugin::ReconcileTask(parts_->host->preparer(), parts_->environment.reconcile_interval)};
  if (parts_->health_reporter) {
    // The kubelet forgets a device not reported within its timeout (60 s).
    tasks.push_back({.interval = std::chrono::seconds(20),
                     .run = [reporter = parts_->health_reporter.get()] { reporter->Heartbeat(); }});
  }
  kubeletplugin::RunPeriodic(stop, std::move(tasks));
}

}  // namespace nvdra::gpu
