#include "fm_state.h"

#include <fcntl.h>
#include <sys/file.h>

#include <cerrno>

#include <nlohmann/json.hpp>

#include "common/file_io.h"
#include "common/unique_fd.h"

namespace nvdra::mocknvml {
namespace {

using json = nlohmann::json;
namespace fm = nvdra::fabricmanager::abi;

Status Bad(std::string_view field, std::string_view what) {
  return common::InvalidArgumentError("fabric-manager.json: " + std::string(field) + ": " + std::string(what));
}

Status CheckKeys(const json& object, std::string_view where, std::initializer_list<std::string_view> keys) {
  for (const auto& [key, value] : object.items()) {
    bool known = false;
    for (std::string_view k : keys) known = known || key == k;
    if (!known) return Bad(std::string(where) + key, "unknown key");
  }
  return common::OkStatus();
}

StatusOr<unsigned long long> U64(const json& v, std::string_view field) {
  if (!v.is_number_unsigned()) return Bad(field, "expected an unsigned integer");
  return v.get<unsigned long long>();
}

StatusOr<unsigned> U32(const json& v, std::string_view field) {
  ASSIGN_OR_RETURN(unsigned long long wide, U64(v, field));
  if (wide > 0xffffffffULL) return Bad(field, "out of range");
  return static_cast<unsigned>(wide);
}

StatusOr<std::string> Str(const json& v, std::string_view field) {
  if (!v.is_string()) return Bad(field, "expected a string");
  return v.get<std::string>();
}

StatusOr<FmState> FromJson(const json& root) {
  if (!root.is_object()) return Bad("(top)", "expected an object");
  RETURN_IF_ERROR(CheckKeys(root, "", {"version", "running", "generation", "delayMs", "listen",
                                       "activePartitions", "nvlinkFailedGpus"}));
  FmState state;
  if (root.contains("version")) {
    ASSIGN_OR_RETURN(unsigned version, U32(root.at("version"), "version"));
    if (version != 1) return Bad("version", "expected 1");
  }
  if (root.contains("running")) {
    if (!root.at("running").is_boolean()) return Bad("running", "expected true or false");
    state.running = root.at("running").get<bool>();
  }
  if (root.contains("generation")) {
    ASSIGN_OR_RETURN(state.generation, U64(root.at("generation"), "generation"));
  }
  if (root.contains("delayMs")) {
    ASSIGN_OR_RETURN(state.delay_ms, U32(root.at("delayMs"), "delayMs"));
  }
  if (root.contains("listen")) {
    const json& listen = root.at("listen");
    if (!listen.is_object()) return Bad("listen", "expected an object");
    RETURN_IF_ERROR(CheckKeys(listen, "listen.", {"bindInterface", "port", "unixSocketPath"}));
    if (listen.contains("bindInterface")) {
      ASSIGN_OR_RETURN(state.listen.bind_interface, Str(listen.at("bindInterface"), "listen.bindInterface"));
    }
    if (listen.contains("port")) {
      ASSIGN_OR_RETURN(state.listen.port, U32(listen.at("port"), "listen.port"));
      if (state.listen.port == 0 || state.listen.port > 65535) return Bad("listen.port", "expected 1-65535");
    }
    if (listen.contains("unixSocketPath")) {
      ASSIGN_OR_RETURN(state.listen.unix_socket_path, Str(listen.at("unixSocketPath"), "listen.unixSocketPath"));
    }
  }
  if (root.contains("activePartitions")) {
    const json& ids = root.at("activePartitions");
    if (!ids.is_array()) return Bad("activePartitions", "expected an array");
    for (const json& id : ids) {
      ASSIGN_OR_RETURN(unsigned value, U32(id, "activePartitions"));
      state.active_partitions.insert(value);
    }
  }
  if (root.contains("nvlinkFailedGpus")) {
    const json& gpus = root.at("nvlinkFailedGpus");
    if (!gpus.is_object()) return Bad("nvlinkFailedGpus", "expected an object keyed by GPU UUID");
    for (const auto& [uuid, ports] : gpus.items()) {
      const std::string field = "nvlinkFailedGpus." + uuid;
      if (!ports.is_array() || ports.empty() || ports.size() > fm::FM_MAX_NUM_NVLINK_PORTS) {
        return Bad(field, "expected 1 to 64 port numbers");
      }
      std::vector<unsigned> list;
      for (const json& port : ports) {
        ASSIGN_OR_RETURN(unsigned value, U32(port, field));
        list.push_back(value);
      }
      state.nvlink_failed_gpus.emplace(uuid, std::move(list));
    }
  }
  return state;
}

Status FlockExclusive(int fd, const std::filesystem::path& path) {
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) return common::ErrnoToStatus(errno, "flock " + path.string());
  }
  return common::OkStatus();
}

}  // namespace

StatusOr<FmState> ParseFmState(std::string_view text) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    return common::InvalidArgumentError(std::string("fabric-manager.json: ") + e.what());
  }
  return FromJson(root);
}

std::string FmStateToJson(const FmState& state) {
  json root = {{"version", 1},
               {"running", state.running},
               {"generation", state.generation},
               {"delayMs", state.delay_ms},
               {"listen",
                {{"bindInterface", state.listen.bind_interface},
                 {"port", state.listen.port},
                 {"unixSocketPath", state.listen.unix_socket_path}}},
               {"activePartitions", state.active_partitions},
               {"nvlinkFailedGpus", json::object()}};
  for (const auto& [uuid, ports] : state.nvlink_failed_gpus) root["nvlinkFailedGpus"][uuid] = ports;
  return root.dump(2) + "\n";
}

FmStateStore::FmStateStore(std::filesystem::path path)
    : path_(std::move(path)), lock_path_(path_.string() + ".lock") {}

StatusOr<FmState> FmStateStore::Read() const {
  StatusOr<std::string> text = common::ReadWholeFile(path_);
  if (!text.ok()) {
    if (text.status().code() == common::StatusCode::kNotFound) return FmState{};
    return text.status();
  }
  return ParseFmState(*text);
}

StatusOr<fm::fmReturn_t> FmStateStore::Update(const std::function<fm::fmReturn_t(FmState&)>& mutate) const {
  common::UniqueFd lock(::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock) return common::ErrnoToStatus(errno, "open " + lock_path_.string());
  RETURN_IF_ERROR(FlockExclusive(lock.get(), lock_path_));
  ASSIGN_OR_RETURN(FmState state, Read());
  const fm::fmReturn_t rc = mutate(state);
  if (rc != fm::FM_ST_SUCCESS) return rc;
  // Temp file, fsync, rename: as the mock NVML's state file (mig_state.h).
  RETURN_IF_ERROR(common::ReplaceFile(path_, FmStateToJson(state), 0644, /*durable=*/true));
  return rc;
}

}  // namespace nvdra::mocknvml
