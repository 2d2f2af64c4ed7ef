#include "computedomain/device_state.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <optional>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "api/opaque_config.h"
#include "common/child_process.h"
#include "common/crash_point.h"
#include "common/json_fields.h"
#include "common/log.h"
#include "k8s/api_error.h"

namespace nvdra::computedomain {

namespace fs = std::filesystem;
using common::JsonString;
using common::Status;
using common::StatusOr;

namespace {

// "channel-7" -> 7 (type "channel"); nullopt for anything else.
std::optional<int> IdOf(std::string_view device, std::string_view type) {
  const std::string prefix = fmt::format("{}-", type);
  if (!device.starts_with(prefix)) return std::nullopt;
  const std::string_view digits = device.substr(prefix.size());
  int id = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), id);
  if (ec != std::errc() || end != digits.data() + digits.size() || id < 0) return std::nullopt;
  return id;
}

kubeletplugin::CheckpointedDevice Checkpointed(const api::AllocatedDevice& allocated,
                                               std::vector<std::string> cdi_ids) {
  return {.device = {.requests = {allocated.request},
                     .pool_name = allocated.pool,
                     .device_name = allocated.device,
                     .cdi_device_ids = std::move(cdi_ids)},
          .share_id = std::nullopt,
          .metadata = nullptr};
}

std::string DomainIdOf(const api::OpaqueConfig& config) { return JsonString(config.object, "domainID"); }

std::string DomainString(const k8s::ComputeDomain& cd) {
  return fmt::format("{}/{} ({})", cd.namespace_name(), cd.name(), cd.uid());
}

// status.imexChannelID, the controller's per-domain channel in channel
// isolation; nullopt while absent (or not a non-negative integer).
std::optional<std::int64_t> ImexChannelIdOf(const k8s::ComputeDomain& cd) {
  std::optional<std::int64_t> id = cd.imex_channel_id();
  return id && *id >= 0 ? id : std::nullopt;
}

// Upstream's search paths for nvidia-imex-ctl inside the dev root.
std::optional<fs::path> FindImexCtl(const fs::path& root) {
  for (const char* dir : {"opt/bin", "usr/bin", "usr/sbin", "bin", "sbin"}) {
    std::error_code ec;
    const fs::path candidate = root / dir / "nvidia-imex-ctl";
    if (fs::exists(candidate, ec)) return fs::path("/") / dir / "nvidia-imex-ctl";
  }
  return std::nullopt;
}

}  // namespace

CdDeviceState::CdDeviceState(CdDeviceStateOptions options, std::string clique_id, k8s::Client& client,
                             DomainWatch& watch, const CdCdi& cdi)
    : options_(std::move(options)), client_(client), watch_(watch), cdi_(cdi), clique_id_(std::move(clique_id)) {}

std::string CdDeviceState::clique_id() const {
  common::MutexLock lock(clique_mu_);
  return clique_id_;
}

void CdDeviceState::set_clique_id(std::string clique_id) {
  common::MutexLock lock(clique_mu_);
  clique_id_ = std::move(clique_id);
}

std::vector<std::string> CdDeviceState::PublishedDeviceNames() const {
  std::vector<std::string> names;
  const int channels = options_.channel_isolation ? options_.channel_count : 1;
  for (int id = 0; id < channels; ++id) names.push_back(fmt::format("{}-{}", kChannelType, id));
  if (!options_.host_managed) names.push_back(fmt::format("{}-0", kDaemonType));
  return names;
}

std::vector<api::ConfigKind> CdDeviceState::DefaultConfigKinds() const {
  return {api::ConfigKind::kComputeDomainDaemonConfig, api::ConfigKind::kComputeDomainChannelConfig};
}

StatusOr<api::ConfigKind> CdDeviceState::ConfigKindOf(const std::string& device) const {
  if (std::optional<int> id = IdOf(device, kChannelType); id && *id < kMaxImexChannelCount) {
    return api::ConfigKind::kComputeDomainChannelConfig;
  }
  if (IdOf(device, kDaemonType) == 0) {
    if (!options_.host_managed) return api::ConfigKind::kComputeDomainDaemonConfig;
    return common::FailedPreconditionError(
        "device daemon-0: ComputeDomain daemon claims are not supported with --imex-mode=hostManaged (the host "
        "runs nvidia-imex; this node publishes no daemon device)");
  }
  return common::NotFoundError(fmt::format("device {} is not a device of this node", device));
}

