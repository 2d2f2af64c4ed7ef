#include "kubeletplugin/prepared_devices.h"

#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "common/overloaded.h"

namespace nvdra::kubeletplugin {
namespace {

using common::DataLossError;
using common::Status;
using common::StatusOr;
using Json = nlohmann::ordered_json;

using common::Overloaded;

// ---- Encoding, in the Go structs' field order

Json EncodeDevice(const CheckpointedDevice& d) {
  Json out = Json::object();
  out["Requests"] = d.device.requests;
  out["PoolName"] = d.device.pool_name;
  out["DeviceName"] = d.device.device_name;
  out["CDIDeviceIDs"] = d.device.cdi_device_ids;
  if (d.share_id) out["ShareID"] = *d.share_id;
  if (!d.metadata.is_null()) out["Metadata"] = d.metadata;
  return out;
}

Json EncodeKindBody(const PreparedDeviceKind& kind, const CheckpointedDevice& device) {
  Json body = Json::object();
  std::visit(Overloaded{
                 [&](const PreparedGpu& gpu) { body["info"] = Json{{"uuid", gpu.uuid}}; },
                 [&](const PreparedMig& mig) {
                   Json concrete = Json::object();
                   concrete["parentMinor"] = mig.parent_minor;
                   concrete["giId"] = mig.gi_id;
                   concrete["ciId"] = mig.ci_id;
                   concrete["migUUID"] = mig.mig_uuid;
                   concrete["parentUUID"] = mig.parent_uuid;
                   if (!mig.parent_pci_bus_id.empty()) concrete["parentPCIBusID"] = mig.parent_pci_bus_id;
                   body["concrete"] = std::move(concrete);
                 },
                 [&](const PreparedVfio& vfio) {
                   Json info = Json::object();
                   info["uuid"] = vfio.uuid;
                   if (!vfio.pci_bus_id.empty()) info["pciBusID"] = vfio.pci_bus_id;
                   body["info"] = std::move(info);
                 },
                 [&](const PreparedChannel& channel) { body["info"] = Json{{"id", channel.id}}; },
                 [&](const PreparedDaemon& daemon) { body["info"] = Json{{"id", daemon.id}}; },
             },
             kind);
  body["device"] = EncodeDevice(device);
  return body;
}

bool IsCdKind(const PreparedDeviceKind& kind) {
  return std::holds_alternative<PreparedChannel>(kind) || std::holds_alternative<PreparedDaemon>(kind);
}

Json EncodeEntry(const PreparedDeviceEntry& entry) {
  const std::string key(PreparedDeviceKindName(entry.kind));
  Json out = Json::object();
  // Go writes every pointer field of its entry struct, nil as null, except
  // the GPU family's omitempty "vfio".
  const std::vector<std::string_view> fields =
      IsCdKind(entry.kind) ? std::vector<std::string_view>{"channel", "daemon"}
                           : std::vector<std::string_view>{"gpu", "mig"};
  for (std::string_view field : fields) out[std::string(field)] = nullptr;
  out[key] = EncodeKindBody(entry.kind, entry.device);
  return out;
}

Json EncodeConfigState(const PreparedConfigState& state) {
  Json out = Json::object();
  std::visit(Overloaded{
                 [&](const GpuConfigState& gpu) {
                   if (!gpu.mps_control_daemon_id.empty()) out["mpsControlDaemonID"] = gpu.mps_control_daemon_id;
                   if (gpu.mps_applied) out["mpsApplied"] = *gpu.mps_applied;
                   if (gpu.time_slice_applied) out["timeSliceApplied"] = *gpu.time_slice_applied;
                   if (gpu.fabric_partition_ids) out["fabricPartitionIDs"] = *gpu.fabric_partition_ids;
                 },
                 [&](const CdConfigState& cd) {
                   out["Type"] = cd.type;
                   out["ComputeDomain"] = cd.compute_domain;
                 },
             },
             state);
  return out;
}

// ---- Decoding

// Member `key` when present and not null.
const Json* Member(const Json& object, std::string_view key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

Status WrongType(std::string_view where, std::string_view want, const Json& have) {
  return DataLossError(fmt::format("{}: want {}, have {}", where, want, have.dump().substr(0, 80)));
}

StatusOr<std::string> ReadString(const Json& object, std::string_view key, std::string_view where) {
  const Json* v = Member(object, key);
  if (v == nullptr) return std::string();
  if (!v->is_string()) return WrongType(fmt::format("{}.{}", where, key), "a string", *v);
  return v->get<std::string>();
}

StatusOr<int> ReadInt(const Json& object, std::string_view key, std::string_view where) {
  const Json* v = Member(object, key);
  if (v == nullptr) return 0;
  if (!v->is_number_integer() || v->get<std::int64_t>() < INT32_MIN || v->get<std::int64_t>() > INT32_MAX) {
    return WrongType(fmt::format("{}.{}", where, key), "a 32-bit integer", *v);
  }
  return static_cast<int>(v->get<std::int64_t>());
}

StatusOr<std::optional<bool>> ReadBool(const Json& object, std::string_view key, std::string_view where) {
  const Json* v = Member(object, key);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return WrongType(fmt::format("{}.{}", where, key), "a boolean", *v);
  return std::optional<bool>(v->get<bool>());
}

StatusOr<std::vector<std::string>> ReadStrings(const Json& object, std::string_view key, std::string_view where) {
  std::vector<std::string> out;
  const Json* v = Member(object, key);
  if (v == nullptr) return out;
  if (!v->is_array()) return WrongType(fmt::format("{}.{}", where, key), "an array of strings", *v);
  for (const Json& item : *v) {
    if (!item.is_string()) return WrongType(fmt::format("{}.{}[]", where, key), "a string", item);
    out.push_back(item.get<std::string>());
  }
  return out;
}

StatusOr<std::optional<std::vector<std::uint32_t>>> ReadPartitionIds(const Json& object, std::string_view key,
                                                                      std::string_view where) {
  const Json* v = Member(object, key);
  if (v == nullptr) return std::optional<std::vector<std::uint32_t>>();
  if (!v->is_array()) return WrongType(fmt::format("{}.{}", where, key), "an array of partition ids", *v);
  std::vector<std::uint32_t> ids;
  for (const Json& item : *v) {
    if (!item.is_number_unsigned() || item.get<std::uint64_t>() > UINT32_MAX) {
      return WrongType(fmt::format("{}.{}[]", where, key), "a partition id", item);
    }
    ids.push_back(static_cast<std::uint32_t>(item.get<std::uint64_t>()));
  }
  return std::optional(std::move(ids));
}

// An object member (absent or null: an empty object).
StatusOr<Json> ReadObject(const Json& object, std::string_view key, std::string_view where) {
  const Json* v = Member(object, key);
  if (v == nullptr) return Json::object();
  if (!v->is_object()) return WrongType(fmt::format("{}.{}", where, key), "an object", *v);
  return *v;
}

StatusOr<CheckpointedDevice> DecodeDevice(const Json& body, const std::string& where) {
  ASSIGN_OR_RETURN(const Json d, ReadObject(body, "device", where));
  const std::string at = where + ".device";
  CheckpointedDevice out;
  ASSIGN_OR_RETURN(out.device.requests, ReadStrings(d, "Requests", at));
  ASSIGN_OR_RETURN(out.device.pool_name, ReadString(d, "PoolName", at));
  ASSIGN_OR_RETURN(out.device.device_name, ReadString(d, "DeviceName", at));
  ASSIGN_OR_RETURN(out.device.cdi_device_ids, ReadStrings(d, "CDIDeviceIDs", at));
  if (const Json* share = Member(d, "ShareID")) {
    if (!share->is_string()) return WrongType(at + ".ShareID", "a string", *share);
    out.share_id = share->get<std::string>();
  }
  if (const Json* metadata = Member(d, "Metadata")) {
    if (!metadata->is_object()) return WrongType(at + ".Metadata", "an object", *metadata);
    out.metadata = *metadata;
  }
  return out;
}

StatusOr<PreparedDeviceKind> DecodeKind(std::string_view key, const Json& body, const std::string& where) {
  if (key == "mig") {
    ASSIGN_OR_RETURN(const Json c, ReadObject(body, "concrete", where));
    const std::string at = where + ".concrete";
    PreparedMig mig;
    ASSIGN_OR_RETURN(mig.parent_minor, ReadInt(c, "parentMinor", at));
    ASSIGN_OR_RETURN(mig.gi_id, ReadInt(c, "giId", at));
    ASSIGN_OR_RETURN(mig.ci_id, ReadInt(c, "ciId", at));
    ASSIGN_OR_RETURN(mig.mig_uuid, ReadString(c, "migUUID", at));
    ASSIGN_OR_RETURN(mig.parent_uuid, ReadString(c, "parentUUID", at));
    ASSIGN_OR_RETURN(mig.parent_pci_bus_id, ReadString(c, "parentPCIBusID", at));
    return PreparedDeviceKind(std::move(mig));
  }
  ASSIGN_OR_RETURN(const Json info, ReadObject(body, "info", where));
  const std::string at = where + ".info";
  if (key == "gpu") {
    PreparedGpu gpu;
    ASSIGN_OR_RETURN(gpu.uuid, ReadString(info, "uuid", at));
    return PreparedDeviceKind(std::move(gpu));
  }
  if (key == "vfio") {
    PreparedVfio vfio;
    ASSIGN_OR_RETURN(vfio.uuid, ReadString(info, "uuid", at));
    ASSIGN_OR_RETURN(vfio.pci_bus_id, ReadString(info, "pciBusID", at));
    return PreparedDeviceKind(std::move(vfio));
  }
  ASSIGN_OR_RETURN(const int id, ReadInt(info, "id", at));
  if (key == "channel") return PreparedDeviceKind(PreparedChannel{id});
  return PreparedDeviceKind(PreparedDaemon{id});
}

constexpr std::string_view kGpuFamilyKeys[] = {"gpu", "mig", "vfio"};
constexpr std::string_view kCdFamilyKeys[] = {"channel", "daemon"};

StatusOr<PreparedDeviceEntry> DecodeEntry(const Json& entry, bool cd_family, const std::string& where) {
  if (!entry.is_object()) return WrongType(where, "an object", entry);
  std::optional<PreparedDeviceEntry> out;
  auto consider = [&](std::string_view key) -> Status {
    const Json* body = Member(entry, key);
    if (body == nullptr) return common::OkStatus();
    const std::string at = fmt::format("{}.{}", where, key);
    if (!body->is_object()) return WrongType(at, "an object", *body);
    if (out) return DataLossError(fmt::format("{}: more than one device kind in one entry", where));
    ASSIGN_OR_RETURN(CheckpointedDevice device, DecodeDevice(*body, at));
    ASSIGN_OR_RETURN(PreparedDeviceKind kind, DecodeKind(key, *body, at));
    out = PreparedDeviceEntry{std::move(kind), std::move(device)};
    return common::OkStatus();
  };
  for (std::string_view key : kGpuFamilyKeys) {
    if (cd_family && Member(entry, key) != nullptr) {
      return DataLossError(fmt::format("{}: a GPU device ({}) in a compute-domain group", where, key));
    }
    RETURN_IF_ERROR(consider(key));
  }
  for (std::string_view key : kCdFamilyKeys) {
    if (!cd_family && Member(entry, key) != nullptr) {
      return DataLossError(fmt::format("{}: a compute-domain device ({}) in a GPU group", where, key));
    }
    RETURN_IF_ERROR(consider(key));
  }
  if (!out) {
    return DataLossError(fmt::format("{}: no device of a known kind (gpu, mig, vfio, channel, daemon)", where));
  }
  return std::move(*out);
}

bool IsCdFamily(const Json& group) {
  if (const Json* state = Member(group, "configState"); state != nullptr && state->is_object()) {
    if (state->contains("Type") || state->contains("ComputeDomain")) return true;
  }
  if (const Json* devices = Member(group, "devices"); devices != nullptr && devices->is_array()) {
    for (const Json& entry : *devices) {
      if (!entry.is_object()) continue;
      for (std::string_view key : kCdFamilyKeys) {
        if (Member(entry, key) != nullptr) return true;
      }
    }
  }
  return false;
}

StatusOr<PreparedDeviceGroup> DecodeGroup(const Json& group, const std::string& where) {
  if (!group.is_object()) return WrongType(where, "an object", group);
  const bool cd_family = IsCdFamily(group);
  PreparedDeviceGroup out;
  if (const Json* devices = Member(group, "devices")) {
    if (!devices->is_array()) return WrongType(where + ".devices", "an array", *devices);
    for (std::size_t i = 0; i < devices->size(); ++i) {
      ASSIGN_OR_RETURN(PreparedDeviceEntry entry,
                       DecodeEntry((*devices)[i], cd_family, fmt::format("{}.devices[{}]", where, i)));
      out.devices.push_back(std::move(entry));
    }
  }
  ASSIGN_OR_RETURN(const Json state, ReadObject(group, "configState", where));
  const std::string at = where + ".configState";
  if (cd_family) {
    CdConfigState cd;
    ASSIGN_OR_RETURN(cd.type, ReadString(state, "Type", at));
    ASSIGN_OR_RETURN(cd.compute_domain, ReadString(state, "ComputeDomain", at));
    out.config_state = std::move(cd);
  } else {
    GpuConfigState gpu;
    ASSIGN_OR_RETURN(gpu.mps_control_daemon_id, ReadString(state, "mpsControlDaemonID", at));
    ASSIGN_OR_RETURN(gpu.mps_applied, ReadBool(state, "mpsApplied", at));
    ASSIGN_OR_RETURN(gpu.time_slice_applied, ReadBool(state, "timeSliceApplied", at));
    ASSIGN_OR_RETURN(gpu.fabric_partition_ids, ReadPartitionIds(state, "fabricPartitionIDs", at));
    out.config_state = std::move(gpu);
  }
  return out;
}

}  // namespace

std::string_view PreparedDeviceKindName(const PreparedDeviceKind& kind) {
  return std::visit(Overloaded{
                        [](const PreparedGpu&) { return std::string_view("gpu"); },
                        [](const PreparedMig&) { return std::string_view("mig"); },
                        [](const PreparedVfio&) { return std::string_view("vfio"); },
                        [](const PreparedChannel&) { return std::string_view("channel"); },
                        [](const PreparedDaemon&) { return std::string_view("daemon"); },
                    },
                    kind);
}

std::vector<PreparedDevice> KubeletDevices(const std::vector<PreparedDeviceGroup>& groups) {
  std::vector<PreparedDevice> out;
  for (const PreparedDeviceGroup& group : groups) {
    for (const PreparedDeviceEntry& entry : group.devices) {
      out.push_back(entry.device.device);
      out.back().share_id = entry.device.share_id;
    }
  }
  return out;
}

nlohmann::ordered_json EncodePreparedGroups(const std::vector<PreparedDeviceGroup>& groups) {
  Json out = Json::array();
  for (const PreparedDeviceGroup& group : groups) {
    Json devices = Json::array();
    for (const PreparedDeviceEntry& entry : group.devices) devices.push_back(EncodeEntry(entry));
    Json encoded = Json::object();
    encoded["devices"] = std::move(devices);
    encoded["configState"] = EncodeConfigState(group.config_state);
    out.push_back(std::move(encoded));
  }
  return out;
}

StatusOr<std::vector<PreparedDeviceGroup>> DecodePreparedGroups(const nlohmann::ordered_json& value,
                                                                std::string_view where) {
  std::vector<PreparedDeviceGroup> out;
  if (value.is_null()) return out;
  if (!value.is_array()) return WrongType(where, "an array", value);
  for (std::size_t i = 0; i < value.size(); ++i) {
    ASSIGN_OR_RETURN(PreparedDeviceGroup group, DecodeGroup(value[i], fmt::format("{}[{}]", where, i)));
    out.push_back(std::move(group));
  }
  return out;
}

}  // namespace nvdra::kubeletplugin
