#pragma once

// NVIDIA Fabric Manager's client library, loaded at run time: Library opens
// libnvfm.so.1 from the driver root with dlopen, resolves the functions of
// fm_abi.h and initialises the library (fmLibInit); Connect reaches the
// running FM daemon over TCP or its Unix socket and returns a Connection that
// lists, activates and deactivates the fabric partitions of shared NVSwitch
// multi-tenancy (FM's FABRIC_MODE=1).
//
//   ASSIGN_OR_RETURN(auto fm, fabricmanager::Library::Open({.driver_root = root}));
//   ASSIGN_OR_RETURN(fabricmanager::Connection c,
//                    fm->Connect(fabricmanager::Address::Tcp("127.0.0.1"), 1000ms));
//   ASSIGN_OR_RETURN(std::vector<fabricmanager::Partition> partitions, c.SupportedPartitions());
//   RETURN_IF_ERROR(c.Activate(partitions[1].id));
//
// Errors: a failed FM call becomes a Status naming the call, FM's address and
// FM's code ("fmActivateFabricPartition(3) at 127.0.0.1:6666: FM_ST_NVLINK_ERROR
// (FM error -10)"), with the code from FmReturnToStatusCode. FM not reachable
// (not running, another address, restarted since the connection was made) is
// kUnavailable. A function the loaded library does not export is not fatal
// unless Open needs it: the call returns kUnimplemented naming it, and
// MissingFunctions() lists it.
//
// Ownership: Library owns the dlopen handle and its share of the library's
// initialisation: fmLibInit and fmLibShutdown act on the whole process, so
// Libraries that load the same file count their users and the last one shuts
// the library down. A Connection owns its FM handle (fmDisconnect in its
// destructor) and must not outlive its Library.
// Thread-safety: Library is thread-safe (immutable after Open). Connection is
// thread-compatible: one thread at a time per Connection; separate
// Connections may be used concurrently.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "fabricmanager/fm_abi.h"

namespace nvdra::fabricmanager {

using common::Status;
using common::StatusCode;
using common::StatusOr;

// FM return code to ours. CONNECTION_NOT_VALID, TIMEOUT, NOT_CONFIGURED (FM
// still initialising), NOT_READY and RESOURCE_NOT_READY kUnavailable (retry);
// BADPARAM kInvalidArgument; NOT_SUPPORTED kUnimplemented; RESOURCE_BAD and
// the *_NOT_IN_USE partition codes kNotFound; PARTITION_EXISTS and the
// partition id/name *_IN_USE codes kAlreadyExists; RESOURCE_EXHAUSTED
// kResourceExhausted; UNINITIALIZED, VERSION_MISMATCH, IN_USE, NVLINK_ERROR,
// RESOURCE_IN_USE, RESOURCE_NOT_IN_USE, RESOURCE_USED_IN_* and the partition
// wiring and programming errors kFailedPrecondition (the node must change
// first); GENERIC_ERROR and unknown codes kInternal.
StatusCode FmReturnToStatusCode(abi::fmReturn_t code);
// "FM_ST_IN_USE"; "FM_ST_<code>" for a code the header does not name.
std::string FmReturnName(abi::fmReturn_t code);

struct LibraryOptions {
  // Host path of the NVIDIA driver installation ("/" for a driver on the host,
  // "/run/nvidia/driver" for the GPU operator's container driver).
  std::filesystem::path driver_root = "/";
  // Load exactly this file instead of searching the driver root.
  std::optional<std::filesystem::path> library_path;
};

// Where FM's command interface listens: TCP (FM_CMD_BIND_INTERFACE and
// FM_CMD_PORT_NUMBER in its config, 127.0.0.1:6666 by default) or a Unix
// socket (FM_CMD_UNIX_SOCKET_PATH, which FM then uses instead of TCP).
struct Address {
  enum class Transport { kTcp, kUnixSocket };
  Transport transport = Transport::kTcp;
  // "a.b.c.d" or "a.b.c.d:port" for TCP (without a port the library uses
  // 6666), a path for a Unix socket.
  std::string value = "127.0.0.1";

