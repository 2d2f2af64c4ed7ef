#pragma once

// Typed views of the DRA kinds (resource.k8s.io/v1): ResourceSlice,
// ResourceClaim, ResourceClaimTemplate, DeviceClass, with their list
// elements (Device, DeviceRequestResult, ResourceClaimConsumerReference).
// Attribute, capacity, selector and config maps stay json: the driver builds
// them whole, and they keep whatever a newer server adds. See object.h.
// Ownership: values. Thread-safety: thread-compatible.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "k8s/client.h"
#include "k8s/objects/object.h"

namespace nvdra::k8s {

// spec.devices[i] of a ResourceSlice.
class Device : public JsonView {
 public:
  using JsonView::JsonView;
  static Device New(std::string_view name) { return Device(nlohmann::json{{"name", name}}); }
  std::string name() const { return GetString({"name"}); }
  // {"<name>": {"string"|"int"|"bool"|"version": value}}, empty when absent.
  nlohmann::json attributes() const { return GetObject({"attributes"}); }
  void set_attributes(nlohmann::json value) { Set({"attributes"}, std::move(value)); }
  // {"<name>": {"value": "<quantity>"}}, empty when absent.
  nlohmann::json capacity() const { return GetObject({"capacity"}); }
  void set_capacity(nlohmann::json value) { Set({"capacity"}, std::move(value)); }
};

class ResourceSlice : public Object {
 public:
  static constexpr char kApiVersion[] = "resource.k8s.io/v1";
  static constexpr char kKind[] = "ResourceSlice";
  static const ResourceRef& Resource() { return resources::kResourceSlices; }
  static std::vector<ShapeRule> ShapeRules();
  static ResourceSlice New(std::string_view name) { return ResourceSlice(NewJson(kApiVersion, kKind, name)); }
  using Object::Object;

  std::string driver() const { return GetString({"spec", "driver"}); }
  void set_driver(std::string_view value) { Set({"spec", "driver"}, value); }
  std::string pool_name() const { return GetString({"spec", "pool", "name"}); }
  void set_pool_name(std::string_view value) { Set({"spec", "pool", "name"}, value); }
  std::int64_t pool_generation() const { return GetInt({"spec", "pool", "generation"}); }
  void set_pool_generation(std::int64_t value) { Set({"spec", "pool", "generation"}, value); }
  std::int64_t pool_resource_slice_count() const { return GetInt({"spec", "pool", "resourceSliceCount"}); }
  void set_pool_resource_slice_count(std::int64_t value) { Set({"spec", "pool", "resourceSliceCount"}, value); }
  // "" for a slice not tied to one node.
  std::string node_name() const { return GetString({"spec", "nodeName"}); }
  void set_node_name(std::string_view value) { Set({"spec", "nodeName"}, value); }
  bool all_nodes() const { return GetBool({"spec", "allNodes"}); }
  std::vector<Device> devices() const { return GetList<Device>({"spec", "devices"}); }
  void set_devices(const std::vector<Device>& value) { SetList({"spec", "devices"}, value); }
};

// status.allocation.devices.results[i] of a ResourceClaim.
class DeviceRequestResult : public JsonView {
 public:
  using JsonView::JsonView;
  std::string request() const { return GetString({"request"}); }
  std::string driver() const { return GetString({"driver"}); }
  std::string pool() const { return GetString({"pool"}); }
  std::string device() const { return GetString({"device"}); }
  bool admin_access() const { return GetBool({"adminAccess"}); }
};

// status.reservedFor[i]: who uses the claim (normally a Pod).
class ResourceClaimConsumerReference : public JsonView {
 public:
  using JsonView::JsonView;
  static ResourceClaimConsumerReference New(std::string_view resource, std::string_view name, std::string_view uid,
                                            std::string_view api_group = "");
  std::string api_group() const { return GetString({"apiGroup"}); }
  std::string resource() const { return GetString({"resource"}); }
  std::string name() const { return GetString({"name"}); }
  std::string uid() const { return GetString({"uid"}); }
};

class ResourceClaim : public Object {
 public:
  static constexpr char kApiVersion[] = "resource.k8s.io/v1";
  static constexpr char kKind[] = "ResourceClaim";
  static const ResourceRef& Resource() { return resources::kResourceClaims; }
  static std::vector<ShapeRule> ShapeRules();
  static ResourceClaim New(std::string_view ns, std::string_view name) {
    return ResourceClaim(NewJson(kApiVersion, kKind, name, ns));
  }
  using Object::Object;

  // spec.devices (requests, constraints, config), empty when absent.
  nlohmann::json device_spec() const { return GetObject({"spec", "devices"}); }
  void set_device_spec(nlohmann::json value) { Set({"spec", "devices"}, std::move(value)); }
  bool allocated() const { return Find({"status", "allocation"}) != nullptr; }
  std::vector<DeviceRequestResult> results() const {
    return GetList<DeviceRequestResult>({"status", "allocation", "devices", "results"});
  }
  void set_results(const std::vector<DeviceRequestResult>& value) {
    SetList({"status", "allocation", "devices", "results"}, value);
  }
  // status.allocation.devices.config, an empty array when absent.
  nlohmann::json allocation_config() const;
  // status.allocation.nodeSelector, empty when absent.
  nlohmann::json allocation_node_selector() const { return GetObject({"status", "allocation", "nodeSelector"}); }
  std::vector<ResourceClaimConsumerReference> reserved_for() const {
    return GetList<ResourceClaimConsumerReference>({"status", "reservedFor"});
  }
  void set_reserved_for(const std::vector<ResourceClaimConsumerReference>& value) {
    SetList({"status", "reservedFor"}, value);
  }
};

class ResourceClaimTemplate : public Object {
 public:
  static constexpr char kApiVersion[] = "resource.k8s.io/v1";
  static constexpr char kKind[] = "ResourceClaimTemplate";
  static const ResourceRef& Resource() { return resources::kResourceClaimTemplates; }
  static std::vector<ShapeRule> ShapeRules();
  static ResourceClaimTemplate New(std::string_view ns, std::string_view name) {
    return ResourceClaimTemplate(NewJson(kApiVersion, kKind, name, ns));
  }
  using Object::Object;

  // spec.spec.devices: the claim spec's device part, empty when absent.
  nlohmann::json device_spec() const { return GetObject({"spec", "spec", "devices"}); }
  void set_device_spec(nlohmann::json value) { Set({"spec", "spec", "devices"}, std::move(value)); }
  // spec.metadata labels given to generated claims.
  std::map<std::string, std::string> claim_labels() const { return GetStringMap({"spec", "metadata", "labels"}); }
};

class DeviceClass : public Object {
 public:
  static constexpr char kApiVersion[] = "resource.k8s.io/v1";
  static constexpr char kKind[] = "DeviceClass";
  static const ResourceRef& Resource() { return resources::kDeviceClasses; }
  static std::vector<ShapeRule> ShapeRules();
  static DeviceClass New(std::string_view name) { return DeviceClass(NewJson(kApiVersion, kKind, name)); }
  using Object::Object;

  // spec.selectors ([{"cel": {"expression": ...}}]), an empty array when absent.
  nlohmann::json selectors() const;
  void set_selectors(nlohmann::json value) { Set({"spec", "selectors"}, std::move(value)); }
  // spec.config, an empty array when absent.
  nlohmann::json config() const;
  void set_config(nlohmann::json value) { Set({"spec", "config"}, std::move(value)); }
  std::string extended_resource_name() const { return GetString({"spec", "extendedResourceName"}); }
};

}  // namespace nvdra::k8s
