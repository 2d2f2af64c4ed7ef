// Durations and times from flags and files: Go durations ("1.5h", "300ms")
// of the timing flags, RFC 3339 times (a checkpoint's abortedAt), Go booleans
// and --feature-gates lists. Properties: a parsed duration written by
// FormatDuration parses back to it (within a nanosecond: fractional seconds
// are written as a double); a parsed time written by FormatGoTime parses back
// to it, whole seconds.

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "common/feature_gates.h"
#include "common/flags.h"
#include "fuzz_support.h"
#include "kubeletplugin/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace std::chrono;
  const auto text = nvdra::fuzz::Text(data, size);
  if (const auto duration = nvdra::common::ParseGoDuration(text); duration.ok()) {
    const auto again = nvdra::common::ParseGoDuration(nvdra::common::FormatDuration(*duration));
    NVDRA_FUZZ_CHECK(again.ok(), "FormatDuration's text parses");
    NVDRA_FUZZ_CHECK(*again - *duration <= nanoseconds(1) && *duration - *again <= nanoseconds(1),
                     "FormatDuration's text parses to the same duration");
  }
  if (const auto time = nvdra::kubeletplugin::ParseGoTime(text); time.ok()) {
    const auto again = nvdra::kubeletplugin::ParseGoTime(nvdra::kubeletplugin::FormatGoTime(*time));
    NVDRA_FUZZ_CHECK(again.ok(), "FormatGoTime's text parses");
    NVDRA_FUZZ_CHECK(*again == floor<seconds>(*time), "FormatGoTime keeps whole seconds");
  }
  (void)nvdra::common::ParseGoBool(text);
  (void)nvdra::common::FeatureGates::Parse(text);
  return 0;
}
