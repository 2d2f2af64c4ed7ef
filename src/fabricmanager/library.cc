#include "fabricmanager/library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "common/driver_library.h"

#include "common/mutex.h"

namespace nvdra::fabricmanager {
namespace {

using abi::fmReturn_t;

// FM's client library is installed beside libnvidia-ml.so.1, in the folders
// common::OpenDriverLibrary searches.
// The package's soname first; upstream's driver (go-nvfm) loads the
// development link libnvfm.so, so a root that has only that works too.
constexpr const char* kLibraryNames[] = {"libnvfm.so.1", "libnvfm.so"};
constexpr std::string_view kMissingMarker = "not exported by this libnvfm";

// fmLibInit and fmLibShutdown act on the library's process-wide state (a
// second fmLibInit answers FM_ST_IN_USE, fmLibShutdown closes every
// connection), and dlopen hands every Library that loads the same file the
// same handle. So the first Library of a handle initialises it and the last
// one shuts it down.
class InitRegistry {
 public:
  static InitRegistry& Get() {
    static InitRegistry registry;
    return registry;
  }

  // fmLibInit when `handle` has no user yet. The call runs under the mutex:
  // it is local (no I/O to FM) and must not race with another Library's
  // fmLibShutdown of the same handle.
  fmReturn_t Acquire(void* handle, abi::fmLibInit_fn init) EXCLUDES(mu_) {
    common::MutexLock lock(mu_);
    Entry& entry = entries_[handle];
    if (entry.users == 0) {
      const fmReturn_t rc = init();
      // FM_ST_IN_USE: someone outside these Libraries initialised it; use
      // it, and leave the shutdown to them.
      if (rc != abi::FM_ST_SUCCESS && rc != abi::FM_ST_IN_USE) {
        entries_.erase(handle);
        return rc;
      }
      entry.shut_down_at_end = rc == abi::FM_ST_SUCCESS;
    }
    ++entry.users;
    return abi::FM_ST_SUCCESS;
  }

  void Release(void* handle, abi::fmLibShutdown_fn shutdown) EXCLUDES(mu_) {
    common::MutexLock lock(mu_);
    auto it = entries_.find(handle);
    if (it == entries_.end() || --it->second.users > 0) return;
    if (it->second.shut_down_at_end) shutdown();
    entries_.erase(it);
  }

