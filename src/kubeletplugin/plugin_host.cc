#include "kubeletplugin/plugin_host.h"

#include <set>
#include <string>
#include <utility>

#include "common/log.h"
#include "kubeletplugin/boot_id.h"
#include "kubeletplugin/plugin_lifecycle.h"

namespace nvdra::kubeletplugin {

common::StatusOr<std::unique_ptr<PluginHost>> PluginHost::Start(const KubeletPluginFlags& flags,
                                                               const std::string& driver, k8s::Client& client,
                                                               ClaimDeviceBackend& backend,
                                                               PluginHostOptions options) {
  std::unique_ptr<PluginHost> host(new PluginHost());
  const std::filesystem::path plugin_dir = std::filesystem::path(flags.kubelet_plugins_directory_path) / driver;
  options.preparer.driver_name = driver;
  options.preparer.plugin_dir = plugin_dir;
  options.preparer.cdi_root = flags.cdi_root;
  ASSIGN_OR_RETURN(options.preparer.boot_id, ReadBootId(options.boot_id_file));
  host->claim_reader_ = std::make_unique<ApiClaimReader>(client);
  ASSIGN_OR_RETURN(host->preparer_, ClaimPreparer::Create(std::move(options.preparer), *host->claim_reader_, backend));

  PublisherOptions publisher_options;
  publisher_options.driver_name = driver;
  publisher_options.node_name = flags.node_name;
  ASSIGN_OR_RETURN(host->publisher_, ResourceSlicePublisher::Start(client, std::move(publisher_options)));
  host->publisher_->Update(std::move(options.resources));

  ClaimPreparer& preparer = *host->preparer_;
  std::function<void()> after_reconcile = [&] {
    if (options.remove_claim_specs_except && preparer.DiscardedClaimsOfAnEarlierBoot()) {
      std::set<std::string> prepared;
      if (common::StatusOr<Checkpoint> checkpoint = preparer.ReadCheckpoint(); checkpoint.ok()) {
        for (const auto& [uid, entry] : checkpoint->claims) prepared.insert(uid);
        common::StatusOr<int> removed = options.remove_claim_specs_except(prepared);
        if (!removed.ok()) {
          LOG_ERROR("cannot remove CDI specs of claims of an earlier boot", {{"err", removed.status()}});
        } else if (*removed > 0) {
          LOG_INFO(0, "removed CDI specs of claims of an earlier boot", {{"count", *removed}});
        }
      }
    }
    if (options.after_reconcile) options.after_reconcile(preparer, *host->publisher_);
  };
  ASSIGN_OR_RETURN(host->server_, ReconcileThenServe(flags, driver, plugin_dir, preparer, after_reconcile));
  return host;
}

PluginHost::~PluginHost() {
  server_.reset();
  preparer_.reset();
  publisher_.reset();
}

}  // namespace nvdra::kubeletplugin
