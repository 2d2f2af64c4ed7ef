#pragma once

// What the fuzz targets share: the input as text, a check that turns a broken
// property into a crash libFuzzer records, and the feature-gate settings the
// config validators are run under.
//
// Thread-safety: pure functions and immutable statics.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "common/feature_gates.h"

namespace nvdra::fuzz {

inline std::string_view Text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A property every input must keep; a violation aborts, which libFuzzer
// reports as a crash and saves the input.
#define NVDRA_FUZZ_CHECK(condition, what)                                                  \
  do {                                                                                     \
    if (!(condition)) {                                                                    \
      std::fprintf(stderr, "fuzz property violated: %s (%s)\n", (what), #condition);      \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

// Defaults, and every gate a config kind can need turned on: a validator's
// branches behind a gate are reached only with it.
inline const std::vector<common::FeatureGates>& GateSettings() {
  static const std::vector<common::FeatureGates> settings = [] {
    std::vector<common::FeatureGates> out{common::FeatureGates::Defaults()};
    auto all = common::FeatureGates::Parse(
        "TimeSlicingSettings=true,MPSSupport=true,PassthroughSupport=true,FabricTopologySupport=true");
    if (!all.ok()) {
      std::fprintf(stderr, "fuzz: feature gates: %s\n", all.status().ToString().c_str());
      std::abort();
    }
    out.push_back(*std::move(all));
    return out;
  }();
  return settings;
}

}  // namespace nvdra::fuzz
