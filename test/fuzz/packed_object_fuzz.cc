// The informer cache's packed object codec (PackJson / UnpackJson, CBOR).
// Packed bytes never come from outside, but what is packed does: every
// object the API server sends. The input is such an object's JSON text.
// Properties: unpacking gives back the object; packing is deterministic
// (re-packing the unpacked tree gives the same bytes); a PackedObject hands
// out the same object, and its resourceVersion.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "k8s/cache/packed_object.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto object = nlohmann::json::parse(nvdra::fuzz::Text(data, size), nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return 0;
  const std::string packed = nvdra::k8s::cache::PackJson(object);
  const nlohmann::json unpacked = nvdra::k8s::cache::UnpackJson(packed);
  NVDRA_FUZZ_CHECK(unpacked == object, "UnpackJson(PackJson(x)) == x");
  NVDRA_FUZZ_CHECK(nvdra::k8s::cache::PackJson(unpacked) == packed, "packing is deterministic");
  NVDRA_FUZZ_CHECK(nlohmann::json::from_cbor(packed, true, false) == object, "the bytes are CBOR any reader reads");

  const nvdra::k8s::cache::PackedObject copy(object);
  NVDRA_FUZZ_CHECK(*copy.Unpack() == object, "a PackedObject unpacks to its object");
  auto shared = std::make_shared<const nlohmann::json>(object);
  const nvdra::k8s::cache::PackedObject live(shared);
  NVDRA_FUZZ_CHECK(live.Unpack() == shared, "while the tree lives, Unpack hands it out");
  NVDRA_FUZZ_CHECK(live.SameContent(copy), "the same object packs to the same bytes");
  if (object.is_object() && object.contains("metadata") && object["metadata"].is_object() &&
      object["metadata"].contains("resourceVersion") && object["metadata"]["resourceVersion"].is_string()) {
    NVDRA_FUZZ_CHECK(copy.resource_version() == object["metadata"]["resourceVersion"].get<std::string>(),
                     "the resourceVersion is kept");
  }
  return 0;
}
