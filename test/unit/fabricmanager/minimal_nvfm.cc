// A Fabric Manager client library that exports only fmLibInit, fmLibShutdown,
// fmConnect and fmDisconnect: what Library::Open requires, nothing more.

#include "fabricmanager/fm_abi.h"

namespace abi = nvdra::fabricmanager::abi;

namespace {
int handle_target = 0;  // fmConnect hands out its address
}  // namespace

extern "C" {
__attribute__((visibility("default"))) abi::fmReturn_t fmLibInit() { return abi::FM_ST_SUCCESS; }
__attribute__((visibility("default"))) abi::fmReturn_t fmLibShutdown() { return abi::FM_ST_SUCCESS; }
__attribute__((visibility("default"))) abi::fmReturn_t fmConnect(abi::fmConnectParams_t* /*params*/,
                                                                 abi::fmHandle_t* handle) {
  *handle = &handle_target;
  return abi::FM_ST_SUCCESS;
}
__attribute__((visibility("default"))) abi::fmReturn_t fmDisconnect(abi::fmHandle_t /*handle*/) {
  return abi::FM_ST_SUCCESS;
}
}