 private:
  struct Entry {
    int users = 0;
    bool shut_down_at_end = false;
  };
  common::Mutex mu_;
  std::map<void*, Entry> entries_ GUARDED_BY(mu_);
};

Status MissingFunctionError(std::string_view function) {
  return common::UnimplementedError(fmt::format("{}: {}", function, kMissingMarker));
}

// A count FM reported, checked against the array it indexes: more than the
// array holds means libnvfm and fm_abi.h disagree on the layout.
StatusOr<unsigned> CheckedCount(unsigned count, unsigned capacity, std::string_view what) {
  if (count > capacity) {
    return common::InternalError(fmt::format(
        "{}: FM reported {} but the structure holds {}: libnvfm and our declarations "
        "(fm_abi.h) disagree",
        what, count, capacity));
  }
  return count;
}

StatusOr<NvlinkFailedDevice> ToFailedDevice(const abi::fmNvlinkFailedDeviceInfo_t& info) {
  NvlinkFailedDevice device;
  device.uuid = common::DriverBufferString(info.uuid, sizeof(info.uuid));
  device.pci_bus_id = common::NormalizePciBusId(common::DriverBufferString(info.pciBusId, sizeof(info.pciBusId)));
  ASSIGN_OR_RETURN(unsigned ports, CheckedCount(info.numPorts, abi::FM_MAX_NUM_NVLINK_PORTS,
                                                "fmGetNvlinkFailedDevices " + device.uuid + " numPorts"));
  device.ports.assign(info.portNum, info.portNum + ports);
  return device;
}

}  // namespace

StatusCode FmReturnToStatusCode(fmReturn_t code) {
  switch (code) {
    case abi::FM_ST_SUCCESS:
      return StatusCode::kOk;
    case abi::FM_ST_BADPARAM:
      return StatusCode::kInvalidArgument;
    case abi::FM_ST_NOT_SUPPORTED:
      return StatusCode::kUnimplemented;
    case abi::FM_ST_CONNECTION_NOT_VALID:
    case abi::FM_ST_TIMEOUT:
    case abi::FM_ST_NOT_CONFIGURED:
    case abi::FM_ST_NOT_READY:
    case abi::FM_ST_RESOURCE_NOT_READY:
      return StatusCode::kUnavailable;
    case abi::FM_ST_RESOURCE_BAD:
    case abi::FM_ST_PARTITION_ID_NOT_IN_USE:
    case abi::FM_ST_PARTITION_NAME_NOT_IN_USE:
      return StatusCode::kNotFound;
    case abi::FM_ST_PARTITION_EXISTS:
    case abi::FM_ST_PARTITION_ID_IN_USE:
    case abi::FM_ST_PARTITION_NAME_IN_USE:
      return StatusCode::kAlreadyExists;
    case abi::FM_ST_RESOURCE_EXHAUSTED:
      return StatusCode::kResourceExhausted;
    case abi::FM_ST_UNINITIALIZED:
    case abi::FM_ST_VERSION_MISMATCH:
    case abi::FM_ST_IN_USE:
    case abi::FM_ST_NVLINK_ERROR:
    case abi::FM_ST_RESOURCE_IN_USE:
    case abi::FM_ST_RESOURCE_NOT_IN_USE:
    case abi::FM_ST_PARTITION_ID_NAME_MISMATCH:
    case abi::FM_ST_RESOURCE_USED_IN_THIS_PARTITION:
    case abi::FM_ST_RESOURCE_USED_IN_ANOTHER_PARTITION:
    case abi::FM_ST_PARTITION_MISWIRED_TRUNKS:
    case abi::FM_ST_PARTITION_INSUFFICIENT_TRUNKS:
    case abi::FM_ST_PARTITION_MISSING_SWITCHES:
    case abi::FM_ST_PARTITION_NETWORK_CONFIG_ERROR:
    case abi::FM_ST_PARTITION_ROUTE_PROGRAMMING_ERROR:
      return StatusCode::kFailedPrecondition;
    default:
      return StatusCode::kInternal;
  }
}

std::string FmReturnName(fmReturn_t code) {
  switch (code) {
#define NVDRA_FM_NAME(name) \
  case abi::name:           \
    return #name;
    NVDRA_FM_NAME(FM_ST_SUCCESS)
    NVDRA_FM_NAME(FM_ST_BADPARAM)
    NVDRA_FM_NAME(FM_ST_GENERIC_ERROR)
    NVDRA_FM_NAME(FM_ST_NOT_SUPPORTED)
    NVDRA_FM_NAME(FM_ST_UNINITIALIZED)
    NVDRA_FM_NAME(FM_ST_TIMEOUT)
    NVDRA_FM_NAME(FM_ST_VERSION_MISMATCH)
    NVDRA_FM_NAME(FM_ST_IN_USE)
    NVDRA_FM_NAME(FM_ST_NOT_CONFIGURED)
    NVDRA_FM_NAME(FM_ST_CONNECTION_NOT_VALID)
    NVDRA_FM_NAME(FM_ST_NVLINK_ERROR)
    NVDRA_FM_NAME(FM_ST_RESOURCE_BAD)
    NVDRA_FM_NAME(FM_ST_RESOURCE_IN_USE)
    NVDRA_FM_NAME(FM_ST_RESOURCE_NOT_IN_USE)
    NVDRA_FM_NAME(FM_ST_RESOURCE_EXHAUSTED)
    NVDRA_FM_NAME(FM_ST_RESOURCE_NOT_READY)
    NVDRA_FM_NAME(FM_ST_PARTITION_EXISTS)
    NVDRA_FM_NAME(FM_ST_PARTITION_ID_IN_USE)
    NVDRA_FM_NAME(FM_ST_PARTITION_ID_NOT_IN_USE)
    NVDRA_FM_NAME(FM_ST_PARTITION_NAME_IN_USE)
    NVDRA_FM_NAME(FM_ST_PARTITION_NAME_NOT_IN_USE)
    NVDRA_FM_NAME(FM_ST_PARTITION_ID_NAME_MISMATCH)
    NVDRA_FM_NAME(FM_ST_NOT_READY)
    NVDRA_FM_NAME(FM_ST_RESOURCE_USED_IN_THIS_PARTITION)
    NVDRA_FM_NAME(FM_ST_RESOURCE_USED_IN_ANOTHER_PARTITION)
    NVDRA_FM_NAME(FM_ST_PARTITION_MISWIRED_TRUNKS)
    NVDRA_FM_NAME(FM_ST_PARTITION_INSUFFICIENT_TRUNKS)
    NVDRA_FM_NAME(FM_ST_PARTITION_MISSING_SWITCHES)
    NVDRA_FM_NAME(FM_ST_PARTITION_NETWORK_CONFIG_ERROR)
    NVDRA_FM_NAME(FM_ST_PARTITION_ROUTE_PROGRAMMING_ERROR)
#undef NVDRA_FM_NAME
    default:
      return fmt::format("FM_ST_<{}>", code);
  }
}

std::string Address::ToString() const {
  if (transport == Transport::kUnixSocket) return "unix:" + value;
  // The library appends FM_CMD_PORT_NUMBER to an address without a port;
  // say so, so a message names the port that was tried.
  if (value.find(':') == std::string::npos) return fmt::format("{}:{}", value, abi::FM_CMD_PORT_NUMBER);
  return value;
}

// --- Library --------------------------------------------------------------------

StatusOr<std::unique_ptr<Library>> Library::Open(const LibraryOptions& options) {
  std::unique_ptr<Library> library(new Library());  // private constructor
  ASSIGN_OR_RETURN(const common::LoadedDriverLibrary loaded,
                   common::OpenDriverLibrary(options.driver_root, options.library_path,
                                             {std::begin(kLibraryNames), std::end(kLibraryNames)},
                                             "Fabric Manager library",
                                             "is the nvidia-fabricmanager package installed in the driver root?"));
  library->handle_ = loaded.handle;
  library->path_ = loaded.path;

  auto resolve = [&](const char* name) -> void* {
    void* symbol = dlsym(library->handle_, name);
    if (symbol == nullptr) library->missing_.emplace_back(name);
    return symbol;
  };
  // dlsym returns void*; POSIX guarantees it converts to a function pointer.
#define NVDRA_FM_RESOLVE(name, params) library->fn_.name = reinterpret_cast<abi::name##_fn>(resolve(#name));
  NVDRA_FM_FUNCTIONS(NVDRA_FM_RESOLVE)
#undef NVDRA_FM_RESOLVE

  // Without these four nothing else can be called.
  std::vector<std::string> essential_missing;
  for (const char* name : {"fmLibInit", "fmLibShutdown", "fmConnect", "fmDisconnect"}) {
    if (std::find(library->missing_.begin(), library->missing_.end(), name) != library->missing_.end()) {
      essential_missing.emplace_back(name);
    }
  }
  if (!essential_missing.empty()) {
    return common::FailedPreconditionError(fmt::format("{} does not export {}: not a Fabric Manager library",
                                                       library->path_.string(),
                                                       fmt::join(essential_missing, ", ")));
  }
  const fmReturn_t rc = InitRegistry::Get().Acquire(library->handle_, library->fn_.fmLibInit);
  if (rc != abi::FM_ST_SUCCESS) {
    return common::FailedPreconditionError(
        fmt::format("fmLibInit ({}): {} (FM error {})", library->path_.string(), FmReturnName(rc), rc));
  }
  library->initialized_ = true;
  return library;
}

Library::~Library() {
  if (initialized_) InitRegistry::Get().Release(handle_, fn_.fmLibShutdown);
  if (handle_ != nullptr) dlclose(handle_);
}

Status Library::Check(fmReturn_t code, std::string_view call, const Address& address) {
  if (code == abi::FM_ST_SUCCESS) return common::OkStatus();
  return Status(FmReturnToStatusCode(code),
                fmt::format("{} at {}: {} (FM error {})", call, address.ToString(), FmReturnName(code), code));
}

StatusOr<Connection> Library::Connect(const Address& address, std::chrono::milliseconds timeout) const {
  abi::fmConnectParams_t params{};
  params.version = abi::fmConnectParams_version;
  if (address.value.empty() || address.value.size() >= sizeof(params.addressInfo)) {
    return common::InvalidArgumentError(fmt::format(
        "Fabric Manager address {:?}: expected 1 to {} characters", address.value,
        sizeof(params.addressInfo) - 1));
  }
  std::memcpy(params.addressInfo, address.value.data(), address.value.size());
  params.timeoutMs = static_cast<unsigned>(std::clamp<std::chrono::milliseconds::rep>(
      timeout.count(), 0, std::numeric_limits<unsigned>::max()));
  // Both fields, as go-nvfm sets them: addressIsUnixSocket for libraries that
  // still read it, addressType for those that read the v2 field.
  const bool unix_socket = address.transport == Address::Transport::kUnixSocket;
  params.addressIsUnixSocket = unix_socket ? 1 : 0;
  params.addressType = unix_socket ? abi::NV_FM_API_ADDR_TYPE_UNIX : abi::NV_FM_API_ADDR_TYPE_INET;

  abi::fmHandle_t handle = nullptr;
  const fmReturn_t rc = fn_.fmConnect(&params, &handle);
  if (rc == abi::FM_ST_CONNECTION_NOT_VALID || rc == abi::FM_ST_TIMEOUT) {
    return common::UnavailableError(fmt::format(
        "fmConnect at {}: {} (FM error {}): Fabric Manager is not reachable there (is "
        "nvidia-fabricmanager running, and listening on that address?)",
        address.ToString(), FmReturnName(rc), rc));
  }
  RETURN_IF_ERROR(Check(rc, "fmConnect", address));
  if (handle == nullptr) {
    return common::InternalError(fmt::format("fmConnect at {}: success without a handle", address.ToString()));
  }
  return Connection(this, handle, address);
}

// --- Connection -----------------------------------------------------------------

Connection::Connection(Connection&& other) noexcept
    : library_(other.library_), handle_(std::exchange(other.handle_, nullptr)), address_(std::move(other.address_)) {}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    Disconnect();
    library_ = other.library_;
    handle_ = std::exchange(other.handle_, nullptr);
    address_ = std::move(other.address_);
  }
  return *this;
}