StatusOr<std::vector<kubeletplugin::PreparedDeviceGroup>> CdDeviceState::PrepareDevices(
    const kubeletplugin::ClaimView& claim) {
  const std::string& uid = claim.ref.uid;
  const std::string& claim_ns = claim.ref.ns;
  const std::string clique = clique_id();

  std::vector<kubeletplugin::PreparedDeviceGroup> checkpoint_groups;
  std::vector<CdClaimDevice> spec_devices;
  for (const api::ConfiguredResults& group : claim.groups) {
    const std::string domain_id = DomainIdOf(group.config);
    const bool is_channel = group.config.kind == api::ConfigKind::kComputeDomainChannelConfig;
    if (group.results.size() != 1) {
      return common::InvalidArgumentError(
          fmt::format("{}: expected one {} device, got {}", group.source, is_channel ? kChannelType : kDaemonType,
                      group.results.size()));
    }
    const api::AllocatedDevice& result = group.results.front();
    const std::string& device_name = result.device;
    std::optional<k8s::ComputeDomain> cd = watch_.FindByUid(domain_id);
    if (!cd) {
      return common::UnavailableError(fmt::format("ComputeDomain with UID {} is not known (yet)", domain_id));
    }

    kubeletplugin::CdiContainerEdits edits;
    std::vector<std::string> cdi_ids;
    kubeletplugin::PreparedDeviceKind kind;
    if (is_channel) {
      const int allocated_id = IdOf(device_name, kChannelType).value_or(0);
      // driverManaged domain isolation uses channel 0 whatever was allocated
      // (upstream); hostManaged and channel isolation use the allocated one.
      const int channel_id = options_.host_managed || options_.channel_isolation ? allocated_id : 0;
      if (claim_ns != cd->namespace_name()) {
        return common::FailedPreconditionError(fmt::format(
            "namespace isolation: the claim is in namespace {} but ComputeDomain {} is in namespace {}; an IMEX "
            "channel is only given to claims in its ComputeDomain's namespace",
            claim_ns, DomainString(*cd), cd->namespace_name()));
      }
      if (options_.channel_isolation) {
        const std::optional<std::int64_t> wanted = ImexChannelIdOf(*cd);
        if (!wanted) {
          return common::UnavailableError(fmt::format(
              "ComputeDomain {} has no status.imexChannelID yet (with --imex-isolation=channel the controller "
              "assigns each domain its channel)",
              DomainString(*cd)));
        }
        if (*wanted != allocated_id) {
          return common::FailedPreconditionError(fmt::format(
              "channel isolation: the claim was allocated {} but ComputeDomain {} owns channel {} "
              "(status.imexChannelID); the claim's request must select `device.attributes[\"{}\"].id == {}`, "
              "as the controller writes it into the domain's ResourceClaimTemplate",
              device_name, DomainString(*cd), *wanted, kDriverName, *wanted));
        }
      }
      if (!options_.host_managed) {
        RETURN_IF_ERROR(AddNodeLabel(domain_id));
        common::CrashPoint("prepare-after-node-label");
        if (!watch_.NodeReady(*cd, clique)) {
          return common::UnavailableError(fmt::format("the IMEX daemon of ComputeDomain {} on node {} is not Ready yet",
                                                      DomainString(*cd), options_.node_name));
        }
      }
      if (!clique.empty()) {
        if (options_.host_managed) RETURN_IF_ERROR(CheckHostImexReady());
        std::vector<int> ids;
        if (JsonString(group.config.object, "allocationMode") == "All" && !options_.host_managed &&
            !options_.channel_isolation) {
          for (int i = 0; i < kMaxImexChannelCount; ++i) ids.push_back(i);
        } else {
          ids.push_back(channel_id);
        }
        ASSIGN_OR_RETURN(edits, cdi_.ChannelEdits(ids));
        cdi_ids.push_back(CdCdi::ClaimDeviceId(uid, device_name));
      }
      kind = kubeletplugin::PreparedChannel{.id = channel_id};
    } else {
      if (options_.host_managed) {
        return common::FailedPreconditionError(
            "ComputeDomain daemon claims are not supported with --imex-mode=hostManaged");
      }
      const fs::path dir = options_.domains_dir / domain_id;
      std::error_code ec;
      fs::create_directories(dir, ec);
      if (ec) return common::InternalError(fmt::format("create {}: {}", dir.string(), ec.message()));
      fs::copy_file(options_.daemon_config_template, dir / "imexd.cfg.tmpl", fs::copy_options::overwrite_existing, ec);
      if (ec) {
        return common::InternalError(fmt::format("copy the IMEX config template {} to {}: {}",
                                                 options_.daemon_config_template.string(), dir.string(), ec.message()));
      }
      edits.env = {"CLIQUE_ID=" + clique, "COMPUTE_DOMAIN_UUID=" + cd->uid(), "COMPUTE_DOMAIN_NAME=" + cd->name(),
                   "COMPUTE_DOMAIN_NAMESPACE=" + cd->namespace_name()};
      edits.mounts.push_back({dir.string(), "/imexd", "", {"rw", "nosuid", "nodev", "bind"}});
      if (!clique.empty()) {
        ASSIGN_OR_RETURN(kubeletplugin::CdiContainerEdits cap, cdi_.ImexManagementEdits());
        edits.Append(cap);
      }
      cdi_ids = {BaseSpecDeviceId(), CdCdi::ClaimDeviceId(uid, device_name)};
      kind = kubeletplugin::PreparedDaemon{.id = IdOf(device_name, kDaemonType).value_or(0)};
    }
    spec_devices.push_back(CdClaimDevice{device_name, std::move(edits)});
    checkpoint_groups.push_back(kubeletplugin::PreparedDeviceGroup{
        .devices = {{.kind = std::move(kind), .device = Checkpointed(result, std::move(cdi_ids))}},
        .config_state = kubeletplugin::CdConfigState{.type = std::string(is_channel ? kChannelType : kDaemonType),
                                                     .compute_domain = domain_id}});
  }
  common::CrashPoint("prepare-before-cdi-write");
  // For latency splits (bench/README.md): what is left is the spec's and
  // the checkpoint's atomic writes.
  LOG_INFO(4, "claim devices resolved, writing its CDI spec", {{"claim", uid}});
  RETURN_IF_ERROR(cdi_.WriteClaimSpec(uid, spec_devices));
  common::CrashPoint("prepare-after-cdi-write");
  return checkpoint_groups;
}

