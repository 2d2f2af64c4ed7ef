#pragma once

// The compute-domain plugin's half of claim preparation
// (kubeletplugin::ClaimDeviceBackend), upstream-inventory.md section 4.5:
//
//  channel claim (driverManaged): the ComputeDomain (by the config's
//    domainID) must be in the claim's namespace, else a permanent
//    kFailedPrecondition ("namespace isolation"); the node gets the label
//    resource.nvidia.com/computeDomain=<cdUID> (another domain's label there
//    fails); this node's daemon must be Ready in the domain (DomainWatch),
//    else kUnavailable, on which the ClaimPreparer waits outside its locks in
//    AwaitRetry until a watch event makes it Ready; then the channel char
//    devices are injected (channel 0, or all 2048 with allocationMode All).
//    A node without a clique id injects nothing.
//  channel claim (hostManaged): the namespace check; no label; the allocated
//    channel id; no injection without a clique id; with one, the host
//    daemon's readiness: `chroot <devRoot> nvidia-imex-ctl -q --u=<socket>`
//    must print READY (else kUnavailable, not awaited: no watch event tells
//    when the host daemon becomes ready, so the kubelet's retry asks again),
//    then that one channel is injected.
//  channel isolation (--imex-isolation=channel, beyond upstream): channels
//    0..channel_count-1 are published; the ComputeDomain's
//    status.imexChannelID (written by the controller) must equal the
//    allocated channel's id: absent is kUnavailable, awaited through the
//    watch (the controller has not assigned one yet); a different id is a
//    permanent kFailedPrecondition. Only that channel is injected, also with
//    allocationMode All (All would hand every domain's channel to the
//    workload, which is what channel isolation exists to prevent).
//  daemon claim (driverManaged only): domains/<cdUID>/ with imexd.cfg.tmpl
//    copied from the template, env CLIQUE_ID, COMPUTE_DOMAIN_UUID,
//    COMPUTE_DOMAIN_NAME, COMPUTE_DOMAIN_NAMESPACE, the /imexd bind mount,
//    and with a clique id the fabric-imex-mgmt capability device; the CDI ids
//    are the base spec's "all" device and the claim device.
//  Unprepare: a channel claim's node label is removed if it still names the
//    claim's domain; the claim spec is removed; then (driverManaged) the
//    domains/<cdUID>/ folders of ComputeDomains that are gone or being
//    deleted are removed (RemoveStaleDomainDirs). A live domain's folder
//    stays when its daemon leaves the node, as upstream keeps it: a new
//    daemon pod of the domain may be preparing it at the same time.
// A ComputeDomain not (yet) in the informer cache is kUnavailable as well
// (upstream fails at once): a claim racing its domain's creation waits for it.
//
// Checkpoint groups (kubeletplugin/prepared_devices.h): one per claim
// device, a PreparedChannel or PreparedDaemon with the CdConfigState
// {Type: "channel"|"daemon", ComputeDomain: <cdUID>}.
//
// Ownership: borrows the client, the watch and the CDI writer, which must
// outlive it. Thread-safety: PrepareDevices/UnprepareDevices and
// ReleaseUnusedNodeLabel are called one at a time (the ClaimPreparer's lock);
// AwaitRetry, set_clique_id, clique_id and
// RemoveStaleDomainDirs are thread-safe.

#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "computedomain/cdi.h"
#include "computedomain/config.h"
#include "computedomain/domain_watch.h"
#include "computedomain/labels.h"
#include "k8s/client.h"
#include "kubeletplugin/claim_device_backend.h"

namespace nvdra::computedomain {

inline constexpr std::string_view kDriverName = "compute-domain.nvidia.com";

// The plugin's two device types: device names "channel-<n>" and "daemon-0",
// and the Type of their checkpoint config state (upstream's
// ComputeDomainChannelType and ComputeDomainDaemonType).
inline constexpr std::string_view kChannelType = "channel";
inline constexpr std::string_view kDaemonType = "daemon";

struct CdDeviceStateOptions {
  std::string node_name;
  bool host_managed = false;  // --imex-mode=hostManaged
  bool channel_isolation = false;  // --imex-isolation=channel
  // Channels published with channel isolation (--imex-channel-count).
  int channel_count = 128;
  // hostManaged readiness: where nvidia-imex-ctl is run chrooted, and the
  // host daemon's command socket as seen inside that root.
  std::filesystem::path dev_root = "/";
  std::string imex_host_socket_path = "/etc/nvidia-imex/imex_ctrl.sock";
  // Test hook (NVDRA_IMEX_CTL_PATH): run this binary without chroot, with
  // the socket path taken inside dev_root. Empty: upstream's chroot.
  std::string imex_ctl_path;
  std::chrono::milliseconds imex_ctl_timeout = std::chrono::seconds(10);
  // <plugins>/compute-domain.nvidia.com/domains: one folder per domain.
  std::filesystem::path domains_dir;
  // The nvidia-imex config template copied to imexd.cfg.tmpl.
  std::filesystem::path daemon_config_template = "/templates/compute-domain-daemon-config.tmpl.cfg";
};

class CdDeviceState final : public kubeletplugin::ClaimDeviceBackend {
 public:
  CdDeviceState(CdDeviceStateOptions options, std::string clique_id, k8s::Client& client, DomainWatch& watch,
                const CdCdi& cdi);