Connection::~Connection() { Disconnect(); }

void Connection::Disconnect() {
  // The result is dropped: a handle FM already dropped (a restart) is gone
  // either way, and nothing is left for the caller to do.
  if (handle_ != nullptr) (void)library_->fn().fmDisconnect(handle_);
  handle_ = nullptr;
}

StatusOr<std::vector<Partition>> Connection::SupportedPartitions() const {
  constexpr std::string_view kCall = "fmGetSupportedFabricPartitions";
  if (library_->fn().fmGetSupportedFabricPartitions == nullptr) return MissingFunctionError(kCall);
  // 129 KiB: on the heap, not the stack of whatever thread calls this.
  auto list = std::make_unique<abi::fmFabricPartitionList_t>();
  list->version = abi::fmFabricPartitionList_version;
  RETURN_IF_ERROR(Library::Check(library_->fn().fmGetSupportedFabricPartitions(handle_, list.get()), kCall, address_));

  ASSIGN_OR_RETURN(unsigned count, CheckedCount(list->numPartitions, abi::FM_MAX_FABRIC_PARTITIONS,
                                                std::string(kCall) + " numPartitions"));
  std::vector<Partition> partitions;
  partitions.reserve(count);
  for (unsigned i = 0; i < count; ++i) {
    const abi::fmFabricPartitionInfo_t& info = list->partitionInfo[i];
    ASSIGN_OR_RETURN(unsigned gpus, CheckedCount(info.numGpus, abi::FM_MAX_NUM_GPUS,
                                                 fmt::format("{} partition {} numGpus", kCall, info.partitionId)));
    Partition partition;
    partition.id = info.partitionId;
    partition.is_active = info.isActive != 0;
    for (unsigned g = 0; g < gpus; ++g) {
      const abi::fmFabricPartitionGpuInfo_t& gpu = info.gpuInfo[g];
      partition.gpus.push_back(PartitionGpu{
          .physical_id = gpu.physicalId,
          .uuid = common::DriverBufferString(gpu.uuid, sizeof(gpu.uuid)),
          .pci_bus_id = common::NormalizePciBusId(common::DriverBufferString(gpu.pciBusId, sizeof(gpu.pciBusId))),
          .num_nvlinks_available = gpu.numNvLinksAvailable,
          .max_num_nvlinks = gpu.maxNumNvLinks,
          .nvlink_line_rate_mbps = gpu.nvlinkLineRateMBps,
      });
    }
    partitions.push_back(std::move(partition));
  }
  return partitions;
}