Status CdDeviceState::UnprepareDevices(const kubeletplugin::RecordedClaim& claim) {
  if (!claim.view.ok()) {
    // No allocation recorded, or Prepare failed at this same step, before
    // doing anything.
    LOG_INFO(2, "claim configs do not resolve; nothing but the CDI spec to undo",
             {{"claim", claim.ref.uid}, {"err", claim.view.status()}});
  } else if (!options_.host_managed) {
    for (const api::ConfiguredResults& group : claim.view->groups) {
      if (group.config.kind != api::ConfigKind::kComputeDomainChannelConfig) continue;
      const std::string domain_id = DomainIdOf(group.config);
      if (!domain_id.empty()) RETURN_IF_ERROR(RemoveNodeLabel(domain_id));
    }
  }
  RETURN_IF_ERROR(cdi_.RemoveClaimSpec(claim.ref.uid));
  RemoveStaleDomainDirs();
  return common::OkStatus();
}

void CdDeviceState::RemoveStaleDomainDirs() {
  if (options_.host_managed) return;  // no daemon claims, no folders
  common::MutexLock lock(dirs_mu_);
  std::error_code ec;
  fs::directory_iterator it(options_.domains_dir, ec);
  if (ec) return;  // none yet, or unreadable: nothing this sweep can do
  std::vector<fs::path> stale;
  for (const fs::directory_entry& entry : it) {
    if (!entry.is_directory(ec)) continue;
    const std::string uid = entry.path().filename().string();
    std::optional<k8s::ComputeDomain> cd = watch_.FindByUid(uid);
    if (!cd || cd->deletion_timestamp()) stale.push_back(entry.path());
  }
  for (const fs::path& dir : stale) {
    fs::remove_all(dir, ec);
    if (ec) {
      LOG_ERROR("cannot remove the folder of a deleted ComputeDomain", {{"path", dir.string()}, {"err", ec.message()}});
    } else {
      LOG_INFO(2, "removed the folder of a deleted ComputeDomain", {{"path", dir.string()}});
    }
  }
}

