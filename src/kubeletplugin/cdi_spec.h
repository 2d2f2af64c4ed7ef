#pragma once

// Container Device Interface (CDI) specs as both kubelet plugins write them:
// the spec model (the fields of tags.cncf.io/container-device-interface
// specs-go that our drivers use), the minimum `cdiVersion` a spec needs (the
// CDI library's MinimumRequiredVersion rule), JSON encoding with CDI's field
// names, the naming helpers for per-claim ("transient") specs, and
// CdiSpecWriter, which owns the spec files of one CDI root.
//
// Encoding: specs are written as JSON into `.yaml` files. JSON is valid YAML,
// the runtimes' CDI loader (sigs.k8s.io/yaml) reads it, and it needs no YAML
// emitter; the `.yaml` name keeps upstream's file names, so a plugin replacing
// the Go driver removes the specs that driver wrote.
//
// Thread-safety: the model types are plain values (thread-compatible);
// CdiSpecWriter is immutable after construction and its calls on different
// file names may run concurrently.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"

namespace nvdra::kubeletplugin {

// A device node to create in the container (`containerEdits.deviceNodes[]`).
// Zero major/minor and empty strings are left out of the JSON, as CDI's Go
// types do (so a minor of 0 reads back as 0 anyway).
struct CdiDeviceNode {
  std::string path;  // in the container; required
  std::string host_path;  // empty: same as `path` (needs cdiVersion >= 0.5.0 when set)
  std::string type;  // "c", "b", "u", "p" or empty (the runtime stats host_path)
  std::int64_t major = 0;
  std::int64_t minor = 0;
  std::optional<std::uint32_t> file_mode;  // permission bits, e.g. 0666
  std::string permissions;  // subset of "rwm"; empty means "rwm"
  std::optional<std::uint32_t> uid;
  std::optional<std::uint32_t> gid;

  friend bool operator==(const CdiDeviceNode&, const CdiDeviceNode&) = default;
};

// A mount (`containerEdits.mounts[]`).
struct CdiMount {
  std::string host_path;
  std::string container_path;
  std::string type;  // needs cdiVersion >= 0.4.0 when set
  std::vector<std::string> options;

  friend bool operator==(const CdiMount&, const CdiMount&) = default;
};

// An OCI hook (`containerEdits.hooks[]`).
struct CdiHook {
  std::string hook_name;  // prestart, createRuntime, createContainer, startContainer, poststart, poststop
  std::string path;  // absolute
  std::vector<std::string> args;  // args[0] is the program name, as in OCI
  std::vector<std::string> env;
  std::optional<int> timeout;

  friend bool operator==(const CdiHook&, const CdiHook&) = default;
};

inline constexpr std::string_view kCdiCreateContainerHook = "createContainer";

// `containerEdits`, of a spec or of one device.
struct CdiContainerEdits {
  std::vector<std::string> env;  // "NAME=value"
  std::vector<CdiDeviceNode> device_nodes;
  std::vector<CdiMount> mounts;
  std::vector<CdiHook> hooks;
  std::vector<std::uint32_t> additional_gids;  // needs cdiVersion >= 0.7.0 when non-empty

  // Appends every list of `other` to this one's (CDI's ContainerEdits.Append).
  void Append(const CdiContainerEdits& other);
  [[nodiscard]] bool empty() const;

  friend bool operator==(const CdiContainerEdits&, const CdiContainerEdits&) = default;
};

struct CdiDevice {
  std::string name;  // unique in the spec; a leading digit needs cdiVersion >= 0.5.0
  std::map<std::string, std::string> annotations;  // needs >= 0.6.0 when non-empty
  CdiContainerEdits container_edits;

  friend bool operator==(const CdiDevice&, const CdiDevice&) = default;
};

struct CdiSpec {
  // Empty: written as MinimumCdiVersion(*this), which is what runtimes with
  // older CDI libraries can still read.
  std::string version;
  std::string kind;  // "<vendor>/<class>"
  std::map<std::string, std::string> annotations;  // needs >= 0.6.0 when non-empty
  std::vector<CdiDevice> devices;  // at least one
  CdiContainerEdits container_edits;  // applied when any device of the spec is requested

