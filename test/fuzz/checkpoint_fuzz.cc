// checkpoint.json, as the plugins read it at start-up: both layouts (a file
// with "v1" only, from a driver before V2, and one with "v2"). The input is
// tried three ways: as the whole file; as the "v1" object, and as the body of
// the "v2" object after its checksum, each wrapped into a file whose
// checksums are right, so that the decoder past the checksum checks is
// reached too (a random change to a file almost never keeps its checksum).
//
// Property: whatever decodes re-encodes to a file that decodes to the same
// checkpoint, and re-encoding settles (a fixed point after one round).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "fuzz_support.h"
#include "kubeletplugin/checkpoint.h"

namespace {

using nvdra::kubeletplugin::DecodeCheckpoint;
using nvdra::kubeletplugin::EncodeCheckpoint;
using nvdra::kubeletplugin::KubeletChecksum;

void DecodeAndRoundTrip(std::string_view file) {
  const auto checkpoint = DecodeCheckpoint(file);
  if (!checkpoint.ok()) return;
  const std::string encoded = EncodeCheckpoint(*checkpoint);
  const auto again = DecodeCheckpoint(encoded);
  NVDRA_FUZZ_CHECK(again.ok(), "an encoded checkpoint decodes");
  NVDRA_FUZZ_CHECK(*again == *checkpoint, "decode(encode(c)) == c");
  // A fixed point from the second encoding on, not the first: a float -0.0
  // in a status is written "-0", as Go writes a float64, and "-0" reads back
  // as the integer 0 (nlohmann::json), written "0". Equal values, as the
  // check above says; only the spelling settles.
  const std::string second = EncodeCheckpoint(*again);
  const auto third = DecodeCheckpoint(second);
  NVDRA_FUZZ_CHECK(third.ok() && *third == *checkpoint, "a re-encoded checkpoint decodes to the same");
  const std::string reencoded = EncodeCheckpoint(*third);
  if (reencoded != second) {
    std::fprintf(stderr, "encoded:\n%s\nre-encoded:\n%s\n", second.c_str(), reencoded.c_str());
  }
  NVDRA_FUZZ_CHECK(reencoded == second, "encoding settles after one round");
}

// {"checksum":C1,"v1":<v1>} with C1 right.
std::string V1File(std::string_view v1) {
  const auto c1 = KubeletChecksum(fmt::format("{{\"checksum\":0,\"v1\":{}}}", v1));
  return fmt::format("{{\"checksum\":{},\"v1\":{}}}", c1, v1);
}

// {"checksum":C1,"v2":{"checksum":C2<rest>} with both checksums right; `rest`
// is the v2 object after its checksum (",\"preparedClaims\":{...}}").
std::string V2File(std::string_view rest) {
  const auto c1 = KubeletChecksum("{\"checksum\":0}");
  const auto c2 = KubeletChecksum(fmt::format("{{\"checksum\":0{}", rest));
  return fmt::format("{{\"checksum\":{},\"v2\":{{\"checksum\":{}{}}}", c1, c2, rest);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto input = nvdra::fuzz::Text(data, size);
  DecodeAndRoundTrip(input);
  DecodeAndRoundTrip(V1File(input));
  DecodeAndRoundTrip(V2File(input));
  return 0;
}
