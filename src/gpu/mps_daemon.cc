#include "gpu/mps_daemon.h"

#include <sys/mount.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <openssl/evp.h>

#include "common/crash_point.h"
#include "common/file_io.h"
#include "common/json_fields.h"
#include "common/log.h"
#include "k8s/client.h"
#include "k8s/object_template.h"
#include "k8s/rest_list_watch.h"

namespace nvdra::gpu {

using common::Status;
using common::StatusOr;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

Status MountTmpfs(const fs::path& dir) {
  const std::string options = "size=" + DefaultShmSize();
  if (::mount("shm", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RELATIME, options.c_str()) != 0) {
    return common::InternalError(
        fmt::format("mounting a tmpfs at {}: {} (the plugin needs CAP_SYS_ADMIN, as the chart gives it)", dir.string(),
                    std::strerror(errno)));
  }
  return common::OkStatus();
}

Status UnmountTmpfs(const fs::path& dir) {
  // EINVAL: not a mount point (never mounted, or unmounted before a crash).
  if (::umount2(dir.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT) {
    return common::InternalError(fmt::format("unmounting {}: {}", dir.string(), std::strerror(errno)));
  }
  return common::OkStatus();
}

// Whether `dir` is a mount point: a different device than its parent.
bool IsMountPoint(const fs::path& dir) {
  struct stat self{};
  struct stat parent{};
  if (::stat(dir.c_str(), &self) != 0 || ::stat(dir.parent_path().c_str(), &parent) != 0) return false;
  return self.st_dev != parent.st_dev;
}

// The GPUs a daemon set to EXCLUSIVE_PROCESS, one UUID per line.
constexpr std::string_view kGpusFile = "gpus";

Status WriteGpus(const fs::path& root, const std::vector<std::string>& gpu_uuids) {
  const fs::path path = root / kGpusFile;
  const fs::path temp = root / (std::string(kGpusFile) + ".tmp");
  {
    std::ofstream out(temp, std::ios::trunc);
    for (const std::string& uuid : gpu_uuids) out << uuid << '\n';
    if (!out.flush()) return common::InternalError(fmt::format("writing {}", temp.string()));
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) return common::InternalError(fmt::format("renaming {}: {}", temp.string(), ec.message()));
  return common::OkStatus();
}

std::vector<std::string> ReadGpus(const fs::path& root) {
  std::vector<std::string> uuids;
  std::ifstream in(root / kGpusFile);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) uuids.push_back(line);
  }
  return uuids;
}

}  // namespace

std::string DefaultShmSize(const fs::path& meminfo) {
  std::ifstream in(meminfo);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::istringstream fields(line.substr(9));
    std::uint64_t total = 0;
    std::string unit;
    if (!(fields >> total)) break;
    fields >> unit;
    return fmt::format("{}{}", total / 2, unit.empty() ? "" : unit.substr(0, 1));
  }
  return "65536k";
}

// --- ApiMpsDeployments ---

ApiMpsDeployments::ApiMpsDeployments(k8s::Client& client, std::string ns)
    : client_(client), namespace_(std::move(ns)) {}

ApiMpsDeployments::~ApiMpsDeployments() {
  Cancel();
  if (informer_) informer_->Stop();
}

StatusOr<std::unique_ptr<ApiMpsDeployments>> ApiMpsDeployments::Start(k8s::Client& client, std::string ns,
                                                                      std::chrono::seconds sync_timeout) {
  std::unique_ptr<ApiMpsDeployments> api(new ApiMpsDeployments(client, ns));
  ApiMpsDeployments* self = api.get();
  k8s::cache::InformerOptions options;
  options.description = "apps/v1/deployments (MPS control daemons in " + ns + ")";
  options.label_selector = "app";
  api->informer_ = std::make_unique<k8s::cache::Informer>(
      std::make_unique<k8s::RestListWatch>(client, k8s::resources::kDeployments, ns), options);
  api->informer_->AddEventHandler(k8s::cache::EventHandler{
      .on_add = [self](const k8s::cache::ObjectPtr&) { self->Notify(); },
      .on_update = [self](const k8s::cache::ObjectPtr&, const k8s::cache::ObjectPtr&) { self->Notify(); },
      .on_delete = [self](const k8s::cache::ObjectPtr&) { self->Notify(); },
      .needs_old_object = false,
  });
  api->informer_->Start();
  if (!api->informer_->WaitForSyncUntil(k8s::workqueue::RealClock().Now() + sync_timeout)) {
    return common::DeadlineExceededError(fmt::format(
        "the Deployment watch in namespace {} did not sync within {} s: MPSSupport needs the plugin's role to "
        "get, list, watch, create and delete deployments.apps there (the chart grants it with the gate on)",
        ns, sync_timeout.count()));
  }
  return api;
}

