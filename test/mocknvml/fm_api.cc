// The mock Fabric Manager library (libnvfm.so.1): the client side of FM's API,
// answering from the node's profile ("fabricManager" section: the partition
// table) and the FM state file (fm_state.h: whether the daemon runs, where it
// listens, its delay, restarts, active partitions, failed NVLinks), so every
// process of a node sees one Fabric Manager.
//
// Contracts and codes are nv_fm_agent.h's; where the mock picks a code the
// header leaves open, the comment says so. README.md ("Fabric Manager") lists
// the behaviour.
//
// Handles are numbers, never addresses: a handle of a closed connection, or a
// made-up one, is looked up and answered FM_ST_BADPARAM, never dereferenced.
//
// Thread-safety: thread-safe. One mutex guards the library's init flag and the
// connection table; it is not held while a call sleeps (the simulated delay)
// or takes the state file's lock.

#include <arpa/inet.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "fm_exports.h"
#include "fm_profile.h"
#include "fm_state.h"
#include "profile.h"

namespace nvdra::mocknvml {
namespace {

namespace fm = nvdra::fabricmanager::abi;
using fm::fmReturn_t;

// The node a connection reached: its partition table and state file, as they
// were at fmConnect.
struct Node {
  Profile profile;
  FmSpec spec;
  FmStateStore store;
};

struct ConnectionRecord {
  std::shared_ptr<const Node> node;
  unsigned long long generation = 0;  // FM's generation at fmConnect
};

// Where fmConnect was asked to go.
struct Target {
  bool unix_socket = false;
  std::string path;  // Unix socket
  std::string host;  // TCP
  unsigned port = fm::FM_CMD_PORT_NUMBER;
};

void SleepMs(unsigned ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// "a.b.c.d" or "a.b.c.d:port", as the header describes addressInfo for TCP.
// FM_ST_BADPARAM for anything else ("provided IP Address/format is invalid").
fmReturn_t ParseTcp(const std::string& address, Target& target) {
  const std::size_t colon = address.find(':');
  target.host = address.substr(0, colon);
  in_addr parsed{};
  if (::inet_pton(AF_INET, target.host.c_str(), &parsed) != 1) return fm::FM_ST_BADPARAM;
  if (colon == std::string::npos) return fm::FM_ST_SUCCESS;
  const std::string port = address.substr(colon + 1);
  char* end = nullptr;
  const unsigned long value = std::strtoul(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || value == 0 || value > 65535) return fm::FM_ST_BADPARAM;
  target.port = static_cast<unsigned>(value);
  return fm::FM_ST_SUCCESS;
}

// Reads the connect parameters of either version the header defines.
fmReturn_t ParseTarget(const fm::fmConnectParams_t* params, Target& target, unsigned& timeout_ms) {
  fm::nvFmApiAddrTypes type = fm::NV_FM_API_ADDR_TYPE_UNKNOWN;
  const char* info = params->addressInfo;
  if (params->version == fm::fmConnectParams_version) {
    type = params->addressType;
    timeout_ms = params->timeoutMs;
    if (type == fm::NV_FM_API_ADDR_TYPE_UNKNOWN) {
      type = params->addressIsUnixSocket != 0 ? fm::NV_FM_API_ADDR_TYPE_UNIX : fm::NV_FM_API_ADDR_TYPE_INET;
    }
  } else if (params->version == fm::fmConnectV1Params_version1) {
    // A v1 caller passed the shorter struct: read only its fields.
    const auto* v1 = reinterpret_cast<const fm::fmConnectParams_v1*>(params);
    type = v1->addressIsUnixSocket != 0 ? fm::NV_FM_API_ADDR_TYPE_UNIX : fm::NV_FM_API_ADDR_TYPE_INET;
    timeout_ms = v1->timeoutMs;
    info = v1->addressInfo;
  } else {
    return fm::FM_ST_VERSION_MISMATCH;
  }
  const std::string address(info, strnlen(info, fm::FM_MAX_STR_LENGTH));
  if (address.empty()) return fm::FM_ST_BADPARAM;
  switch (type) {
    case fm::NV_FM_API_ADDR_TYPE_UNIX:
      target.unix_socket = true;
      target.path = address;
      return fm::FM_ST_SUCCESS;
    case fm::NV_FM_API_ADDR_TYPE_INET:
      return ParseTcp(address, target);
    default:
      // VSOCK: the mock FM never listens on one; not reachable.
      return fm::FM_ST_CONNECTION_NOT_VALID;
  }
}

bool Listens(const FmListen& listen, const Target& target) {
  // FM_CMD_UNIX_SOCKET_PATH set: FM serves the socket and not TCP.
  if (!listen.unix_socket_path.empty()) return target.unix_socket && target.path == listen.unix_socket_path;
  return !target.unix_socket && target.host == listen.bind_interface && target.port == listen.port;
}

// The node's profile and FM partition table, found as the mock NVML finds its
// profile (FindProfilePath, by this library's location), and its state file.
std::shared_ptr<const Node> LoadNode() {
  StatusOr<std::filesystem::path> path = FindProfilePath();
  if (!path.ok()) {
    std::fprintf(stderr, "mock libnvfm: no profile: %s\n", path.status().message().c_str());
    return nullptr;
  }
  StatusOr<Profile> profile = LoadProfile(*path);
  if (!profile.ok()) {
    std::fprintf(stderr, "mock libnvfm: %s\n", profile.status().message().c_str());
    return nullptr;
  }
  StatusOr<std::optional<FmSpec>> spec = LoadFmSpec(*profile);
  if (!spec.ok()) {
    std::fprintf(stderr, "mock libnvfm: %s\n", spec.status().message().c_str());
    return nullptr;
  }
  if (!spec->has_value()) {
    std::fprintf(stderr, "mock libnvfm: profile %s has no fabricManager section: no Fabric Manager on this node\n",
                 path->c_str());
    return nullptr;
  }
  const char* env = std::getenv("MOCK_NVFM_STATE");
  std::filesystem::path state = env != nullptr && *env != '\0' ? std::filesystem::path(env)
                                                               : path->parent_path() / "fabric-manager.json";
  return std::make_shared<const Node>(Node{std::move(*profile), std::move(**spec), FmStateStore(std::move(state))});
}

StatusOr<FmState> ReadState(const Node& node) {
  StatusOr<FmState> state = node.store.Read();
  if (!state.ok()) std::fprintf(stderr, "mock libnvfm: %s\n", state.status().message().c_str());
  return state;
}

class FmContext {
 public:
  static FmContext& Get() {
    static FmContext context;
    return context;
  }

  // The library itself needs no daemon: init only marks it initialised.
  fmReturn_t Init() {
    std::lock_guard lock(mu_);
    if (initialized_) return fm::FM_ST_IN_USE;
    initialized_ = true;
    return fm::FM_ST_SUCCESS;
  }

  // Closes every connection, as the header says.
  fmReturn_t Shutdown() {
    std::lock_guard lock(mu_);
    if (!initialized_) return fm::FM_ST_UNINITIALIZED;
    initialized_ = false;
    connections_.clear();
    return fm::FM_ST_SUCCESS;
  }

  fmReturn_t Connect(fm::fmConnectParams_t* params, fm::fmHandle_t* handle) {
    if (!Initialized()) return fm::FM_ST_UNINITIALIZED;
    if (params == nullptr || handle == nullptr) return fm::FM_ST_BADPARAM;
    Target target;
    unsigned timeout_ms = 0;
    if (fmReturn_t rc = ParseTarget(params, target, timeout_ms); rc != fm::FM_ST_SUCCESS) return rc;
    std::shared_ptr<const Node> node = LoadNode();
    if (node == nullptr) return fm::FM_ST_CONNECTION_NOT_VALID;
    StatusOr<FmState> state = ReadState(*node);
    if (!state.ok()) return fm::FM_ST_GENERIC_ERROR;
    // Nobody listening (FM stopped, or another address): refused at once,
    // as a TCP connect to a closed port or a missing socket file is.
    if (!state->running || !Listens(state->listen, target)) return fm::FM_ST_CONNECTION_NOT_VALID;
    // A slow FM: the library gives up after timeoutMs (0: waits as long as
    // it takes). The header lists no timeout code for fmConnect; giving up
    // is "could not be reached".
    if (timeout_ms > 0 && state->delay_ms > timeout_ms) {
      SleepMs(timeout_ms);
      return fm::FM_ST_CONNECTION_NOT_VALID;
    }
    SleepMs(state->delay_ms);
    std::lock_guard lock(mu_);
    if (!initialized_) return fm::FM_ST_UNINITIALIZED;
    const std::uintptr_t id = next_id_++;
    connections_[id] = ConnectionRecord{std::move(node), state->generation};
    *handle = reinterpret_cast<fm::fmHandle_t>(id);
    return fm::FM_ST_SUCCESS;
  }

  fmReturn_t Disconnect(fm::fmHandle_t handle) {
    std::lock_guard lock(mu_);
    if (!initialized_) return fm::FM_ST_UNINITIALIZED;
    // A connection FM dropped (restart) is still ours to close: success.
    return connections_.erase(reinterpret_cast<std::uintptr_t>(handle)) == 1 ? fm::FM_ST_SUCCESS
                                                                             : fm::FM_ST_BADPARAM;
  }

  // The prologue of every call through a handle: the handle must be open,
  // FM must still be the instance it connected to (running, same
  // generation: a restarted FM dropped the connection), and the call takes
  // FM's delay. On success `node` and `generation` describe the connection.
  fmReturn_t Begin(fm::fmHandle_t handle, std::shared_ptr<const Node>& node, unsigned long long& generation) {
    {
      std::lock_guard lock(mu_);
      if (!initialized_) return fm::FM_ST_UNINITIALIZED;
      auto it = connections_.find(reinterpret_cast<std::uintptr_t>(handle));
      if (it == connections_.end()) return fm::FM_ST_BADPARAM;
      node = it->second.node;
      generation = it->second.generation;
    }
    StatusOr<FmState> state = ReadState(*node);
    if (!state.ok()) return fm::FM_ST_GENERIC_ERROR;
    if (!state->running || state->generation != generation) return fm::FM_ST_CONNECTION_NOT_VALID;
    SleepMs(state->delay_ms);
    return fm::FM_ST_SUCCESS;
  }

 private:
  bool Initialized() {
    std::lock_guard lock(mu_);
    return initialized_;
  }

  std::mutex mu_;
  bool initialized_ = false;
  // Starts away from 0 so that no handle is NULL.
  std::uintptr_t next_id_ = 0x4600;
  std::map<std::uintptr_t, ConnectionRecord> connections_;
};

// Still the FM instance the connection reached, checked again under the
// state file's lock (the state may have changed during the delay).
bool SameInstance(const FmState& state, unsigned long long generation) {
  return state.running && state.generation == generation;
}

unsigned FailedPorts(const FmState& state, const FmGpu& gpu) {
  auto it = state.nvlink_failed_gpus.find(gpu.uuid);
  return it == state.nvlink_failed_gpus.end() ? 0 : static_cast<unsigned>(it->second.size());
}

void CopyString(const std::string& text, char* out, std::size_t size) {
  std::snprintf(out, size, "%s", text.c_str());
}

fmReturn_t Activate(fm::fmHandle_t handle, fm::fmFabricPartitionId_t id) {
  std::shared_ptr<const Node> node;
  unsigned long long generation = 0;
  if (fmReturn_t rc = FmContext::Get().Begin(handle, node, generation); rc != fm::FM_ST_SUCCESS) return rc;
  StatusOr<fmReturn_t> rc = node->store.Update([&](FmState& state) -> fmReturn_t {
    if (!SameInstance(state, generation)) return fm::FM_ST_CONNECTION_NOT_VALID;
    const FmPartitionSpec* partition = node->spec.FindPartition(id);
    if (partition == nullptr) return fm::FM_ST_BADPARAM;  // "unsupported partition id"
    if (state.active_partitions.contains(id)) return fm::FM_ST_IN_USE;  // "already active"
    // A GPU can be in one active partition only. The header names no code
    // for that; the mock answers FM_ST_IN_USE, its code for a busy partition.
    for (unsigned active : state.active_partitions) {
      const FmPartitionSpec* other = node->spec.FindPartition(active);
      if (other == nullptr) continue;
      for (unsigned a : partition->module_ids) {
        for (unsigned b : other->module_ids) {
          if (a == b) return fm::FM_ST_IN_USE;
        }
      }
    }
    // NVLinks must train for a multi-GPU partition; a one-GPU partition
    // uses none.
    if (partition->nvlinks_per_gpu > 0) {
      for (unsigned module_id : partition->module_ids) {
        if (FailedPorts(state, node->spec.gpus.at(module_id)) > 0) return fm::FM_ST_NVLINK_ERROR;
      }
    }
    state.active_partitions.insert(id);
    return fm::FM_ST_SUCCESS;
  });
  if (!rc.ok()) {
    std::fprintf(stderr, "mock libnvfm: %s\n", rc.status().message().c_str());
    return fm::FM_ST_GENERIC_ERROR;
  }
  return *rc;
}

}  // namespace

namespace fm_c_api {
extern "C" {

fmReturn_t fmLibInit() { return FmContext::Get().Init(); }

fmReturn_t fmLibShutdown() { return FmContext::Get().Shutdown(); }

fmReturn_t fmConnect(fmConnectParams_t* connectParams, fmHandle_t* pFmHandle) {
  return FmContext::Get().Connect(connectParams, pFmHandle);
}

fmReturn_t fmDisconnect(fmHandle_t pFmHandle) { return FmContext::Get().Disconnect(pFmHandle); }

fmReturn_t fmGetSupportedFabricPartitions(fmHandle_t pFmHandle, fmFabricPartitionList_t* pFmFabricPartition) {
  if (pFmFabricPartition == nullptr) return FM_ST_BADPARAM;
  if (pFmFabricPartition->version != fmFabricPartitionList_version) return FM_ST_VERSION_MISMATCH;
  std::shared_ptr<const Node> node;
  unsigned long long generation = 0;
  if (fmReturn_t rc = FmContext::Get().Begin(pFmHandle, node, generation); rc != FM_ST_SUCCESS) return rc;
  StatusOr<FmState> state = ReadState(*node);
  if (!state.ok()) return FM_ST_GENERIC_ERROR;

  const unsigned version = pFmFabricPartition->version;
  std::memset(pFmFabricPartition, 0, sizeof(*pFmFabricPartition));
  pFmFabricPartition->version = version;
  const FmSpec& spec = node->spec;
  pFmFabricPartition->numPartitions = static_cast<unsigned>(spec.partitions.size());
  pFmFabricPartition->maxNumPartitions = static_cast<unsigned>(spec.partitions.size());
  for (std::size_t i = 0; i < spec.partitions.size(); ++i) {
    const FmPartitionSpec& partition = spec.partitions[i];
    fmFabricPartitionInfo_t& info = pFmFabricPartition->partitionInfo[i];
    info.partitionId = partition.id;
    info.isActive = state->active_partitions.contains(partition.id) ? 1 : 0;
    info.numGpus = static_cast<unsigned>(partition.module_ids.size());
    for (std::size_t g = 0; g < partition.module_ids.size(); ++g) {
      const FmGpu& gpu = spec.gpus.at(partition.module_ids[g]);
      fmFabricPartitionGpuInfo_t& out = info.gpuInfo[g];
      out.physicalId = gpu.module_id;
      CopyString(gpu.uuid, out.uuid, sizeof(out.uuid));
      CopyString(gpu.pci_bus_id, out.pciBusId, sizeof(out.pciBusId));
      // The partition's NVLinks per GPU, less the ports that failed ("can be
      // fewer than the max due to hardware availability").
      const unsigned failed = FailedPorts(*state, gpu);
      out.numNvLinksAvailable = partition.nvlinks_per_gpu > failed ? partition.nvlinks_per_gpu - failed : 0;
      out.maxNumNvLinks = spec.max_nvlinks_per_gpu;
      out.nvlinkLineRateMBps = spec.nvlink_line_rate_mbps;
    }
  }
  return FM_ST_SUCCESS;
}

fmReturn_t fmActivateFabricPartition(fmHandle_t pFmHandle, fmFabricPartitionId_t partitionId) {
  return Activate(pFmHandle, partitionId);
}

fmReturn_t fmDeactivateFabricPartition(fmHandle_t pFmHandle, fmFabricPartitionId_t partitionId) {
  std::shared_ptr<const Node> node;
  unsigned long long generation = 0;
  if (fmReturn_t rc = FmContext::Get().Begin(pFmHandle, node, generation); rc != FM_ST_SUCCESS) return rc;
  StatusOr<fmReturn_t> rc = node->store.Update([&](FmState& state) -> fmReturn_t {
    if (!SameInstance(state, generation)) return FM_ST_CONNECTION_NOT_VALID;
    if (node->spec.FindPartition(partitionId) == nullptr) return FM_ST_BADPARAM;
    // The header: FM_ST_UNINITIALIZED "specified partition is not activated".
    if (state.active_partitions.erase(partitionId) == 0) return FM_ST_UNINITIALIZED;
    return FM_ST_SUCCESS;
  });
  if (!rc.ok()) {
    std::fprintf(stderr, "mock libnvfm: %s\n", rc.status().message().c_str());
    return FM_ST_GENERIC_ERROR;
  }
  return *rc;
}

fmReturn_t fmGetNvlinkFailedDevices(fmHandle_t pFmHandle, fmNvlinkFailedDevices_t* pFmNvlinkFailedDevices) {
  if (pFmNvlinkFailedDevices == nullptr) return FM_ST_BADPARAM;
  if (pFmNvlinkFailedDevices->version != fmNvlinkFailedDevices_version) return FM_ST_VERSION_MISMATCH;
  std::shared_ptr<const Node> node;
  unsigned long long generation = 0;
  if (fmReturn_t rc = FmContext::Get().Begin(pFmHandle, node, generation); rc != FM_ST_SUCCESS) return rc;
  StatusOr<FmState> state = ReadState(*node);
  if (!state.ok()) return FM_ST_GENERIC_ERROR;

  const unsigned version = pFmNvlinkFailedDevices->version;
  std::memset(pFmNvlinkFailedDevices, 0, sizeof(*pFmNvlinkFailedDevices));
  pFmNvlinkFailedDevices->version = version;
  // HGX H100 8-GPU: FM always answers an empty list (nv_fm_agent.h); the
  // profile says whether this baseboard is one of those.
  if (!node->spec.reports_nvlink_failed_devices) return FM_ST_SUCCESS;
  unsigned count = 0;
  for (const auto& [uuid, ports] : state->nvlink_failed_gpus) {
    const FmGpu* gpu = node->spec.FindGpuByUuid(uuid);
    if (gpu == nullptr) {
      std::fprintf(stderr, "mock libnvfm: nvlinkFailedGpus names %s, which the profile does not have\n",
                   uuid.c_str());
      continue;
    }
    if (count == FM_MAX_NUM_GPUS) break;
    fmNvlinkFailedDeviceInfo_t& out = pFmNvlinkFailedDevices->gpuInfo[count++];
    CopyString(gpu->uuid, out.uuid, sizeof(out.uuid));
    CopyString(gpu->pci_bus_id, out.pciBusId, sizeof(out.pciBusId));
    out.numPorts = static_cast<unsigned>(ports.size());
    for (std::size_t p = 0; p < ports.size(); ++p) out.portNum[p] = ports[p];
  }
  pFmNvlinkFailedDevices->numGpus = count;
  return FM_ST_SUCCESS;
}

}  // extern "C"
}  // namespace fm_c_api
}  // namespace nvdra::mocknvml