  static Address Tcp(std::string host_and_port) { return {Transport::kTcp, std::move(host_and_port)}; }
  static Address UnixSocket(std::string path) { return {Transport::kUnixSocket, std::move(path)}; }
  // "127.0.0.1:6666" (the default port made explicit) or "unix:/run/...".
  [[nodiscard]] std::string ToString() const;
};

// One GPU of a partition (fmFabricPartitionGpuInfo_t).
struct PartitionGpu {
  std::uint32_t physical_id = 0;  // the GPU's module id (nvml::Device::ModuleId)
  std::string uuid;               // "GPU-..."
  std::string pci_bus_id;         // "0000:18:00.0", spelled as nvml::PciInfo::bus_id
  std::uint32_t num_nvlinks_available = 0;
  std::uint32_t max_num_nvlinks = 0;
  std::uint32_t nvlink_line_rate_mbps = 0;
};

// One fabric partition FM supports now (fmFabricPartitionInfo_t).
struct Partition {
  std::uint32_t id = 0;
  bool is_active = false;
  std::vector<PartitionGpu> gpus;  // in FM's order
};

// A GPU or NVSwitch with failed NVLinks (fmNvlinkFailedDeviceInfo_t).
struct NvlinkFailedDevice {
  std::string uuid;
  std::string pci_bus_id;  // as PartitionGpu::pci_bus_id
  std::vector<std::uint32_t> ports;
};

struct NvlinkFailures {
  std::vector<NvlinkFailedDevice> gpus;
  std::vector<NvlinkFailedDevice> switches;
};

class Library;

// One connection to the FM daemon; disconnects when destroyed. Movable, not
// copyable. FM drops connections when it restarts: every call then answers
// kUnavailable (FM_ST_CONNECTION_NOT_VALID) and the caller connects again.
class Connection {
 public:
  Connection(Connection&& other) noexcept;
  Connection& operator=(Connection&& other) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  [[nodiscard]] const Address& address() const { return address_; }

  // Every partition FM supports now, with its active flag. kInternal when FM
  // reports more partitions or GPUs than fm_abi.h's arrays hold (the library
  // and our declarations disagree: reading on would hand out a truncated
  // partition).
  StatusOr<std::vector<Partition>> SupportedPartitions() const;

  // Activates partition `id`. Activating a partition that is already active
  // is not an error (FM answers FM_ST_IN_USE; this call then checks the
  // partition list and returns OK), so a retried Prepare succeeds.
  // kFailedPrecondition when an active partition shares a GPU with it (the
  // message names it), or FM_ST_NVLINK_ERROR (NVLink training failed);
  // kInvalidArgument for an id FM does not support.
  Status Activate(std::uint32_t id) const;

  // Deactivates partition `id`. Deactivating an inactive partition is not an
  // error (FM answers FM_ST_UNINITIALIZED; this call checks the list and
  // returns OK). kInvalidArgument for an id FM does not support.
  Status Deactivate(std::uint32_t id) const;

  // GPUs and NVSwitches whose NVLinks failed to train when FM started. FM
  // returns an empty list on HGX H100 8-GPU systems (NVLinks trained by
  // hardware there, nv_fm_agent.h): an empty answer is not proof of health.
  StatusOr<NvlinkFailures> NvlinkFailedDevices() const;

 private:
  friend class Library;
  Connection(const Library* library, abi::fmHandle_t handle, Address address)
      : library_(library), handle_(handle), address_(std::move(address)) {}
  void Disconnect();

  const Library* library_;
  abi::fmHandle_t handle_;  // nullptr once moved from
  Address address_;
};

class Library {
 public:
  // Loads libnvfm.so.1 (or, as upstream's driver names it, libnvfm.so) and
  // calls fmLibInit. Searches, under the driver root, the folders NVML's
  // loader searches (usr/lib64, usr/lib/x86_64-linux-gnu,
  // usr/lib/aarch64-linux-gnu, lib64, usr/lib, lib), then, for driver root
  // "/", the dynamic loader's own search. kNotFound names every path tried;
  // kFailedPrecondition when the file lacks fmLibInit, fmLibShutdown,
  // fmConnect or fmDisconnect (naming them) or fmLibInit fails.
  static StatusOr<std::unique_ptr<Library>> Open(const LibraryOptions& options);

  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  ~Library();

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  // Functions of fm_abi.h that this library does not export.
  [[nodiscard]] const std::vector<std::string>& MissingFunctions() const { return missing_; }

  // Connects to the FM daemon at `address`, waiting at most `timeout` for it
  // (0: the library's own default). kUnavailable naming the address when FM
  // cannot be reached there (not running, listening elsewhere, too slow);
  // kInvalidArgument for an address FM's library cannot parse.
  StatusOr<Connection> Connect(const Address& address, std::chrono::milliseconds timeout) const;

  // Resolved entry points; nullptr where the library lacks the function.
  struct Functions {
#define NVDRA_FM_FN_MEMBER(name, params) abi::name##_fn name = nullptr;
    NVDRA_FM_FUNCTIONS(NVDRA_FM_FN_MEMBER)
#undef NVDRA_FM_FN_MEMBER
  };
  [[nodiscard]] const Functions& fn() const { return fn_; }

  // Turns FM's result of `call` (made at `address`) into a Status; OK for
  // FM_ST_SUCCESS.
  [[nodiscard]] static Status Check(abi::fmReturn_t code, std::string_view call, const Address& address);

 private:
  Library() = default;

  void* handle_ = nullptr;     // dlopen handle, closed by the destructor
  bool initialized_ = false;   // holds one count of the process-wide init
  std::filesystem::path path_;
  std::vector<std::string> missing_;
  Functions fn_;
};

}  // namespace nvdra::fabricmanager