bool CdDeviceState::AwaitRetry(const kubeletplugin::ClaimView& claim, const Status& failure,
                               std::chrono::steady_clock::time_point deadline) {
  if (failure.code() != common::StatusCode::kUnavailable) return false;
  struct Awaited {
    std::string domain;
    bool needs_ready;       // driverManaged channel: this node's daemon Ready
    bool needs_channel_id;  // channel isolation: status.imexChannelID set
  };
  std::vector<Awaited> awaited;
  for (const api::ConfiguredResults& group : claim.groups) {
    const bool is_channel = group.config.kind == api::ConfigKind::kComputeDomainChannelConfig;
    awaited.push_back({DomainIdOf(group.config), is_channel && !options_.host_managed,
                       is_channel && options_.channel_isolation});
  }
  const std::string clique = clique_id();
  auto satisfied = [&] {
    for (const Awaited& item : awaited) {
      std::optional<k8s::ComputeDomain> cd = watch_.FindByUid(item.domain);
      if (!cd) return false;
      if (item.needs_ready && !watch_.NodeReady(*cd, clique)) return false;
      if (item.needs_channel_id && !ImexChannelIdOf(*cd)) return false;
    }
    return true;
  };
  // hostManaged: when every cached condition holds already, the failure was
  // the host daemon's readiness, which no watch event announces; waiting
  // would only re-run nvidia-imex-ctl in a loop, so the kubelet's retry asks
  // again instead (upstream's behaviour).
  if (options_.host_managed && watch_.WaitFor(satisfied, std::chrono::steady_clock::now())) return false;
  return watch_.WaitFor(satisfied, deadline);
}

Status CdDeviceState::CheckHostImexReady() const {
  std::vector<std::string> argv;
  if (!options_.imex_ctl_path.empty()) {
    std::string socket = options_.imex_host_socket_path;
    if (!socket.empty() && socket.front() == '/') socket = (options_.dev_root / socket.substr(1)).string();
    argv = {options_.imex_ctl_path, "-q", "--u=" + socket};
  } else {
    std::optional<fs::path> ctl = FindImexCtl(options_.dev_root);
    if (!ctl) {
      return common::NotFoundError(fmt::format(
          "nvidia-imex-ctl not found under the driver root {} (/opt/bin, /usr/bin, /usr/sbin, /bin, /sbin): is "
          "nvidia-imex installed on this node? --imex-mode=hostManaged needs the host's nvidia-imex",
          options_.dev_root.string()));
    }
    argv = {"chroot", options_.dev_root.string(), ctl->string(), "-q", "--u=" + options_.imex_host_socket_path};
  }
  StatusOr<common::CommandOutput> ran =
      common::RunCommand({.argv = argv, .extra_env = {}, .capture_output = true}, options_.imex_ctl_timeout);
  if (!ran.ok()) {
    return common::UnavailableError(
        fmt::format("cannot run nvidia-imex-ctl (socket {}): {}", options_.imex_host_socket_path,
                    ran.status().ToString()));
  }
  if (!ran->exit.success() || ran->output.find("READY") == std::string::npos) {
    // Trimmed: the kubelet logs a multi-line error as a block.
    std::string output = ran->output;
    while (!output.empty() && std::isspace(static_cast<unsigned char>(output.back()))) output.pop_back();
    std::replace(output.begin(), output.end(), '\n', ' ');
    return common::UnavailableError(fmt::format("the host's nvidia-imex (socket {}) is not ready: {}, output: {}",
                                                options_.imex_host_socket_path, ran->exit.ToString(), output));
  }
  return common::OkStatus();
}

bool CdDeviceState::DomainInUse(const kubeletplugin::Checkpoint& checkpoint, const std::string& cd_uid) const {
  for (const auto& [uid, entry] : checkpoint.claims) {
    if (entry.state == kubeletplugin::ClaimCheckpointState::kPrepareAborted) continue;
    StatusOr<kubeletplugin::ClaimView> view = kubeletplugin::ResolveClaimView(
        {.uid = uid, .name = entry.name, .ns = entry.ns}, entry.status, kDriverName, *this);
    if (!view.ok()) continue;
    for (const api::ConfiguredResults& group : view->groups) {
      if (group.config.kind == api::ConfigKind::kComputeDomainChannelConfig && DomainIdOf(group.config) == cd_uid) {
        return true;
      }
    }
  }
  return false;
}

Status CdDeviceState::RemoveUnusedNodeLabel(const kubeletplugin::Checkpoint& checkpoint) {
  if (options_.host_managed) return common::OkStatus();
  auto node = client_.Get(k8s::resources::kNodes, "", options_.node_name);
  if (!node.ok()) return node.status();
  const std::string labelled = k8s::Object(*node).label(kComputeDomainLabel);
  if (labelled.empty() || DomainInUse(checkpoint, labelled)) return common::OkStatus();
  LOG_INFO(0, "no prepared channel claim of the node's ComputeDomain (after a reboot, or a lost unprepare); "
              "removing its node label",
           {{"node", options_.node_name}, {"domain", labelled}});
  return RemoveNodeLabel(labelled);
}

