#include "k8s/objects/object.h"

#include <algorithm>

namespace nvdra::k8s {

using Json = nlohmann::json;

std::string Object::Key() const {
  std::string ns = namespace_name();
  return ns.empty() ? name() : ns + "/" + name();
}

void Object::set_resource_version(std::string_view value) {
  if (value.empty()) {
    Erase({"metadata", "resourceVersion"});
  } else {
    Set({"metadata", "resourceVersion"}, value);
  }
}

std::optional<std::string> Object::deletion_timestamp() const {
  const Json* v = Find({"metadata", "deletionTimestamp"});
  if (v == nullptr || !v->is_string()) return std::nullopt;
  return v->get<std::string>();
}

std::string Object::label(std::string_view key) const { return GetString({"metadata", "labels", std::string(key)}); }

bool Object::HasFinalizer(std::string_view finalizer) const {
  auto all = finalizers();
  return std::find(all.begin(), all.end(), finalizer) != all.end();
}

bool Object::AddFinalizer(std::string_view finalizer) {
  if (HasFinalizer(finalizer)) return false;
  const Json* list = Find({"metadata", "finalizers"});
  Json updated = list != nullptr && list->is_array() ? *list : Json::array();
  updated.push_back(finalizer);
  Set({"metadata", "finalizers"}, std::move(updated));
  return true;
}

bool Object::RemoveFinalizer(std::string_view finalizer) {
  const Json* list = Find({"metadata", "finalizers"});
  if (list == nullptr || !list->is_array()) return false;
  Json updated = Json::array();
  bool removed = false;
  for (const auto& item : *list) {
    if (item.is_string() && item.get<std::string>() == finalizer) {
      removed = true;
    } else {
      updated.push_back(item);
    }
  }
  if (removed) Set({"metadata", "finalizers"}, std::move(updated));
  return removed;
}

std::vector<ShapeRule> Object::MetadataRules() {
  return {
      {{"apiVersion"}, JsonType::kString},
      {{"kind"}, JsonType::kString},
      {{"metadata"}, JsonType::kObject},
      {{"metadata", "name"}, JsonType::kString},
      {{"metadata", "namespace"}, JsonType::kString},
      {{"metadata", "uid"}, JsonType::kString},
      {{"metadata", "resourceVersion"}, JsonType::kString},
      {{"metadata", "generation"}, JsonType::kInteger},
      {{"metadata", "labels"}, JsonType::kStringMap},
      {{"metadata", "annotations"}, JsonType::kStringMap},
      {{"metadata", "finalizers"}, JsonType::kArray},
      {{"metadata", "ownerReferences"}, JsonType::kArrayOfObjects},
      {{"metadata", "deletionTimestamp"}, JsonType::kString},
  };
}

Json Object::NewJson(std::string_view api_version, std::string_view kind, std::string_view name, std::string_view ns) {
  Json object = {{"apiVersion", api_version}, {"kind", kind}, {"metadata", {{"name", name}}}};
  if (!ns.empty()) object["metadata"]["namespace"] = ns;
  return object;
}

}  // namespace nvdra::k8s
