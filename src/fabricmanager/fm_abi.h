#pragma once

// Our own declarations of the part of NVIDIA Fabric Manager's C API
// (nv_fm_agent.h and nv_fm_types.h, libnvfm.so.1) that the driver uses. The
// build needs no NVIDIA package: library.cc resolves these functions with
// dlsym, and test/mocknvml implements them (libnvfm.so.1 of the mock).
//
// Defines: fmReturn_t and its FM_ST_* codes, the handle, the structs of
// fmConnect, fmGetSupportedFabricPartitions and fmGetNvlinkFailedDevices with
// their version constants, and NVDRA_FM_FUNCTIONS, an X-macro listing every
// function as X(name, parameter list); for each it defines `<name>_fn`.
//
// Layouts are those of the C header on LP64 (x86-64, aarch64). The structs
// travel by pointer into a library we did not build, so a wrong size or offset
// corrupts memory silently; the static_asserts below make it fail to compile.
//
// Thread-safety: declarations only.

#include <cstddef>

namespace nvdra::fabricmanager::abi {

// fmReturn_t is a C enum: 4 bytes, negative codes.
using fmReturn_t = int;
inline constexpr fmReturn_t FM_ST_SUCCESS = 0;
inline constexpr fmReturn_t FM_ST_BADPARAM = -1;
inline constexpr fmReturn_t FM_ST_GENERIC_ERROR = -2;
inline constexpr fmReturn_t FM_ST_NOT_SUPPORTED = -3;
inline constexpr fmReturn_t FM_ST_UNINITIALIZED = -4;
inline constexpr fmReturn_t FM_ST_TIMEOUT = -5;
inline constexpr fmReturn_t FM_ST_VERSION_MISMATCH = -6;
inline constexpr fmReturn_t FM_ST_IN_USE = -7;
inline constexpr fmReturn_t FM_ST_NOT_CONFIGURED = -8;
inline constexpr fmReturn_t FM_ST_CONNECTION_NOT_VALID = -9;
inline constexpr fmReturn_t FM_ST_NVLINK_ERROR = -10;
inline constexpr fmReturn_t FM_ST_RESOURCE_BAD = -11;
inline constexpr fmReturn_t FM_ST_RESOURCE_IN_USE = -12;
inline constexpr fmReturn_t FM_ST_RESOURCE_NOT_IN_USE = -13;
inline constexpr fmReturn_t FM_ST_RESOURCE_EXHAUSTED = -14;
inline constexpr fmReturn_t FM_ST_RESOURCE_NOT_READY = -15;
inline constexpr fmReturn_t FM_ST_PARTITION_EXISTS = -16;
inline constexpr fmReturn_t FM_ST_PARTITION_ID_IN_USE = -17;
inline constexpr fmReturn_t FM_ST_PARTITION_ID_NOT_IN_USE = -18;
inline constexpr fmReturn_t FM_ST_PARTITION_NAME_IN_USE = -19;
inline constexpr fmReturn_t FM_ST_PARTITION_NAME_NOT_IN_USE = -20;
inline constexpr fmReturn_t FM_ST_PARTITION_ID_NAME_MISMATCH = -21;
inline constexpr fmReturn_t FM_ST_NOT_READY = -22;
inline constexpr fmReturn_t FM_ST_RESOURCE_USED_IN_THIS_PARTITION = -23;
inline constexpr fmReturn_t FM_ST_RESOURCE_USED_IN_ANOTHER_PARTITION = -24;
inline constexpr fmReturn_t FM_ST_PARTITION_MISWIRED_TRUNKS = -25;
inline constexpr fmReturn_t FM_ST_PARTITION_INSUFFICIENT_TRUNKS = -26;
inline constexpr fmReturn_t FM_ST_PARTITION_MISSING_SWITCHES = -27;
inline constexpr fmReturn_t FM_ST_PARTITION_NETWORK_CONFIG_ERROR = -28;
inline constexpr fmReturn_t FM_ST_PARTITION_ROUTE_PROGRAMMING_ERROR = -29;

// Opaque, as in the C header (void*).
using fmHandle_t = void*;

inline constexpr unsigned FM_MAX_STR_LENGTH = 256;
inline constexpr unsigned FM_UUID_BUFFER_SIZE = 80;
inline constexpr unsigned FM_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32;
// The port FM's command interface listens on unless FM_CMD_PORT_NUMBER in its
// config says otherwise; an addressInfo without ":port" means this one.
inline constexpr unsigned FM_CMD_PORT_NUMBER = 6666;
inline constexpr unsigned FM_MAX_NUM_GPUS = 16;
inline constexpr unsigned FM_MAX_NUM_NVSWITCHES = 12;
inline constexpr unsigned FM_MAX_FABRIC_PARTITIONS = 64;
inline constexpr unsigned FM_MAX_NUM_NVLINK_PORTS = 64;

// MAKE_FM_PARAM_VERSION: sizeof(struct) | (version << 24).
constexpr unsigned MakeFmParamVersion(std::size_t size, unsigned version) {
  return static_cast<unsigned>(size) | (version << 24U);
}

// enum nvFmApiAddrTypes (4 bytes in the struct).
using nvFmApiAddrTypes = unsigned;
inline constexpr nvFmApiAddrTypes NV_FM_API_ADDR_TYPE_UNKNOWN = 0;
inline constexpr nvFmApiAddrTypes NV_FM_API_ADDR_TYPE_INET = 1;
inline constexpr nvFmApiAddrTypes NV_FM_API_ADDR_TYPE_UNIX = 2;
inline constexpr nvFmApiAddrTypes NV_FM_API_ADDR_TYPE_VSOCK = 3;

struct fmConnectParams_v1 {
  unsigned version;
  char addressInfo[FM_MAX_STR_LENGTH];  // "a.b.c.d[:port]" or a Unix socket path
  unsigned timeoutMs;                   // how long fmConnect waits for FM
  unsigned addressIsUnixSocket;
};

struct fmConnectParams_v2 {
  unsigned version;
  char addressInfo[FM_MAX_STR_LENGTH];
  unsigned timeoutMs;
  unsigned addressIsUnixSocket;  // deprecated in v2 in favour of addressType
  nvFmApiAddrTypes addressType;
};
using fmConnectParams_t = fmConnectParams_v2;
inline constexpr unsigned fmConnectV1Params_version1 = MakeFmParamVersion(sizeof(fmConnectParams_v1), 1);
inline constexpr unsigned fmConnectV2Params_version2 = MakeFmParamVersion(sizeof(fmConnectParams_v2), 2);
inline constexpr unsigned fmConnectParams_version = fmConnectV2Params_version2;

using fmFabricPartitionId_t = unsigned;

struct fmFabricPartitionGpuInfo_t {
  unsigned physicalId;  // equals the GPU module id (NVML's nvmlDeviceGetModuleId)
  char uuid[FM_UUID_BUFFER_SIZE];
  char pciBusId[FM_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
  unsigned numNvLinksAvailable;  // may be fewer than maxNumNvLinks on degraded hardware
  unsigned maxNumNvLinks;
  unsigned nvlinkLineRateMBps;  // per link
};

struct fmFabricPartitionInfo_t {
  fmFabricPartitionId_t partitionId;
  unsigned isActive;
  unsigned numGpus;
  fmFabricPartitionGpuInfo_t gpuInfo[FM_MAX_NUM_GPUS];
};

struct fmFabricPartitionList_v2 {
  unsigned version;
  unsigned numPartitions;     // supported now
  unsigned maxNumPartitions;  // on this platform
  fmFabricPartitionInfo_t partitionInfo[FM_MAX_FABRIC_PARTITIONS];
};
using fmFabricPartitionList_t = fmFabricPartitionList_v2;
// The header's fmFabricPartitionList_version2 is built with version number 1.
inline constexpr unsigned fmFabricPartitionList_version2 =
    MakeFmParamVersion(sizeof(fmFabricPartitionList_v2), 1);
inline constexpr unsigned fmFabricPartitionList_version = fmFabricPartitionList_version2;

struct fmNvlinkFailedDeviceInfo_t {
  char uuid[FM_UUID_BUFFER_SIZE];
  char pciBusId[FM_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
  unsigned numPorts;
  unsigned portNum[FM_MAX_NUM_NVLINK_PORTS];
};

struct fmNvlinkFailedDevices_v1 {
  unsigned version;
  unsigned numGpus;
  unsigned numSwitches;
  fmNvlinkFailedDeviceInfo_t gpuInfo[FM_MAX_NUM_GPUS];
  fmNvlinkFailedDeviceInfo_t switchInfo[FM_MAX_NUM_NVSWITCHES];
};
using fmNvlinkFailedDevices_t = fmNvlinkFailedDevices_v1;
inline constexpr unsigned fmNvlinkFailedDevices_version1 =
    MakeFmParamVersion(sizeof(fmNvlinkFailedDevices_v1), 1);
inline constexpr unsigned fmNvlinkFailedDevices_version = fmNvlinkFailedDevices_version1;

// Sizes and offsets of the C layout: every member is a 4-byte unsigned or a
// char array, so there is no padding, and the sums below are the header's.
static_assert(sizeof(fmConnectParams_v1) == 268);
static_assert(sizeof(fmConnectParams_v2) == 272);
static_assert(offsetof(fmConnectParams_v2, timeoutMs) == 260);
static_assert(offsetof(fmConnectParams_v2, addressType) == 268);
static_assert(sizeof(fmFabricPartitionGpuInfo_t) == 128);
static_assert(offsetof(fmFabricPartitionGpuInfo_t, pciBusId) == 84);
static_assert(offsetof(fmFabricPartitionGpuInfo_t, numNvLinksAvailable) == 116);
static_assert(sizeof(fmFabricPartitionInfo_t) == 12 + 16 * 128);
static_assert(sizeof(fmFabricPartitionList_v2) == 12 + 64 * sizeof(fmFabricPartitionInfo_t));
static_assert(sizeof(fmNvlinkFailedDeviceInfo_t) == 80 + 32 + 4 + 64 * 4);
static_assert(sizeof(fmNvlinkFailedDevices_v1) == 12 + 28 * sizeof(fmNvlinkFailedDeviceInfo_t));
static_assert(offsetof(fmNvlinkFailedDevices_v1, switchInfo) ==
              12 + 16 * sizeof(fmNvlinkFailedDeviceInfo_t));

// Every function the driver calls, as X(name, parameter list). Each returns
// fmReturn_t. fmActivateFabricPartitionWithVFs, fmSetActivatedFabricPartitions
// and fmGetUnsupportedFabricPartitions are left out: the driver (like
// upstream's) does not call them.
#define NVDRA_FM_FUNCTIONS(X)                                                                  \
  X(fmLibInit, ())                                                                             \
  X(fmLibShutdown, ())                                                                         \
  X(fmConnect, (fmConnectParams_t * connectParams, fmHandle_t * pFmHandle))                    \
  X(fmDisconnect, (fmHandle_t pFmHandle))                                                      \
  X(fmGetSupportedFabricPartitions,                                                            \
    (fmHandle_t pFmHandle, fmFabricPartitionList_t * pFmFabricPartition))                      \
  X(fmActivateFabricPartition, (fmHandle_t pFmHandle, fmFabricPartitionId_t partitionId))      \
  X(fmDeactivateFabricPartition, (fmHandle_t pFmHandle, fmFabricPartitionId_t partitionId))    \
  X(fmGetNvlinkFailedDevices,                                                                  \
    (fmHandle_t pFmHandle, fmNvlinkFailedDevices_t * pFmNvlinkFailedDevices))

#define NVDRA_FM_DECLARE_FN_TYPE(name, params) using name##_fn = fmReturn_t(*) params;
NVDRA_FM_FUNCTIONS(NVDRA_FM_DECLARE_FN_TYPE)
#undef NVDRA_FM_DECLARE_FN_TYPE

}  // namespace nvdra::fabricmanager::abi