void ApiMpsDeployments::Notify() {
  { common::MutexLock lock(mu_); }
  changed_.notify_all();
}

void ApiMpsDeployments::Cancel() {
  {
    common::MutexLock lock(mu_);
    cancelled_ = true;
  }
  changed_.notify_all();
}

Status ApiMpsDeployments::Create(const json& deployment) {
  k8s::WriteOptions options;
  options.field_manager = "gpu-kubelet-plugin";
  auto created = client_.Create(k8s::resources::kDeployments, namespace_, deployment, options);
  if (!created.ok() && !k8s::IsAlreadyExists(created.status())) {
    return created.status().WithContext(
        fmt::format("creating Deployment {}/{}", namespace_, common::JsonString(deployment, {"metadata", "name"})));
  }
  return common::OkStatus();
}

Status ApiMpsDeployments::Delete(const std::string& name) {
  k8s::DeleteOptions options;
  options.propagation_policy = "Foreground";
  auto deleted = client_.Delete(k8s::resources::kDeployments, namespace_, name, options);
  if (!deleted.ok() && !k8s::IsNotFound(deleted.status())) {
    return deleted.status().WithContext(fmt::format("deleting Deployment {}/{}", namespace_, name));
  }
  return common::OkStatus();
}

bool ApiMpsDeployments::Exists(const std::string& name) const {
  return informer_->store().Get(namespace_ + "/" + name) != nullptr;
}

bool ApiMpsDeployments::Ready(const std::string& name) const {
  k8s::cache::ObjectPtr deployment = informer_->store().Get(namespace_ + "/" + name);
  if (!deployment) return false;
  const json& ready = common::JsonMember(*deployment, {"status", "readyReplicas"});
  return ready.is_number_integer() && ready.get<std::int64_t>() >= 1;
}

std::vector<std::string> ApiMpsDeployments::NamesOnNode(const std::string& node) const {
  std::vector<std::string> names;
  for (const k8s::cache::ObjectPtr& deployment : informer_->store().List()) {
    const std::string name = common::JsonString(*deployment, {"metadata", "name"});
    if (name.rfind(kMpsDaemonNamePrefix, 0) != 0) continue;
    if (common::JsonString(*deployment, {"spec", "template", "spec", "nodeName"}) != node) continue;
    names.push_back(name);
  }
  return names;
}

bool ApiMpsDeployments::AllReady(const std::vector<std::string>& names) const {
  return std::all_of(names.begin(), names.end(), [this](const std::string& name) { return Ready(name); });
}

bool ApiMpsDeployments::WaitReady(const std::vector<std::string>& names,
                                  std::chrono::steady_clock::time_point deadline) {
  common::MutexLock lock(mu_);
  while (!cancelled_) {
    if (AllReady(names)) return true;
    if (changed_.wait_until(lock.native(), deadline) == std::cv_status::timeout) return AllReady(names);
  }
  return false;
}

// --- MpsDaemons ---

MpsDaemons::MpsDaemons(MpsOptions options, MpsDeployments& deployments, ComputePolicy& compute_policy)
    : options_(std::move(options)), deployments_(deployments), compute_policy_(compute_policy) {}

std::string MpsDaemons::DaemonId(const std::string& claim_uid, const std::vector<std::string>& device_uuids) {
  return fmt::format("{}-{}", claim_uid, Sha256Hex(fmt::format("{}", fmt::join(device_uuids, ","))).substr(0, 5));
}