Status CdDeviceState::ReleaseUnusedNodeLabel(const kubeletplugin::Checkpoint& checkpoint,
                                             const std::set<std::string>& daemon_domains) {
  if (options_.host_managed) return common::OkStatus();
  std::set<std::string> unused;
  for (const std::string& uid : daemon_domains) {
    if (!DomainInUse(checkpoint, uid)) unused.insert(uid);
  }
  LOG_INFO(4, "unused node label check", {{"daemonDomains", daemon_domains.size()}, {"unused", unused.size()}});
  Status result = common::OkStatus();
  for (const std::string& uid : unused) {
    if (!unused_last_time_.contains(uid)) continue;
    LOG_INFO(0, "no channel claim of the ComputeDomain whose daemon runs here was prepared since the last check "
                "(its pod went before the kubelet prepared it); removing the node label",
             {{"node", options_.node_name}, {"domain", uid}});
    // RemoveNodeLabel leaves another domain's label alone.
    if (Status s = RemoveNodeLabel(uid); !s.ok()) {
      result = s;
      continue;  // still unused next time: tried again then
    }
  }
  unused_last_time_ = std::move(unused);
  return result;
}

Status CdDeviceState::AddNodeLabel(const std::string& cd_uid) {
  const auto now = std::chrono::steady_clock::now();
  if (label_seen_domain_ == cd_uid && now - label_seen_at_ < kLabelMemory) return common::OkStatus();
  // The controller labels the node when it sees the claim allocated, before
  // the kubelet asks us: the cached Node usually has the label already. Any
  // other answer is confirmed with a read (the cache may lag).
  if (watch_.CachedNodeDomainLabel() == cd_uid) {
    label_seen_domain_ = cd_uid;
    label_seen_at_ = now;
    return common::OkStatus();
  }
  auto node = client_.Get(k8s::resources::kNodes, "", options_.node_name);
  if (!node.ok()) return node.status();
  const std::string current = k8s::Object(*node).label(kComputeDomainLabel);
  if (!current.empty() && current != cd_uid) {
    return common::FailedPreconditionError(fmt::format(
        "node {} already runs ComputeDomain {} (label {}); one ComputeDomain per node", options_.node_name, current,
        kComputeDomainLabel));
  }
  if (current.empty()) {
    // A merge patch of the label alone, not an update of the Node read above:
    // the controller labels the same node for the same domain at about the
    // same time, and the kubelet writes the Node too, so an update would be
    // answered 409 and retried (seen at 72 nodes). The label was free a
    // moment ago; a domain that took it since is caught at the next prepare
    // (the node label decides which daemon runs here, and a channel claim is
    // only prepared once its own domain's daemon is Ready).
    const nlohmann::json patch = {{"metadata", {{"labels", {{std::string(kComputeDomainLabel), cd_uid}}}}}};
    auto patched = client_.Patch(k8s::resources::kNodes, "", options_.node_name, k8s::PatchType::kMerge, patch);
    if (!patched.ok()) return patched.status();
    LOG_INFO(2, "node labelled for a ComputeDomain", {{"node", options_.node_name}, {"domain", cd_uid}});
  }
  label_seen_domain_ = cd_uid;
  label_seen_at_ = now;
  return common::OkStatus();
}

Status CdDeviceState::RemoveNodeLabel(const std::string& cd_uid) {
  label_seen_domain_.clear();
  for (int attempt = 0;; ++attempt) {
    auto node = client_.Get(k8s::resources::kNodes, "", options_.node_name);
    if (!node.ok()) return node.status();
    k8s::Object view(*node);
    if (view.label(kComputeDomainLabel) != cd_uid) return common::OkStatus();
    view.RemoveLabel(kComputeDomainLabel);
    auto updated = client_.Update(k8s::resources::kNodes, "", view.json());
    if (updated.ok()) {
      LOG_INFO(2, "ComputeDomain node label removed", {{"node", options_.node_name}, {"domain", cd_uid}});
      return common::OkStatus();
    }
    if (!k8s::IsConflict(updated.status()) || attempt >= 5) return updated.status();
  }
}

}  // namespace nvdra::computedomain
