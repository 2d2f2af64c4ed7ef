#pragma once

// Reading fields of JSON the driver did not write itself (API objects,
// opaque configs, OCI state), without exceptions: the one set of helpers for
// code that walks nlohmann::json or nlohmann::ordered_json by hand.
// Defines: JsonKeys, JsonFind(), JsonMember(), JsonString(), JsonInt(),
// JsonBool(), JsonStrings().
//
// Every helper takes the object and either one key or a path of keys from the
// outer object inward ({"metadata", "labels", "app"}). A step that is not an
// object, a key that is absent and a value that is null all read as "absent";
// a value of another type than asked for reads as the default (empty string,
// 0 or the fallback, false, empty list). Nothing here throws: nlohmann's
// value() and at() do on a wrong type, which would let bad input from the
// server or a user escape as an exception.
//
// No copies: JsonFind and JsonMember return references into the object, so
// they are fit for the informers' shared objects on hot paths.
//
// Header only. Ownership: none. Thread-safety: pure functions (thread-safe
// on objects nobody mutates meanwhile).

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace nvdra::common {

// Keys from the outer object inward, e.g. {"spec", "pool", "name"}.
using JsonKeys = std::initializer_list<std::string_view>;

// Json is nlohmann::json or nlohmann::ordered_json (any basic_json).
template <typename Json>
concept JsonValue = requires(const Json& j) {
  typename Json::object_t;
  { j.is_object() } -> std::same_as<bool>;
};

// object[key]; nullptr when `object` is not an object, the key is absent or
// its value is null.
template <JsonValue Json>
const Json* JsonFind(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

// The value at `path`; nullptr when any step is absent, null or not an
// object. An empty path is `object` itself (nullptr when it is null).
template <JsonValue Json>
const Json* JsonFind(const Json& object, JsonKeys path) {
  const Json* at = object.is_null() ? nullptr : &object;
  for (std::string_view key : path) {
    if (at == nullptr) return nullptr;
    at = JsonFind(*at, key);
  }
  return at;
}

// object[key], or a null value when JsonFind would return nullptr.
template <JsonValue Json>
const Json& JsonMember(const Json& object, std::string_view key) {
  static const Json kNull;
  const Json* value = JsonFind(object, key);
  return value != nullptr ? *value : kNull;
}

template <JsonValue Json>
const Json& JsonMember(const Json& object, JsonKeys path) {
  static const Json kNull;
  const Json* value = JsonFind(object, path);
  return value != nullptr ? *value : kNull;
}

// The string at `key` / `path`; "" when absent, null or not a string.
template <JsonValue Json>
std::string JsonString(const Json& object, std::string_view key) {
  const Json* value = JsonFind(object, key);
  return value != nullptr && value->is_string() ? value->template get<std::string>() : std::string();
}

template <JsonValue Json>
std::string JsonString(const Json& object, JsonKeys path) {
  const Json* value = JsonFind(object, path);
  return value != nullptr && value->is_string() ? value->template get<std::string>() : std::string();
}

// The integer at `path`; `fallback` when absent, null or not an integer (a
// float such as 1.5 is not one).
template <JsonValue Json>
std::int64_t JsonInt(const Json& object, JsonKeys path, std::int64_t fallback = 0) {
  const Json* value = JsonFind(object, path);
  return value != nullptr && value->is_number_integer() ? value->template get<std::int64_t>() : fallback;
}

// The boolean at `path`; `fallback` when absent, null or not a boolean.
template <JsonValue Json>
bool JsonBool(const Json& object, JsonKeys path, bool fallback = false) {
  const Json* value = JsonFind(object, path);
  return value != nullptr && value->is_boolean() ? value->template get<bool>() : fallback;
}

// The strings of the array at `path`, in order; elements that are not
// strings are skipped. Empty when absent, null or not an array.
template <JsonValue Json>
std::vector<std::string> JsonStrings(const Json& object, JsonKeys path) {
  std::vector<std::string> out;
  const Json* list = JsonFind(object, path);
  if (list == nullptr || !list->is_array()) return out;
  for (const Json& item : *list) {
    if (item.is_string()) out.push_back(item.template get<std::string>());
  }
  return out;
}

}  // namespace nvdra::common
