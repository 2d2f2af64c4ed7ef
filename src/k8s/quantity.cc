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

namespace nvdra::k8s {
namespace {

// 128-bit arithmetic keeps a 30-digit mantissa times 2^60 exact.
__extension__ typedef unsigned __int128 Uint128;
__extension__ typedef __int128 Int128;

struct Suffix {
  std::string_view name;
  int base;      // 2 or 10
  int exponent;  // of `base`
};

constexpr std::array<Suffix, 16> kSuffixes = {{
    {"Ki", 2, 10}, {"Mi", 2, 20}, {"Gi", 2, 30}, {"Ti", 2, 40}, {"Pi", 2, 50}, {"Ei", 2, 60},
    {"n", 10, -9}, {"u", 10, -6}, {"m", 10, -3}, {"", 10, 0}, {"k", 10, 3}, {"M", 10, 6},
    {"G", 10, 9}, {"T", 10, 12}, {"P", 10, 15}, {"E", 10, 18},
}};

common::Status NotAQuantity(std::string_view text, std::string_view why) {
  return common::InvalidArgumentError(std::string("\"") + std::string(text) + "\" is not a quantity (" +
                                      std::string(why) + "); write an integer or decimal with an optional "
                                      "suffix, such as 10Gi, 512Mi, 1.5G or 1e9");
}

}  // namespace

common::StatusOr<std::int64_t> ParseQuantityValue(std::string_view text) {
  std::string_view rest = text;
  bool negative = false;
  if (!rest.empty() && (rest.front() == '+' || rest.front() == '-')) {
    negative = rest.front() == '-';
    rest.remove_prefix(1);
  }
  // Digits as one integer `mantissa` with `fraction_digits` after the point.
  // Digits beyond 30 significant ones cannot change an int64 result's
  // rounding in practice, but they would overflow: refuse them.
  Uint128 mantissa = 0;
  int digits = 0;
  int fraction_digits = 0;
  bool seen_point = false;
  std::size_t i = 0;
  for (; i < rest.size(); ++i) {
    const char c = rest[i];
    if (c == '.' && !seen_point) {
      seen_point = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    if (mantissa != 0 || c != '0') ++digits;
    if (digits > 30) return NotAQuantity(text, "too many digits");
    mantissa = mantissa * 10 + static_cast<unsigned>(c - '0');
    if (seen_point) ++fraction_digits;
  }
  const std::string_view number = rest.substr(0, i);
  if (number.empty() || number == ".") return NotAQuantity(text, "no number");
  std::string_view suffix_text = rest.substr(i);

  int base = 10;
  int exponent = 0;
  if (!suffix_text.empty() && (suffix_text.front() == 'e' || suffix_text.front() == 'E') &&
      suffix_text.size() > 1) {
    // An exponent ("1e3", "5E-2"); a lone "E" is the exa suffix.
    std::string_view power = suffix_text.substr(1);
    bool power_negative = false;
    if (power.front() == '+' || power.front() == '-') {
      power_negative = power.front() == '-';
      power.remove_prefix(1);
    }
    if (power.empty() || power.size() > 3) return NotAQuantity(text, "bad exponent");
    for (char c : power) {
      if (c < '0' || c > '9') return NotAQuantity(text, "bad exponent");
      exponent = exponent * 10 + (c - '0');
    }
    if (power_negative) exponent = -exponent;
  } else {
    bool known = false;
    for (const Suffix& suffix : kSuffixes) {
      if (suffix.name == suffix_text) {
        base = suffix.base;
        exponent = suffix.exponent;
        known = true;
        break;
      }
    }
    if (!known) return NotAQuantity(text, "unknown suffix \"" + std::string(suffix_text) + "\"");
  }

  // value = mantissa * base^exponent / 10^fraction_digits, rounded up.
  constexpr Uint128 kLimit = static_cast<Uint128>(INT64_MAX) + 1;
  Uint128 numerator = mantissa;
  Uint128 denominator = 1;
  auto scale = [&](Uint128& value, int times, unsigned factor) {
    for (int k = 0; k < times; ++k) {
      if (value > kLimit * 1000000000000ULL) return false;  // far beyond int64 even after division
      value *= factor;
    }
    return true;
  };
  int decimal_exponent = (base == 10 ? exponent : 0) - fraction_digits;
  bool fits = true;
  if (base == 2) fits = scale(numerator, exponent, 2);
  if (decimal_exponent >= 0) {
    fits = fits && scale(numerator, decimal_exponent, 10);
  } else {
    if (-decimal_exponent > 36) return std::int64_t{negative ? 0 : (mantissa == 0 ? 0 : 1)};
    fits = fits && scale(denominator, -decimal_exponent, 10);
  }
  if (!fits) return NotAQuantity(text, "too large");
  Uint128 quotient = numerator / denominator;
  const bool remainder = numerator % denominator != 0;
  // Value() rounds away from zero's floor: up for positive values, and for
  // negative ones toward zero (ceil of a negative number).
  if (remainder && !negative) ++quotient;
  if (quotient > (negative ? kLimit : kLimit - 1)) return NotAQuantity(text, "too large");
  if (negative) return static_cast<std::int64_t>(-static_cast<Int128>(quotient));
  return static_cast<std::int64_t>(quotient);
}

}  // namespace nvdra::k8s