  // Upstream's defaults: the daemon config, then the channel config.
  std::vector<api::ConfigKind> DefaultConfigKinds() const override;
  // channel-<n> (n below kMaxImexChannelCount): ComputeDomainChannelConfig; daemon-0:
  // ComputeDomainDaemonConfig (kFailedPrecondition with hostManaged).
  common::StatusOr<api::ConfigKind> ConfigKindOf(const std::string& device) const override;
  common::StatusOr<std::vector<kubeletplugin::PreparedDeviceGroup>> PrepareDevices(
      const kubeletplugin::ClaimView& claim) override;
  common::Status UnprepareDevices(const kubeletplugin::RecordedClaim& claim) override;
  // Redoing a channel claim's steps is harmless, and undoing them would drop
  // the node label its domain's daemon pod is scheduled by.
  common::Status RollBackLeftover(const kubeletplugin::RecordedClaim&) override { return common::OkStatus(); }
  // A claim prepared before the checkpoint was lost: its CDI spec goes now
  // that the kubelet unprepares it (kept at start-up: its pod may run).
  common::Status ForgetUnknownClaim(const std::string& claim_uid) override { return cdi_.RemoveClaimSpec(claim_uid); }
  // Waits (no timer: DomainWatch's event-driven wait) until every domain the
  // claim's channel configs name is known and has this node Ready.
  bool AwaitRetry(const kubeletplugin::ClaimView& claim, const common::Status& failure,
                  std::chrono::steady_clock::time_point deadline) override;

  std::string clique_id() const;
  void set_clique_id(std::string clique_id);

  // driverManaged, at start-up before serving: removes the node's
  // ComputeDomain label when no channel claim of that domain is prepared or
  // being prepared in `checkpoint`. After a reboot the checkpoint's claims
  // are discarded (their CDI specs went with the volatile /var/run), so the
  // kubelet's later Unprepare finds nothing to undo and the label would stay
  // forever, keeping the domain's daemon on the node and every other domain
  // off it. A claim the kubelet prepares again labels the node again.
  common::Status RemoveUnusedNodeLabel(const kubeletplugin::Checkpoint& checkpoint);

  // driverManaged, while serving (the plugin calls it periodically with the
  // preparer's locks held, ClaimPreparer::WithCheckpoint): the label a
  // daemon pod of a domain on this node was placed by, when no channel claim
  // of that domain is prepared or being prepared here, is removed on the
  // second call in a row that finds it so. Why: the controller labels a node
  // as soon as a workload claim is allocated there (before the kubelet
  // prepares it); a pod deleted before its Prepare never gets the Unprepare
  // that would remove the label, which would keep the domain's daemon on the
  // node and every other domain off it until the domain is deleted. Two
  // calls in a row leave a just-allocated claim one interval to reach its
  // Prepare; a Prepare after the removal labels the node again.
  // `daemon_domains`: domain UIDs of the live daemon pods on this node.
  common::Status ReleaseUnusedNodeLabel(const kubeletplugin::Checkpoint& checkpoint,
                                        const std::set<std::string>& daemon_domains);

  // driverManaged (no-op otherwise): removes the domains/<cdUID>/ folders
  // whose ComputeDomain is not in the watch's cache or is being deleted.
  // Upstream sweeps them every 10 minutes; the plugin calls this at start-up,
  // after every Unprepare and on every ComputeDomain delete event, so a
  // deleted domain leaves none. A folder still bind-mounted into a daemon of
  // a deleted domain goes too: that daemon is being stopped. Errors are
  // logged; nothing depends on them.
  void RemoveStaleDomainDirs();

  // Names of the devices this node publishes: channel-0 (channel isolation:
  // channel-0..channel-<channel_count-1>) and, unless hostManaged, daemon-0.
  std::vector<std::string> PublishedDeviceNames() const;

 private:
  // Whether a channel claim of domain `cd_uid` is prepared or being
  // prepared (any state but PrepareAborted) in `checkpoint`.
  bool DomainInUse(const kubeletplugin::Checkpoint& checkpoint, const std::string& cd_uid) const;
  common::Status AddNodeLabel(const std::string& cd_uid);
  common::Status RemoveNodeLabel(const std::string& cd_uid);
  // hostManaged: OK when nvidia-imex-ctl -q says READY; kUnavailable
  // (with its output) otherwise, kNotFound without the binary.
  common::Status CheckHostImexReady() const;

  const CdDeviceStateOptions options_;
  k8s::Client& client_;
  DomainWatch& watch_;
  const CdCdi& cdi_;
  mutable common::Mutex clique_mu_;
  common::Mutex dirs_mu_;  // one RemoveStaleDomainDirs at a time (guards the folders, no member)
  std::string clique_id_ GUARDED_BY(clique_mu_);
  // Domains ReleaseUnusedNodeLabel found unused on its last call (only that
  // method, with the preparer's locks held, touches it).
  std::set<std::string> unused_last_time_;
  // The domain AddNodeLabel last found (or put) in the node's label, and
  // when: a channel claim's retry once its daemon is Ready, seconds after
  // its first attempt, skips the GET (a round trip on the loaded API server
  // right before the claim is prepared). Only our own removal clears it
  // early; a label someone else removes meanwhile belongs to a domain that
  // is gone (the controller's cascade), whose claims fail the domain check.
  // Touched only under the preparer's lock, as the methods that use it.
  static constexpr std::chrono::seconds kLabelMemory{10};
  std::string label_seen_domain_;
  std::chrono::steady_clock::time_point label_seen_at_;
};

}  // namespace nvdra::computedomain
