#pragma once

// JsonView: the base of every typed object and of every typed list element
// (a device of a ResourceSlice, a result of a ResourceClaim...). It owns a
// nlohmann::json and reads and writes fields by path, so fields the code does
// not know (written by a newer server) stay in the json untouched: a typed
// object read, changed through its setters and written back keeps them byte
// for byte.
// Defines: JsonPath, JsonType, ShapeRule, CheckShape(), JsonView.
//
// Reads never throw and never fail: a missing field, or one of another type,
// reads as the default (empty string, 0, false, empty list). Setters create
// the objects along the path. Shapes are checked once, where json enters
// (each kind's FromJson), so bad input becomes a Status there.
//
// Ownership: a value; owns its json. Thread-safety: thread-compatible.

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace nvdra::k8s {

// Field names from the root, e.g. {"spec", "pool", "name"}.
using JsonPath = std::vector<std::string>;

enum class JsonType { kObject, kArray, kArrayOfObjects, kString, kInteger, kBoolean, kStringMap };

// "`path` must be a `type` when present". For kArrayOfObjects a path may go
// through arrays: {"status", "nodes"} checks every element of status.nodes.
struct ShapeRule {
  JsonPath path;
  JsonType type;
};

// OK when `value` is an object and every present field matches its rule;
// kInvalidArgument naming the field (`spec.devices[2]: expected object, got
// string`) otherwise. A field absent or null is fine. Rules for paths under
// an array of objects are written with "[]": {"spec", "devices", "[]", "name"}.
common::Status CheckShape(const nlohmann::json& value, const std::vector<ShapeRule>& rules);

class JsonView {
 public:
  JsonView() : json_(nlohmann::json::object()) {}
  // Takes `json` as is; callers check its shape first (CheckShape).
  explicit JsonView(nlohmann::json json) : json_(std::move(json)) {}

  const nlohmann::json& json() const& { return json_; }
  nlohmann::json&& json() && { return std::move(json_); }
  // For fields without an accessor. Writing a wrong type here is the
  // caller's business; reads still never throw.
  nlohmann::json& mutable_json() { return json_; }

  friend bool operator==(const JsonView& a, const JsonView& b) { return a.json_ == b.json_; }

 protected:
  // The value at `path`, or nullptr when absent, null or a step is not an
  // object (common::JsonFind).
  const nlohmann::json* Find(const JsonPath& path) const;
  std::string GetString(const JsonPath& path) const;
  std::int64_t GetInt(const JsonPath& path, std::int64_t fallback = 0) const;
  std::optional<std::int64_t> GetOptionalInt(const JsonPath& path) const;
  bool GetBool(const JsonPath& path, bool fallback = false) const;
  std::map<std::string, std::string> GetStringMap(const JsonPath& path) const;
  std::vector<std::string> GetStringList(const JsonPath& path) const;

  // Sets `path` to `value`, creating (or replacing non-object) parents.
  void Set(const JsonPath& path, nlohmann::json value);
  // Removes the field at `path`; absent is fine.
  void Erase(const JsonPath& path);
  void SetStringMap(const JsonPath& path, const std::map<std::string, std::string>& value);

  // Elements of the array at `path` that are objects, each as a T.
  template <typename T>
  std::vector<T> GetList(const JsonPath& path) const {
    std::vector<T> out;
    const nlohmann::json* list = Find(path);
    if (list == nullptr || !list->is_array()) return out;
    for (const auto& item : *list) {
      if (item.is_object()) out.emplace_back(item);
    }
    return out;
  }
  // Replaces the array at `path` with the elements' json (each keeps its own
  // unknown fields).
  template <typename T>
  void SetList(const JsonPath& path, const std::vector<T>& items) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& item : items) list.push_back(item.json());
    Set(path, std::move(list));
  }

 private:
  nlohmann::json json_;
};

}  // namespace nvdra::k8s
