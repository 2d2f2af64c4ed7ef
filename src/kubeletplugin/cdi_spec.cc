#include "kubeletplugin/cdi_spec.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <limits>
#include <random>
#include <set>
#include <system_error>
#include <type_traits>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/unique_fd.h"

namespace nvdra::kubeletplugin {

using common::Status;
using common::StatusOr;
using nlohmann::json;

void CdiContainerEdits::Append(const CdiContainerEdits& other) {
  env.insert(env.end(), other.env.begin(), other.env.end());
  device_nodes.insert(device_nodes.end(), other.device_nodes.begin(), other.device_nodes.end());
  mounts.insert(mounts.end(), other.mounts.begin(), other.mounts.end());
  hooks.insert(hooks.end(), other.hooks.begin(), other.hooks.end());
  additional_gids.insert(additional_gids.end(), other.additional_gids.begin(),
                         other.additional_gids.end());
}

bool CdiContainerEdits::empty() const {
  return env.empty() && device_nodes.empty() && mounts.empty() && hooks.empty() &&
         additional_gids.empty();
}

namespace {

// Calls `f` on the spec's edits and each device's.
template <typename F>
bool AnyEdits(const CdiSpec& spec, F f) {
  if (f(spec.container_edits)) return true;
  return std::any_of(spec.devices.begin(), spec.devices.end(),
                     [&](const CdiDevice& d) { return f(d.container_edits); });
}

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlnum(char c) { return IsAlpha(c) || IsDigit(c); }

// CDI's vendor/class rule: letter first, letter or digit last, [A-Za-z0-9_.-] between.
bool ValidKindPart(std::string_view s) {
  if (s.empty() || !IsAlpha(s.front()) || !IsAlnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsAlnum(c) || c == '_' || c == '.' || c == '-'; });
}

// Device names: alphanumeric at both ends, [A-Za-z0-9_.:-] between.
bool ValidDeviceName(std::string_view s) {
  if (s.empty() || !IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return IsAlnum(c) || c == '_' || c == '.' || c == ':' || c == '-';
  });
}

Status ValidateEdits(const CdiContainerEdits& e, const std::string& where) {
  for (std::size_t i = 0; i < e.env.size(); ++i) {
    if (e.env[i].find('=') == std::string::npos) {
      return common::InvalidArgumentError(
          fmt::format("{}.env[{}]: {:?} has no '='", where, i, e.env[i]));
    }
  }
  for (std::size_t i = 0; i < e.device_nodes.size(); ++i) {
    const auto& dn = e.device_nodes[i];
    const std::string at = fmt::format("{}.deviceNodes[{}]", where, i);
    if (dn.path.empty() || dn.path.front() != '/') {
      return common::InvalidArgumentError(at + ".path: must be absolute");
    }
    if (!dn.type.empty() && dn.type != "c" && dn.type != "b" && dn.type != "u" &&
        dn.type != "p") {
      return common::InvalidArgumentError(at + ".type: must be one of c, b, u, p");
    }
    if (dn.permissions != "none" &&
        !std::all_of(dn.permissions.begin(), dn.permissions.end(),
                     [](char c) { return c == 'r' || c == 'w' || c == 'm'; })) {
      return common::InvalidArgumentError(at + ".permissions: must be a subset of \"rwm\"");
    }
  }
  for (std::size_t i = 0; i < e.mounts.size(); ++i) {
    if (e.mounts[i].host_path.empty() || e.mounts[i].container_path.empty()) {
      return common::InvalidArgumentError(
          fmt::format("{}.mounts[{}]: hostPath and containerPath are required", where, i));
    }
  }
  static constexpr std::array<std::string_view, 6> kHookNames = {
      "prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"};
  for (std::size_t i = 0; i < e.hooks.size(); ++i) {
    const auto& h = e.hooks[i];
    const std::string at = fmt::format("{}.hooks[{}]", where, i);
    if (std::find(kHookNames.begin(), kHookNames.end(), h.hook_name) == kHookNames.end()) {
      return common::InvalidArgumentError(
          fmt::format("{}.hookName: unknown hook {:?}", at, h.hook_name));
    }
    if (h.path.empty() || h.path.front() != '/') {
      return common::InvalidArgumentError(at + ".path: must be absolute");
    }
  }
  return common::OkStatus();
}

