#pragma once

// Object: a typed view of any Kubernetes object (apiVersion, kind, metadata),
// the base of the per-kind classes (compute_domain.h).
// Defines: Object, FromJson<T>(), ParseJson<T>().
//
// A view owns a copy of its json. Code that only reads objects an informer
// shares (ObjectPtr) reads them in place with common/json_fields.h instead:
// the compute-domain controller reads every daemon pod of a domain per
// reconcile, and copying them was most of its CPU time.
//
// Every kind class K has: kApiVersion, kKind, Resource() (its ResourceRef),
// ShapeRules() (what FromJson checks), New(...) for a fresh object, and
// accessors for the fields the driver uses. Unknown fields survive: see
// json_view.h.
//
// Ownership: values; each owns its json. Thread-safety: thread-compatible.

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "k8s/objects/json_view.h"

namespace nvdra::k8s {

class Object : public JsonView {
 public:
  using JsonView::JsonView;

  std::string api_version() const { return GetString({"apiVersion"}); }
  std::string kind() const { return GetString({"kind"}); }

  std::string name() const { return GetString({"metadata", "name"}); }
  void set_name(std::string_view value) { Set({"metadata", "name"}, value); }
  std::string namespace_name() const { return GetString({"metadata", "namespace"}); }
  void set_namespace_name(std::string_view value) { Set({"metadata", "namespace"}, value); }
  // "ns/name", or "name" for a cluster-scoped object (as informer keys).
  std::string Key() const;
  std::string uid() const { return GetString({"metadata", "uid"}); }
  std::string resource_version() const { return GetString({"metadata", "resourceVersion"}); }
  // Empty clears it (an update without a precondition).
  void set_resource_version(std::string_view value);
  std::int64_t generation() const { return GetInt({"metadata", "generation"}); }
  std::string creation_timestamp() const { return GetString({"metadata", "creationTimestamp"}); }
  // Set once deletion started (finalizers or grace keep the object).
  std::optional<std::string> deletion_timestamp() const;

  std::map<std::string, std::string> labels() const { return GetStringMap({"metadata", "labels"}); }
  void set_labels(const std::map<std::string, std::string>& value) { SetStringMap({"metadata", "labels"}, value); }
  // "" when absent.
  std::string label(std::string_view key) const;
  void SetLabel(std::string_view key, std::string_view value) { Set({"metadata", "labels", std::string(key)}, value); }
  void RemoveLabel(std::string_view key) { Erase({"metadata", "labels", std::string(key)}); }

  std::map<std::string, std::string> annotations() const { return GetStringMap({"metadata", "annotations"}); }
  void set_annotations(const std::map<std::string, std::string>& value) {
    SetStringMap({"metadata", "annotations"}, value);
  }
  void SetAnnotation(std::string_view key, std::string_view value) {
    Set({"metadata", "annotations", std::string(key)}, value);
  }

  std::vector<std::string> finalizers() const { return GetStringList({"metadata", "finalizers"}); }
  void set_finalizers(const std::vector<std::string>& value) { Set({"metadata", "finalizers"}, value); }
  bool HasFinalizer(std::string_view finalizer) const;
  // True when added (false when already there).
  bool AddFinalizer(std::string_view finalizer);
  // True when removed (false when absent).
  bool RemoveFinalizer(std::string_view finalizer);

  // The rules every kind shares: metadata and its known fields.
  static std::vector<ShapeRule> MetadataRules();

 protected:
  // {"apiVersion": api_version, "kind": kind, "metadata": {"name": name[, "namespace": ns]}}.
  static nlohmann::json NewJson(std::string_view api_version, std::string_view kind, std::string_view name,
                                std::string_view ns = "");
};

// `json` as a K after checking its shape (K::ShapeRules()). kInvalidArgument
// naming the kind, the object and the field when a field has the wrong type.
template <typename K>
common::StatusOr<K> FromJson(nlohmann::json json) {
  common::Status status = CheckShape(json, K::ShapeRules());
  if (!status.ok()) {
    std::string name;
    if (json.is_object() && json.contains("metadata") && json["metadata"].is_object() &&
        json["metadata"].contains("name") && json["metadata"]["name"].is_string()) {
      name = " " + json["metadata"]["name"].get<std::string>();
    }
    return std::move(status).WithContext(std::string(K::kKind) + name);
  }
  return K(std::move(json));
}

// Parses JSON text, then FromJson. kInvalidArgument for text that is not
// JSON (the parser's exception does not escape).
template <typename K>
common::StatusOr<K> ParseJson(std::string_view text) {
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return common::InvalidArgumentError(std::string(K::kKind) + ": not valid JSON");
  return FromJson<K>(std::move(json));
}

}  // namespace nvdra::k8s
