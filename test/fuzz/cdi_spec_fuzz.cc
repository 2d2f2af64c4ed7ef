// CDI spec JSON (what the plugins write and, for claims prepared before a
// restart, read back). Property: a spec that parses and validates writes JSON
// that parses to a spec writing the same JSON.

#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "kubeletplugin/cdi_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto json = nlohmann::json::parse(nvdra::fuzz::Text(data, size), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  const auto spec = nvdra::kubeletplugin::CdiSpecFromJson(json);
  if (!spec.ok()) return 0;
  (void)nvdra::kubeletplugin::MinimumCdiVersion(*spec);
  if (!nvdra::kubeletplugin::ValidateCdiSpec(*spec).ok()) return 0;
  const nlohmann::json written = nvdra::kubeletplugin::CdiSpecToJson(*spec);
  (void)nvdra::kubeletplugin::EncodeCdiSpec(*spec);
  const auto again = nvdra::kubeletplugin::CdiSpecFromJson(written);
  NVDRA_FUZZ_CHECK(again.ok(), "a written spec parses");
  NVDRA_FUZZ_CHECK(nvdra::kubeletplugin::ValidateCdiSpec(*again).ok(), "a written spec validates");
  NVDRA_FUZZ_CHECK(nvdra::kubeletplugin::CdiSpecToJson(*again) == written, "writing is a fixed point");
  return 0;
}
