// Kubernetes quantities ("10Gi", "1.5G", "100m", "1e3"), as MPS memory
// limits and device capacities carry them. Property: a parsed value written
// in either SI form parses back to itself.

#include <cstddef>
#include <cstdint>

#include "fuzz_support.h"
#include "k8s/quantity.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto value = nvdra::k8s::ParseQuantityValue(nvdra::fuzz::Text(data, size));
  if (!value.ok()) return 0;
  const auto binary = nvdra::k8s::ParseQuantityValue(nvdra::k8s::FormatBinarySI(*value));
  NVDRA_FUZZ_CHECK(binary.ok() && *binary == *value, "FormatBinarySI reads back");
  const auto decimal = nvdra::k8s::ParseQuantityValue(nvdra::k8s::FormatDecimalSI(*value));
  NVDRA_FUZZ_CHECK(decimal.ok() && *decimal == *value, "FormatDecimalSI reads back");
  return 0;
}