  friend bool operator==(const CdiSpec&, const CdiSpec&) = default;
};

// The lowest CDI version that can express `spec` ("0.3.0" ... "0.7.0"), by the
// rules of specs-go MinimumRequiredVersion for the fields modelled here.
std::string MinimumCdiVersion(const CdiSpec& spec);

// Checks what runtimes reject when loading: kind syntax, at least one device,
// device name syntax and uniqueness, "=" in env entries, absolute device and
// hook paths, known hook names, mounts with both paths, "rwm" permissions.
// kInvalidArgument naming the field ("devices[1].name: ...").
[[nodiscard]] common::Status ValidateCdiSpec(const CdiSpec& spec);

// The spec as CDI JSON; `cdiVersion` is spec.version or the minimum.
nlohmann::json CdiSpecToJson(const CdiSpec& spec);
// Parses what CdiSpecToJson writes (and any CDI JSON using the modelled
// fields). kInvalidArgument on malformed input or unknown fields.
common::StatusOr<CdiSpec> CdiSpecFromJson(const nlohmann::json& json);
// CdiSpecToJson as text, indented, ending in a newline.
std::string EncodeCdiSpec(const CdiSpec& spec);

// --- Names ----------------------------------------------------------------------------
// The vendor our drivers use: "k8s.<driver name>", e.g. "k8s.gpu.nvidia.com".
std::string CdiVendorForDriver(std::string_view driver_name);
// "<vendor>/<class>".
std::string CdiKind(std::string_view vendor, std::string_view cdi_class);
// "<vendor>/<class>=<device>": the id the kubelet passes to the runtime.
std::string QualifiedCdiDeviceName(std::string_view vendor, std::string_view cdi_class,
                                   std::string_view device);
// "<vendor>-<class>_<transient id>.yaml" with '/' in the id replaced by '_'
// (CDI's GenerateTransientSpecName plus the extension).
std::string TransientCdiSpecFileName(std::string_view vendor, std::string_view cdi_class,
                                     std::string_view transient_id);

// Per-claim specs: class "claim", transient id the claim UID, device
// "<claimUID>-<deviceName>".
inline constexpr std::string_view kCdiClaimClass = "claim";
std::string ClaimCdiDeviceName(std::string_view claim_uid, std::string_view device_name);
std::string ClaimCdiSpecFileName(std::string_view vendor, std::string_view claim_uid);
std::string ClaimCdiDeviceId(std::string_view vendor, std::string_view claim_uid,
                             std::string_view device_name);

// The spec files in one CDI root (e.g. /var/run/cdi).
// Owns: nothing but the root's path; the files it writes belong to the root.
// Thread-safety: immutable; calls on distinct file names may run concurrently.
class CdiSpecWriter {
 public:
  explicit CdiSpecWriter(std::filesystem::path cdi_root);

  const std::filesystem::path& root() const { return root_; }

  // Validates `spec` and writes it to <root>/<file_name> atomically: a
  // temporary "<file_name>.<random>.tmp" in the root (ignored by runtimes:
  // not .json/.yaml), fsync, rename over any old file, so a runtime never
  // reads half a spec and a crash leaves the old or the new one (the root is
  // not fsynced: see Write). Creates the root (0755) when missing. `file_name` is a plain name.
  // kInvalidArgument for a bad spec or name; errno-mapped codes for I/O.
  [[nodiscard]] common::Status Write(const CdiSpec& spec, std::string_view file_name) const;

  // Removes <root>/<file_name>. A missing file (or root) is not an error.
  [[nodiscard]] common::Status Remove(std::string_view file_name) const;

  // The transient ids of the specs "<vendor>-<class>_<id>.yaml|.json" in the
  // root, sorted (for a claim class: the claim UIDs with a spec). A missing
  // root is an empty list.
  [[nodiscard]] common::StatusOr<std::vector<std::string>> ListTransient(
      std::string_view vendor, std::string_view cdi_class) const;
  // Removes the claim specs of `vendor` whose claim UID is not in `keep` (a
  // checkpoint's claims); returns how many went.
  [[nodiscard]] common::StatusOr<int> RemoveClaimSpecsExcept(std::string_view vendor,
                                                             const std::set<std::string>& keep) const;

 private:
  std::filesystem::path root_;
};

}  // namespace nvdra::kubeletplugin
