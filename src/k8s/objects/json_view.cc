#include "k8s/objects/json_view.h"

#include <cstddef>

#include "common/json_fields.h"

namespace nvdra::k8s {
namespace {

using Json = nlohmann::json;

std::string_view TypeName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::object: return "object";
    case Json::value_t::array: return "array";
    case Json::value_t::string: return "string";
    case Json::value_t::boolean: return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "integer";
    case Json::value_t::number_float: return "number";
    case Json::value_t::null: return "null";
    default: return "other";
  }
}

std::string_view ExpectedName(JsonType type) {
  switch (type) {
    case JsonType::kObject: return "object";
    case JsonType::kArray: return "array";
    case JsonType::kArrayOfObjects: return "array of objects";
    case JsonType::kString: return "string";
    case JsonType::kInteger: return "integer";
    case JsonType::kBoolean: return "boolean";
    case JsonType::kStringMap: return "map of strings";
  }
  return "?";
}

common::Status Mismatch(const std::string& where, JsonType type, const Json& value) {
  return common::InvalidArgumentError(where + ": expected " + std::string(ExpectedName(type)) + ", got " +
                                      std::string(TypeName(value)));
}

common::Status CheckLeaf(const Json& value, JsonType type, const std::string& where) {
  switch (type) {
    case JsonType::kObject:
      if (!value.is_object()) return Mismatch(where, type, value);
      break;
    case JsonType::kArray:
      if (!value.is_array()) return Mismatch(where, type, value);
      break;
    case JsonType::kArrayOfObjects:
      if (!value.is_array()) return Mismatch(where, type, value);
      for (std::size_t i = 0; i < value.size(); ++i) {
        if (!value[i].is_object()) return Mismatch(where + "[" + std::to_string(i) + "]", JsonType::kObject, value[i]);
      }
      break;
    case JsonType::kString:
      if (!value.is_string()) return Mismatch(where, type, value);
      break;
    case JsonType::kInteger:
      if (!value.is_number_integer()) return Mismatch(where, type, value);
      break;
    case JsonType::kBoolean:
      if (!value.is_boolean()) return Mismatch(where, type, value);
      break;
    case JsonType::kStringMap:
      if (!value.is_object()) return Mismatch(where, type, value);
      for (const auto& [key, item] : value.items()) {
        if (!item.is_string()) return Mismatch(where + "." + key, JsonType::kString, item);
      }
      break;
  }
  return {};
}

// Walks `path` from `value` (at `where`); "[]" steps into every element.
// Absent or null fields end the walk without error; a step into a non-object
// is reported by the rule for that parent, so it is skipped here.
common::Status CheckPath(const Json& value, const JsonPath& path, std::size_t step, JsonType type,
                         const std::string& where) {
  if (value.is_null()) return {};
  if (step == path.size()) return CheckLeaf(value, type, where);
  if (path[step] == "[]") {
    if (!value.is_array()) return {};
    for (std::size_t i = 0; i < value.size(); ++i) {
      RETURN_IF_ERROR(CheckPath(value[i], path, step + 1, type, where + "[" + std::to_string(i) + "]"));
    }
    return {};
  }
  if (!value.is_object()) return {};
  auto it = value.find(path[step]);
  if (it == value.end()) return {};
  return CheckPath(*it, path, step + 1, type, where.empty() ? path[step] : where + "." + path[step]);
}

}  // namespace

common::Status CheckShape(const Json& value, const std::vector<ShapeRule>& rules) {
  if (!value.is_object()) return Mismatch("object", JsonType::kObject, value);
  for (const auto& rule : rules) RETURN_IF_ERROR(CheckPath(value, rule.path, 0, rule.type, ""));
  return {};
}

const Json* JsonView::Find(const JsonPath& path) const {
  const Json* at = &json_;
  for (const auto& step : path) {
    at = common::JsonFind(*at, step);
    if (at == nullptr) return nullptr;
  }
  return at;
}

std::string JsonView::GetString(const JsonPath& path) const {
  const Json* v = Find(path);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

std::int64_t JsonView::GetInt(const JsonPath& path, std::int64_t fallback) const {
  return GetOptionalInt(path).value_or(fallback);
}

std::optional<std::int64_t> JsonView::GetOptionalInt(const JsonPath& path) const {
  const Json* v = Find(path);
  if (v == nullptr || !v->is_number_integer()) return std::nullopt;
  return v->get<std::int64_t>();
}

bool JsonView::GetBool(const JsonPath& path, bool fallback) const {
  const Json* v = Find(path);
  return v != nullptr && v->is_boolean() ? v->get<bool>() : fallback;
}

std::map<std::string, std::string> JsonView::GetStringMap(const JsonPath& path) const {
  std::map<std::string, std::string> out;
  const Json* v = Find(path);
  if (v == nullptr || !v->is_object()) return out;
  for (const auto& [key, item] : v->items()) {
    if (item.is_string()) out.emplace(key, item.get<std::string>());
  }
  return out;
}

std::vector<std::string> JsonView::GetStringList(const JsonPath& path) const {
  std::vector<std::string> out;
  const Json* v = Find(path);
  if (v == nullptr || !v->is_array()) return out;
  for (const auto& item : *v) {
    if (item.is_string()) out.push_back(item.get<std::string>());
  }
  return out;
}

void JsonView::Set(const JsonPath& path, Json value) {
  if (path.empty()) {
    json_ = std::move(value);
    return;
  }
  Json* at = &json_;
  for (std::size_t i = 0; i + 1 < path.size(); ++i) {
    if (!at->is_object()) *at = Json::object();
    at = &(*at)[path[i]];
  }
  if (!at->is_object()) *at = Json::object();
  (*at)[path.back()] = std::move(value);
}

void JsonView::Erase(const JsonPath& path) {
  if (path.empty()) return;
  Json* at = &json_;
  for (std::size_t i = 0; i + 1 < path.size(); ++i) {
    if (!at->is_object()) return;
    auto it = at->find(path[i]);
    if (it == at->end()) return;
    at = &*it;
  }
  if (at->is_object()) at->erase(path.back());
}

void JsonView::SetStringMap(const JsonPath& path, const std::map<std::string, std::string>& value) {
  Json object = Json::object();
  for (const auto& [key, item] : value) object[key] = item;
  Set(path, std::move(object));
}

}  // namespace nvdra::k8s
