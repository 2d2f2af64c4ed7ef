// A deliberately old, minimal "libnvidia-ml.so.1": it exports only init,
// shutdown, the error string and the driver version, the way a library from
// before the functions the driver uses would. Loaded by library_test to check
// that missing exports are reported and tolerated, not fatal.

#include <cstring>

#include "nvml/nvml_abi.h"

namespace abi = nvdra::nvml::abi;

extern "C" {
__attribute__((visibility("default"))) abi::nvmlReturn_t nvmlInit_v2() { return abi::NVML_SUCCESS; }
__attribute__((visibility("default"))) abi::nvmlReturn_t nvmlShutdown() { return abi::NVML_SUCCESS; }
__attribute__((visibility("default"))) const char* nvmlErrorString(abi::nvmlReturn_t) {
  return "Minimal Error";
}
__attribute__((visibility("default"))) abi::nvmlReturn_t nvmlSystemGetDriverVersion(char* version,
                                                                                    unsigned int length) {
  if (version == nullptr || length < 7) return abi::NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(version, "418.40", 7);
  return abi::NVML_SUCCESS;
}
}