StatusOr<json> MpsDaemons::RenderDeployment(const MpsDaemonSpec& spec, const std::string& id) const {
  ASSIGN_OR_RETURN(const auto limits, api::MpsPinnedMemoryLimits(spec.settings, spec.device_uuids, "the config"));
  std::vector<std::string> pairs;
  for (const auto& [uuid, limit] : limits) pairs.push_back(uuid + "=" + limit);
  const fs::path root = RootOf(id);
  // A driver root with its own /dev/shm is entered with chroot by the
  // template's script, so the tmpfs goes there (upstream's rule).
  std::error_code ec;
  const bool chroot_shm = fs::exists(options_.container_driver_root / "dev" / "shm", ec);
  const k8s::TemplateValues values{
      {"NAMESPACE", options_.driver_namespace},
      {"NAME", DeploymentName(id)},
      {"NODE_NAME", options_.node_name},
      {"IMAGE_NAME", options_.image_name},
      {"SERVICE_ACCOUNT", options_.service_account_name.empty()
                              ? ""
                              : "serviceAccountName: " + k8s::YamlQuoted(options_.service_account_name)},
      {"IMAGE_PULL_SECRETS", k8s::ImagePullSecretsLine(options_.image_pull_secrets)},
      {"IMAGE_PULL_POLICY",
       options_.image_pull_policy.empty() ? "" : "imagePullPolicy: " + k8s::YamlQuoted(options_.image_pull_policy)},
      {"FEATURE_GATES_ENV", k8s::FeatureGatesEnvLine(options_.feature_gates)},
      {"CUDA_VISIBLE_DEVICES", fmt::format("{}", fmt::join(spec.device_uuids, ","))},
      {"MPS_DAEMON_FLAGS", spec.settings.multi_user ? "-M" : ""},
      {"MPS_DEFAULT_ACTIVE_THREAD_PERCENTAGE",
       spec.settings.default_active_thread_percentage ? std::to_string(*spec.settings.default_active_thread_percentage)
                                                      : ""},
      {"MPS_DEFAULT_PINNED_DEVICE_MEMORY_LIMITS", fmt::format("{}", fmt::join(pairs, " "))},
      {"SHM_MOUNT_PATH", chroot_shm ? "/driver-root/dev/shm" : "/dev/shm"},
      {"HOST_DRIVER_ROOT", options_.host_driver_root},
      {"SHM_DIRECTORY", (root / "shm").string()},
      {"PIPE_DIRECTORY", (root / "pipe").string()},
      {"LOG_DIRECTORY", (root / "log").string()},
  };
  return k8s::RenderTemplate(kMpsDaemonTemplate, options_.template_text, values);
}

StatusOr<std::string> MpsDaemons::Start(const MpsDaemonSpec& spec) {
  const std::string id = DaemonId(spec.claim_uid, spec.device_uuids);
  const std::string name = DeploymentName(id);
  if (deployments_.Exists(name)) return id;  // started before (a retry, or before a restart)
  if (spec.settings.multi_user && !spec.gpus_without_volta.empty()) {
    return common::InvalidArgumentError(fmt::format(
        "sharing.mpsConfig.multiUser: MPS multi-user mode needs GPUs of compute capability 7.0 (Volta) or newer; "
        "{} {} older; leave multiUser out or request newer GPUs",
        fmt::join(spec.gpus_without_volta, ", "), spec.gpus_without_volta.size() == 1 ? "is" : "are"));
  }
  ASSIGN_OR_RETURN(json deployment, RenderDeployment(spec, id));
  LOG_INFO(2, "starting an MPS control daemon",
           {{"claim", spec.claim_uid}, {"deployment", name}, {"devices", fmt::format("{}", fmt::join(spec.device_uuids, ","))}});

  const fs::path root = RootOf(id);
  for (const char* dir : {"shm", "pipe", "log"}) {
    std::error_code ec;
    fs::create_directories(root / dir, ec);
    if (ec) return common::InternalError(fmt::format("creating {}: {}", (root / dir).string(), ec.message()));
  }
  RETURN_IF_ERROR(WriteGpus(root, spec.gpu_uuids));
  if (!IsMountPoint(root / "shm")) {
    RETURN_IF_ERROR(options_.mount_shm ? options_.mount_shm(root / "shm") : MountTmpfs(root / "shm"));
  }
  common::CrashPoint("mps-after-folders");
  for (const std::string& gpu : spec.gpu_uuids) {
    RETURN_IF_ERROR(compute_policy_.SetComputeMode(gpu, ComputeMode::kExclusiveProcess));
  }
  common::CrashPoint("mps-after-compute-mode");
  RETURN_IF_ERROR(deployments_.Create(deployment));
  common::CrashPoint("mps-after-deployment");
  return id;
}