Status Connection::Activate(std::uint32_t id) const {
  const std::string call = fmt::format("fmActivateFabricPartition({})", id);
  if (library_->fn().fmActivateFabricPartition == nullptr) return MissingFunctionError("fmActivateFabricPartition");
  const fmReturn_t rc = library_->fn().fmActivateFabricPartition(handle_, id);
  Status status = Library::Check(rc, call, address_);
  // FM_ST_IN_USE is FM's answer both for "already active" (nv_fm_agent.h) and
  // for a partition whose GPUs an active partition holds; the list tells
  // which, and names the holder for the second.
  if (rc != abi::FM_ST_IN_USE) return status;
  ASSIGN_OR_RETURN(std::vector<Partition> partitions, SupportedPartitions());
  const auto target = std::find_if(partitions.begin(), partitions.end(),
                                   [&](const Partition& p) { return p.id == id; });
  if (target == partitions.end()) return status;
  if (target->is_active) return common::OkStatus();
  std::set<std::uint32_t> wanted;
  for (const PartitionGpu& gpu : target->gpus) wanted.insert(gpu.physical_id);
  std::vector<std::string> holders;
  for (const Partition& p : partitions) {
    if (!p.is_active) continue;
    std::vector<std::uint32_t> shared;
    for (const PartitionGpu& gpu : p.gpus) {
      if (wanted.contains(gpu.physical_id)) shared.push_back(gpu.physical_id);
    }
    if (!shared.empty()) holders.push_back(fmt::format("active partition {} holds GPU module ids {}", p.id, fmt::join(shared, ",")));
  }
  if (holders.empty()) return status;
  return common::FailedPreconditionError(fmt::format("{}: {}", status.message(), fmt::join(holders, "; ")));
}

