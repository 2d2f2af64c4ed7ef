#pragma once

// JSON text exactly as Go's encoding/json.Marshal writes it, for files that the
// Go driver and ours must both read and checksum (checkpoint.json).
//
// Defines: AppendGoJson, GoJson, AppendGoJsonString.
//
// What "as Go writes it" means here, from encoding/json (Go 1.22+):
//  - compact: no whitespace;
//  - strings: `"` and `\` backslash-escaped; \b \f \n \r \t short-escaped;
//    other bytes below 0x20 as \u00xx (lower-case hex); <, > and & as \u003c,
//    \u003e, \u0026 (HTML-safe, Marshal's default); U+2028 and U+2029 as
//    \u2028 and \u2029; each byte of invalid UTF-8 as \ufffd; all else (DEL,
//    non-ASCII) as raw UTF-8;
//  - integers in decimal; floats as Go formats a float64: the shortest
//    round-trip digits, plain notation for 1e-6 <= |x| < 1e21, otherwise
//    exponent notation with the exponent not zero-padded (1e-7, 1e+21).
//  - object members in the order the json value holds them. Go writes struct
//    fields in declaration order and map keys sorted by bytes; the caller
//    builds values in that order (nlohmann::ordered_json keeps it).
// Go keeps a json.RawMessage / runtime.RawExtension as written (number and
// escape spellings included); this writer cannot know the original spelling
// of a parsed number or escape, so such literals come out normalised.
//
// Ownership: pure functions. Thread-safety: thread-safe.

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace nvdra::kubeletplugin {

// Appends `value` to `out` as Go's json.Marshal would write it.
void AppendGoJson(std::string& out, const nlohmann::ordered_json& value);

// `value` as Go's json.Marshal would write it.
std::string GoJson(const nlohmann::ordered_json& value);

// Appends `text` as a quoted Go JSON string; `text` need not be valid UTF-8.
void AppendGoJsonString(std::string& out, std::string_view text);

}  // namespace nvdra::kubeletplugin