void PutStringList(json& out, const char* key, const std::vector<std::string>& v) {
  if (!v.empty()) out[key] = v;
}

json EditsToJson(const CdiContainerEdits& e) {
  json out = json::object();
  PutStringList(out, "env", e.env);
  if (!e.device_nodes.empty()) {
    json nodes = json::array();
    for (const auto& dn : e.device_nodes) {
      json n = {{"path", dn.path}};
      if (!dn.host_path.empty()) n["hostPath"] = dn.host_path;
      if (!dn.type.empty()) n["type"] = dn.type;
      if (dn.major != 0) n["major"] = dn.major;
      if (dn.minor != 0) n["minor"] = dn.minor;
      if (dn.file_mode) n["fileMode"] = *dn.file_mode;
      if (!dn.permissions.empty()) n["permissions"] = dn.permissions;
      if (dn.uid) n["uid"] = *dn.uid;
      if (dn.gid) n["gid"] = *dn.gid;
      nodes.push_back(std::move(n));
    }
    out["deviceNodes"] = std::move(nodes);
  }
  if (!e.hooks.empty()) {
    json hooks = json::array();
    for (const auto& h : e.hooks) {
      json j = {{"hookName", h.hook_name}, {"path", h.path}};
      PutStringList(j, "args", h.args);
      PutStringList(j, "env", h.env);
      if (h.timeout) j["timeout"] = *h.timeout;
      hooks.push_back(std::move(j));
    }
    out["hooks"] = std::move(hooks);
  }
  if (!e.mounts.empty()) {
    json mounts = json::array();
    for (const auto& m : e.mounts) {
      json j = {{"hostPath", m.host_path}, {"containerPath", m.container_path}};
      PutStringList(j, "options", m.options);
      if (!m.type.empty()) j["type"] = m.type;
      mounts.push_back(std::move(j));
    }
    out["mounts"] = std::move(mounts);
  }
  if (!e.additional_gids.empty()) out["additionalGids"] = e.additional_gids;
  return out;
}

// Rejects keys outside `allowed`: CDI loads strictly, so an unknown field is
// an error for runtimes too.
void CheckKeys(const json& j, std::initializer_list<std::string_view> allowed) {
  if (!j.is_object()) throw std::invalid_argument("expected an object");
  for (const auto& [key, value] : j.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      throw std::invalid_argument(fmt::format("unknown field {:?}", key));
    }
  }
}

// An integer field. Not json::get: it casts a float to an integer type,
// undefined behaviour out of range (the fuzzer's minor of 3.3e65), and
// wraps a negative number into an unsigned type. CDI's fields are integers
// of their Go types' range; anything else is refused naming the field.
template <typename T>
T IntegerField(const json& value, const char* key) {
  if (!value.is_number_integer()) {
    throw std::invalid_argument(fmt::format("{}: expected an integer, got {}", key, value.type_name()));
  }
  const bool fits = value.is_number_unsigned() ? std::in_range<T>(value.get<std::uint64_t>())
                                               : std::in_range<T>(value.get<std::int64_t>());
  if (!fits) {
    throw std::out_of_range(fmt::format("{}: {} is out of range ({} to {})", key, value.dump(),
                                        std::numeric_limits<T>::min(), std::numeric_limits<T>::max()));
  }
  return value.is_number_unsigned() ? static_cast<T>(value.get<std::uint64_t>())
                                    : static_cast<T>(value.get<std::int64_t>());
}

template <typename T>
constexpr bool kIsInteger = std::is_integral_v<T> && !std::is_same_v<T, bool>;

template <typename T>
T FieldAs(const json& value, const char* key) {
  if constexpr (kIsInteger<T>) {
    return IntegerField<T>(value, key);
  } else if constexpr (requires { typename T::value_type; } && !std::is_same_v<T, std::string> &&
                       kIsInteger<typename T::value_type>) {
    if (!value.is_array()) throw std::invalid_argument(fmt::format("{}: expected a list", key));
    T out;
    for (const json& item : value) out.push_back(IntegerField<typename T::value_type>(item, key));
    return out;
  } else {
    return value.get<T>();
  }
}

