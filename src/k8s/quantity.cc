#include "k8s/quantity.h"

#include <array>
#include <string_view>

namespace nvdra::k8s {
namespace {

// Divides `magnitude` by `base` while it divides exactly, up to the last
// suffix; returns the suffix index reached.
std::size_t Reduce(std::uint64_t& magnitude, std::uint64_t base, std::size_t max_index) {
  std::size_t index = 0;
  while (magnitude != 0 && magnitude % base == 0 && index < max_index) {
    magnitude /= base;
    ++index;
  }
  return index;
}

std::uint64_t Magnitude(std::int64_t value) {
  // Two's complement: the magnitude of INT64_MIN still fits in uint64.
  return value < 0 ? ~static_cast<std::uint64_t>(value) + 1 : static_cast<std::uint64_t>(value);
}

}  // namespace

std::string FormatDecimalSI(std::int64_t value) {
  static constexpr std::array<std::string_view, 7> kSuffixes = {"", "k", "M", "G", "T", "P", "E"};
  std::uint64_t magnitude = Magnitude(value);
  std::size_t index = Reduce(magnitude, 1000, kSuffixes.size() - 1);
  return (value < 0 ? "-" : "") + std::to_string(magnitude) + std::string(kSuffixes[index]);
}

std::string FormatBinarySI(std::int64_t value) {
  if (value > -1024 && value < 1024) return FormatDecimalSI(value);
  static constexpr std::array<std::string_view, 7> kSuffixes = {"",   "Ki", "Mi", "Gi",
                                                                "Ti", "Pi", "Ei"};
  std::uint64_t magnitude = Magnitude(value);
  std::size_t index = Reduce(magnitude, 1024, kSuffixes.size() - 1);
  return (value < 0 ? "-" : "") + std::to_string(magnitude) + std::string(kSuffixes[index]);
}

}  // namespace nvdra::k8s