Status Connection::Deactivate(std::uint32_t id) const {
  const std::string call = fmt::format("fmDeactivateFabricPartition({})", id);
  if (library_->fn().fmDeactivateFabricPartition == nullptr) return MissingFunctionError("fmDeactivateFabricPartition");
  const fmReturn_t rc = library_->fn().fmDeactivateFabricPartition(handle_, id);
  Status status = Library::Check(rc, call, address_);
  // nv_fm_agent.h: FM_ST_UNINITIALIZED for a partition that is not active
  // (and for a library that is not initialised, which the list then reports).
  if (rc != abi::FM_ST_UNINITIALIZED) return status;
  ASSIGN_OR_RETURN(std::vector<Partition> partitions, SupportedPartitions());
  for (const Partition& p : partitions) {
    if (p.id == id && !p.is_active) return common::OkStatus();
  }
  return status;
}

StatusOr<NvlinkFailures> Connection::NvlinkFailedDevices() const {
  constexpr std::string_view kCall = "fmGetNvlinkFailedDevices";
  if (library_->fn().fmGetNvlinkFailedDevices == nullptr) return MissingFunctionError(kCall);
  auto devices = std::make_unique<abi::fmNvlinkFailedDevices_t>();
  devices->version = abi::fmNvlinkFailedDevices_version;
  RETURN_IF_ERROR(Library::Check(library_->fn().fmGetNvlinkFailedDevices(handle_, devices.get()), kCall, address_));
  ASSIGN_OR_RETURN(unsigned gpus, CheckedCount(devices->numGpus, abi::FM_MAX_NUM_GPUS, std::string(kCall) + " numGpus"));
  ASSIGN_OR_RETURN(unsigned switches, CheckedCount(devices->numSwitches, abi::FM_MAX_NUM_NVSWITCHES,
                                                   std::string(kCall) + " numSwitches"));
  NvlinkFailures failures;
  for (unsigned i = 0; i < gpus; ++i) {
    ASSIGN_OR_RETURN(NvlinkFailedDevice device, ToFailedDevice(devices->gpuInfo[i]));
    failures.gpus.push_back(std::move(device));
  }
  for (unsigned i = 0; i < switches; ++i) {
    ASSIGN_OR_RETURN(NvlinkFailedDevice device, ToFailedDevice(devices->switchInfo[i]));
    failures.switches.push_back(std::move(device));
  }
  return failures;
}

}  // namespace nvdra::fabricmanager
