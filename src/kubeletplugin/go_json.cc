#include "kubeletplugin/go_json.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <system_error>

namespace nvdra::kubeletplugin {
namespace {

constexpr char kHex[] = "0123456789abcdef";

// Length of the valid UTF-8 sequence starting at text[i], or 0 when the bytes
// there are not one (Go's utf8.DecodeRune returning RuneError, size 1).
// Rejects overlong forms, surrogates and code points above U+10FFFF, as Go does.
std::size_t ValidUtf8Length(std::string_view text, std::size_t i, std::uint32_t& rune) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  const std::size_t left = text.size() - i;
  auto cont = [&](std::size_t k) { return k < text.size() && (byte(k) & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (left < 2 || !cont(i + 1)) return 0;
    rune = ((b0 & 0x1Fu) << 6) | (byte(i + 1) & 0x3Fu);
    return 2;
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (left < 3 || !cont(i + 1) || !cont(i + 2)) return 0;
    rune = ((b0 & 0x0Fu) << 12) | ((byte(i + 1) & 0x3Fu) << 6) | (byte(i + 2) & 0x3Fu);
    if (rune < 0x800 || (rune >= 0xD800 && rune <= 0xDFFF)) return 0;
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (left < 4 || !cont(i + 1) || !cont(i + 2) || !cont(i + 3)) return 0;
    rune = ((b0 & 0x07u) << 18) | ((byte(i + 1) & 0x3Fu) << 12) | ((byte(i + 2) & 0x3Fu) << 6) |
           (byte(i + 3) & 0x3Fu);
    if (rune < 0x10000 || rune > 0x10FFFF) return 0;
    return 4;
  }
  return 0;
}

void AppendGoFloat(std::string& out, double value) {
  // Go rejects NaN and infinities with an error; they cannot come from parsed
  // JSON, and null is the least surprising spelling for a value built in code.
  if (!std::isfinite(value)) {
    out += "null";
    return;
  }
  char buf[64];
  const double abs = std::fabs(value);
  const bool exponent = abs != 0 && (abs < 1e-6 || abs >= 1e21);
  const auto result = std::to_chars(
      buf, buf + sizeof(buf), value,
      exponent ? std::chars_format::scientific : std::chars_format::fixed);
  std::string_view text(buf, static_cast<std::size_t>(result.ptr - buf));
  if (exponent && text.size() >= 4 && text[text.size() - 4] == 'e' &&
      text[text.size() - 3] == '-' && text[text.size() - 2] == '0') {
    // to_chars, like Go's strconv, pads the exponent to two digits; Go's
    // encoder then trims "e-07" to "e-7" (but leaves "e+07").
    out.append(text.substr(0, text.size() - 2));
    out += text.back();
    return;
  }
  out.append(text);
}

}  // namespace

void AppendGoJsonString(std::string& out, std::string_view text) {
  out += '"';
  std::size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) {
      switch (b) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (b < 0x20 || b == '<' || b == '>' || b == '&') {
            out += "\\u00";
            out += kHex[b >> 4];
            out += kHex[b & 0xF];
          } else {
            out += static_cast<char>(b);
          }
      }
      ++i;
      continue;
    }
    std::uint32_t rune = 0;
    const std::size_t size = ValidUtf8Length(text, i, rune);
    if (size == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (rune == 0x2028 || rune == 0x2029) {
      out += rune == 0x2028 ? "\\u2028" : "\\u2029";
    } else {
      out.append(text.substr(i, size));
    }
    i += size;
  }
  out += '"';
}

void AppendGoJson(std::string& out, const nlohmann::ordered_json& value) {
  using Type = nlohmann::ordered_json::value_t;
  switch (value.type()) {
    case Type::null:
    case Type::discarded:
      out += "null";
      return;
    case Type::boolean:
      out += value.get<bool>() ? "true" : "false";
      return;
    case Type::number_integer:
      out += std::to_string(value.get<std::int64_t>());
      return;
    case Type::number_unsigned:
      out += std::to_string(value.get<std::uint64_t>());
      return;
    case Type::number_float:
      AppendGoFloat(out, value.get<double>());
      return;
    case Type::string:
      AppendGoJsonString(out, value.get_ref<const std::string&>());
      return;
    case Type::binary:
      // Go writes []byte as a base64 string; nothing here produces binary
      // values, so this is a programmer error rather than input.
      std::abort();
    case Type::array: {
      out += '[';
      bool first = true;
      for (const auto& element : value) {
        if (!first) out += ',';
        first = false;
        AppendGoJson(out, element);
      }
      out += ']';
      return;
    }
    case Type::object: {
      out += '{';
      bool first = true;
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (!first) out += ',';
        first = false;
        AppendGoJsonString(out, it.key());
        out += ':';
        AppendGoJson(out, it.value());
      }
      out += '}';
      return;
    }
  }
}

std::string GoJson(const nlohmann::ordered_json& value) {
  std::string out;
  AppendGoJson(out, value);
  return out;
}

}  // namespace nvdra::kubeletplugin