bool MpsDaemons::Ready(const std::string& id) const { return deployments_.Ready(DeploymentName(id)); }

bool MpsDaemons::WaitReady(const std::vector<std::string>& ids, std::chrono::steady_clock::time_point deadline) {
  std::vector<std::string> names;
  for (const std::string& id : ids) names.push_back(DeploymentName(id));
  return deployments_.WaitReady(names, deadline);
}

Status MpsDaemons::Stop(const std::string& id) {
  const fs::path root = RootOf(id);
  std::error_code ec;
  const bool has_root = fs::exists(root, ec);
  const std::string name = DeploymentName(id);
  if (!has_root && !deployments_.Exists(name)) return common::OkStatus();
  LOG_INFO(2, "stopping an MPS control daemon", {{"deployment", name}});
  RETURN_IF_ERROR(deployments_.Delete(name));
  if (!has_root) return common::OkStatus();
  // upstream leaves the GPUs in EXCLUSIVE_PROCESS only until here too.
  for (const std::string& gpu : ReadGpus(root)) {
    RETURN_IF_ERROR(compute_policy_.SetComputeMode(gpu, ComputeMode::kDefault));
  }
  RETURN_IF_ERROR(options_.unmount_shm ? options_.unmount_shm(root / "shm") : UnmountTmpfs(root / "shm"));
  fs::remove_all(root, ec);
  if (ec) return common::InternalError(fmt::format("removing {}: {}", root.string(), ec.message()));
  return common::OkStatus();
}

StatusOr<int> MpsDaemons::Sweep(const std::set<std::string>& claim_uids) {
  // A daemon's id starts with its claim's UID (36 characters) and a dash.
  const auto claim_of = [](std::string_view id) { return std::string(id.substr(0, std::min<std::size_t>(id.size(), 36))); };
  std::set<std::string> leftovers;
  std::error_code ec;
  if (fs::is_directory(options_.control_files_root, ec)) {
    for (const fs::directory_entry& entry : fs::directory_iterator(options_.control_files_root, ec)) {
      const std::string id = entry.path().filename().string();
      if (!claim_uids.contains(claim_of(id))) leftovers.insert(id);
    }
  }
  for (const std::string& name : deployments_.NamesOnNode(options_.node_name)) {
    const std::string id = name.substr(kMpsDaemonNamePrefix.size());
    if (!claim_uids.contains(claim_of(id))) leftovers.insert(id);
  }
  int removed = 0;
  Status first_error = common::OkStatus();
  for (const std::string& id : leftovers) {
    LOG_INFO(0, "removing an MPS control daemon no prepared claim holds", {{"id", id}});
    if (Status s = Stop(id); !s.ok()) {
      if (first_error.ok()) first_error = s;
      continue;
    }
    ++removed;
  }
  if (!first_error.ok()) return first_error;
  return removed;
}

kubeletplugin::CdiContainerEdits MpsDaemons::CdiEdits(const std::string& id) const {
  const fs::path root = RootOf(id);
  kubeletplugin::CdiContainerEdits edits;
  edits.env.push_back(fmt::format("CUDA_MPS_PIPE_DIRECTORY={}", kMpsPipeContainerPath));
  const std::vector<std::string> options{"rw", "nosuid", "nodev", "bind"};
  edits.mounts.push_back(kubeletplugin::CdiMount{
      .host_path = (root / "shm").string(), .container_path = "/dev/shm", .type = "", .options = options});
  edits.mounts.push_back(kubeletplugin::CdiMount{.host_path = (root / "pipe").string(),
                                                 .container_path = std::string(kMpsPipeContainerPath),
                                                 .type = "",
                                                 .options = options});
  return edits;
}

}  // namespace nvdra::gpu