template <typename T>
void GetIf(const json& j, const char* key, T& out) {
  if (auto it = j.find(key); it != j.end()) out = FieldAs<T>(*it, key);
}

template <typename T>
void GetIf(const json& j, const char* key, std::optional<T>& out) {
  if (auto it = j.find(key); it != j.end()) out = FieldAs<T>(*it, key);
}

CdiContainerEdits EditsFromJson(const json& j) {
  CheckKeys(j, {"env", "deviceNodes", "hooks", "mounts", "additionalGids"});
  CdiContainerEdits e;
  GetIf(j, "env", e.env);
  GetIf(j, "additionalGids", e.additional_gids);
  if (auto it = j.find("deviceNodes"); it != j.end()) {
    for (const auto& n : *it) {
      CheckKeys(n, {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions",
                    "uid", "gid"});
      CdiDeviceNode dn;
      GetIf(n, "path", dn.path);
      GetIf(n, "hostPath", dn.host_path);
      GetIf(n, "type", dn.type);
      GetIf(n, "major", dn.major);
      GetIf(n, "minor", dn.minor);
      GetIf(n, "fileMode", dn.file_mode);
      GetIf(n, "permissions", dn.permissions);
      GetIf(n, "uid", dn.uid);
      GetIf(n, "gid", dn.gid);
      e.device_nodes.push_back(std::move(dn));
    }
  }
  if (auto it = j.find("hooks"); it != j.end()) {
    for (const auto& h : *it) {
      CheckKeys(h, {"hookName", "path", "args", "env", "timeout"});
      CdiHook hook;
      GetIf(h, "hookName", hook.hook_name);
      GetIf(h, "path", hook.path);
      GetIf(h, "args", hook.args);
      GetIf(h, "env", hook.env);
      GetIf(h, "timeout", hook.timeout);
      e.hooks.push_back(std::move(hook));
    }
  }
  if (auto it = j.find("mounts"); it != j.end()) {
    for (const auto& m : *it) {
      CheckKeys(m, {"hostPath", "containerPath", "options", "type"});
      CdiMount mount;
      GetIf(m, "hostPath", mount.host_path);
      GetIf(m, "containerPath", mount.container_path);
      GetIf(m, "options", mount.options);
      GetIf(m, "type", mount.type);
      e.mounts.push_back(std::move(mount));
    }
  }
  return e;
}

bool IsPlainFileName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos;
}

std::string RandomSuffix() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{:016x}", rng());
}

}  // namespace

std::string MinimumCdiVersion(const CdiSpec& spec) {
  // Checked newest first; the first rule that holds decides. 0.8.0, 1.0.0 and
  // 1.1.0 add nothing modelled here.
  const bool v070 = AnyEdits(spec, [](const CdiContainerEdits& e) {
    return !e.additional_gids.empty();
  });
  if (v070) return "0.7.0";
  bool v060 = !spec.annotations.empty() ||
              std::any_of(spec.devices.begin(), spec.devices.end(),
                          [](const CdiDevice& d) { return !d.annotations.empty(); });
  if (auto slash = spec.kind.find('/'); slash != std::string::npos) {
    v060 = v060 || spec.kind.find('.', slash + 1) != std::string::npos;
  }
  if (v060) return "0.6.0";
  const bool digit_name = std::any_of(spec.devices.begin(), spec.devices.end(), [](const CdiDevice& d) {
    return !d.name.empty() && IsDigit(d.name.front());
  });
  const bool host_path = AnyEdits(spec, [](const CdiContainerEdits& e) {
    return std::any_of(e.device_nodes.begin(), e.device_nodes.end(),
                       [](const CdiDeviceNode& n) { return !n.host_path.empty(); });
  });
  if (digit_name || host_path) return "0.5.0";
  const bool mount_type = AnyEdits(spec, [](const CdiContainerEdits& e) {
    return std::any_of(e.mounts.begin(), e.mounts.end(),
                       [](const CdiMount& m) { return !m.type.empty(); });
  });
  if (mount_type) return "0.4.0";
  return "0.3.0";
}

Status ValidateCdiSpec(const CdiSpec& spec) {
  const auto slash = spec.kind.find('/');
  if (slash == std::string::npos || !ValidKindPart(std::string_view(spec.kind).substr(0, slash)) ||
      !ValidKindPart(std::string_view(spec.kind).substr(slash + 1))) {
    return common::InvalidArgumentError(
        fmt::format("kind: {:?} is not <vendor>/<class>", spec.kind));
  }
  if (spec.devices.empty()) return common::InvalidArgumentError("devices: at least one is required");
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < spec.devices.size(); ++i) {
    const auto& d = spec.devices[i];
    if (!ValidDeviceName(d.name)) {
      return common::InvalidArgumentError(
          fmt::format("devices[{}].name: {:?} is not a valid CDI device name", i, d.name));
    }
    if (!names.insert(d.name).second) {
      return common::InvalidArgumentError(
          fmt::format("devices[{}].name: {:?} appears twice", i, d.name));
    }
    RETURN_IF_ERROR(ValidateEdits(d.container_edits, fmt::format("devices[{}].containerEdits", i)));
  }
  return ValidateEdits(spec.container_edits, "containerEdits");
}

json CdiSpecToJson(const CdiSpec& spec) {
  json out = {{"cdiVersion", spec.version.empty() ? MinimumCdiVersion(spec) : spec.version},
              {"kind", spec.kind}};
  if (!spec.annotations.empty()) out["annotations"] = spec.annotations;
  json devices = json::array();
  for (const auto& d : spec.devices) {
    json dj = {{"name", d.name}};
    if (!d.annotations.empty()) dj["annotations"] = d.annotations;
    dj["containerEdits"] = EditsToJson(d.container_edits);
    devices.push_back(std::move(dj));
  }
  out["devices"] = std::move(devices);
  out["containerEdits"] = EditsToJson(spec.container_edits);
  return out;
}

StatusOr<CdiSpec> CdiSpecFromJson(const json& j) {
  try {
    CheckKeys(j, {"cdiVersion", "kind", "annotations", "devices", "containerEdits"});
    CdiSpec spec;
    GetIf(j, "cdiVersion", spec.version);
    GetIf(j, "kind", spec.kind);
    GetIf(j, "annotations", spec.annotations);
    if (auto it = j.find("devices"); it != j.end()) {
      for (const auto& dj : *it) {
        CheckKeys(dj, {"name", "annotations", "containerEdits"});
        CdiDevice d;
        GetIf(dj, "name", d.name);
        GetIf(dj, "annotations", d.annotations);
        if (auto e = dj.find("containerEdits"); e != dj.end()) d.container_edits = EditsFromJson(*e);
        spec.devices.push_back(std::move(d));
      }
    }
    if (auto e = j.find("containerEdits"); e != j.end()) spec.container_edits = EditsFromJson(*e);
    return spec;
  } catch (const std::exception& e) {
    return common::InvalidArgumentError(fmt::format("CDI spec: {}", e.what()));
  }
}

std::string EncodeCdiSpec(const CdiSpec& spec) { return CdiSpecToJson(spec).dump(2) + "\n"; }

std::string CdiVendorForDriver(std::string_view driver_name) {
  return fmt::format("k8s.{}", driver_name);
}

std::string CdiKind(std::string_view vendor, std::string_view cdi_class) {
  return fmt::format("{}/{}", vendor, cdi_class);
}

std::string QualifiedCdiDeviceName(std::string_view vendor, std::string_view cdi_class,
                                   std::string_view device) {
  return fmt::format("{}/{}={}", vendor, cdi_class, device);
}

std::string TransientCdiSpecFileName(std::string_view vendor, std::string_view cdi_class,
                                     std::string_view transient_id) {
  std::string id(transient_id);
  std::replace(id.begin(), id.end(), '/', '_');
  return fmt::format("{}-{}_{}.yaml", vendor, cdi_class, id);
}

std::string ClaimCdiDeviceName(std::string_view claim_uid, std::string_view device_name) {
  return fmt::format("{}-{}", claim_uid, device_name);
}

std::string ClaimCdiSpecFileName(std::string_view vendor, std::string_view claim_uid) {
  return TransientCdiSpecFileName(vendor, kCdiClaimClass, claim_uid);
}

std::string ClaimCdiDeviceId(std::string_view vendor, std::string_view claim_uid,
                             std::string_view device_name) {
  return QualifiedCdiDeviceName(vendor, kCdiClaimClass, ClaimCdiDeviceName(claim_uid, device_name));
}

CdiSpecWriter::CdiSpecWriter(std::filesystem::path cdi_root) : root_(std::move(cdi_root)) {}

Status CdiSpecWriter::Write(const CdiSpec& spec, std::string_view file_name) const {
  if (!IsPlainFileName(file_name)) {
    return common::InvalidArgumentError(fmt::format("CDI spec file name {:?}", file_name));
  }
  RETURN_IF_ERROR(ValidateCdiSpec(spec).WithContext(fmt::format("CDI spec {}", file_name)));
  const std::string text = EncodeCdiSpec(spec);

  std::error_code ec;
  std::filesystem::create_directories(root_, ec);
  if (ec) return common::ErrnoToStatus(ec.value(), "create CDI root " + root_.string());
  // Created 0755 whatever the umask: runtimes read specs as root, but tools
  // listing CDI devices may not.
  std::filesystem::permissions(root_, std::filesystem::perms(0755), ec);

  const std::filesystem::path final_path = root_ / file_name;
  const std::filesystem::path tmp_path =
      root_ / fmt::format("{}.{}.tmp", file_name, RandomSuffix());
  common::UniqueFd fd(::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) return common::ErrnoToStatus(errno, "create " + tmp_path.string());
  // Removes the temporary file on every early return.
  struct TmpGuard {
    const std::filesystem::path* path;
    bool committed = false;
    ~TmpGuard() {
      if (!committed) ::unlink(path->c_str());
    }
  } guard{&tmp_path};

  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + written, text.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return common::ErrnoToStatus(errno, "write " + tmp_path.string());
    }
    written += static_cast<std::size_t>(n);
  }
  // fsync before rename: otherwise a crash can leave the new name pointing at
  // an empty file.
  if (::fsync(fd.get()) != 0) return common::ErrnoToStatus(errno, "fsync " + tmp_path.string());
  fd.Reset();
  if (::rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    return common::ErrnoToStatus(errno, "rename to " + final_path.string());
  }
  guard.committed = true;
  // No fsync of the directory: losing the rename takes a power loss or kernel
  // crash, that is a reboot, after which the plugins discard every claim of
  // the previous boot anyway (and /var/run/cdi is a tmpfs). The file's own
  // fsync stays, so a runtime never reads a torn spec.
  return common::OkStatus();
}

Status CdiSpecWriter::Remove(std::string_view file_name) const {
  if (!IsPlainFileName(file_name)) {
    return common::InvalidArgumentError(fmt::format("CDI spec file name {:?}", file_name));
  }
  const std::filesystem::path path = root_ / file_name;
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return common::ErrnoToStatus(errno, "remove " + path.string());
  }
  return common::OkStatus();
}

StatusOr<std::vector<std::string>> CdiSpecWriter::ListTransient(std::string_view vendor,
                                                                std::string_view cdi_class) const {
  const std::string prefix = fmt::format("{}-{}_", vendor, cdi_class);
  std::vector<std::string> ids;
  std::error_code ec;
  std::filesystem::directory_iterator it(root_, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return ids;
    return common::ErrnoToStatus(ec.value(), "list " + root_.string());
  }
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) return common::ErrnoToStatus(ec.value(), "list " + root_.string());
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    for (std::string_view ext : {".yaml", ".json"}) {
      if (name.size() > prefix.size() + ext.size() && name.ends_with(ext)) {
        ids.push_back(name.substr(prefix.size(), name.size() - prefix.size() - ext.size()));
      }
    }
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

StatusOr<int> CdiSpecWriter::RemoveClaimSpecsExcept(std::string_view vendor, const std::set<std::string>& keep) const {
  ASSIGN_OR_RETURN(std::vector<std::string> uids, ListTransient(vendor, kCdiClaimClass));
  int removed = 0;
  for (const std::string& uid : uids) {
    if (keep.contains(uid)) continue;
    RETURN_IF_ERROR(Remove(ClaimCdiSpecFileName(vendor, uid)));
    ++removed;
  }
  return removed;
}

}  // namespace nvdra::kubeletplugin
