// Shape rules and the few non-inline accessors of core.h, resource.h and
// compute_domain.h. A rule lists every field an accessor reads, so that a
// field of the wrong type is an error at FromJson rather than a silent
// default later.

#include "k8s/objects/compute_domain.h"
#include "k8s/objects/core.h"
#include "k8s/objects/resource.h"

namespace nvdra::k8s {
namespace {

using Json = nlohmann::json;

std::vector<ShapeRule> WithMetadata(std::vector<ShapeRule> rules) {
  std::vector<ShapeRule> all = Object::MetadataRules();
  all.insert(all.end(), rules.begin(), rules.end());
  return all;
}

}  // namespace

std::vector<ShapeRule> Node::ShapeRules() {
  return WithMetadata({{{"spec"}, JsonType::kObject},
                       {{"spec", "taints"}, JsonType::kArrayOfObjects},
                       {{"spec", "unschedulable"}, JsonType::kBoolean},
                       {{"status"}, JsonType::kObject},
                       {{"status", "addresses"}, JsonType::kArrayOfObjects}});
}

std::string Node::Address(std::string_view type) const {
  for (const auto& address : addresses()) {
    if (address.type() == type) return address.address();
  }
  return "";
}

std::vector<ShapeRule> Pod::ShapeRules() {
  return WithMetadata({{{"spec"}, JsonType::kObject},
                       {{"spec", "nodeName"}, JsonType::kString},
                       {{"spec", "resourceClaims"}, JsonType::kArrayOfObjects},
                       {{"status"}, JsonType::kObject},
                       {{"status", "resourceClaimStatuses"}, JsonType::kArrayOfObjects},
                       {{"status", "phase"}, JsonType::kString}});
}

std::vector<ShapeRule> DaemonSet::ShapeRules() {
  return WithMetadata({{{"spec"}, JsonType::kObject},
                       {{"spec", "selector"}, JsonType::kObject},
                       {{"spec", "selector", "matchLabels"}, JsonType::kStringMap},
                       {{"spec", "template"}, JsonType::kObject},
                       {{"status"}, JsonType::kObject}});
}

std::vector<ShapeRule> Lease::ShapeRules() {
  return WithMetadata({{{"spec"}, JsonType::kObject},
                       {{"spec", "holderIdentity"}, JsonType::kString},
                       {{"spec", "leaseDurationSeconds"}, JsonType::kInteger},
                       {{"spec", "leaseTransitions"}, JsonType::kInteger}});
}

std::vector<ShapeRule> Event::ShapeRules() {
  return WithMetadata({{{"regarding"}, JsonType::kObject}, {{"series"}, JsonType::kObject}});
}

void Event::set_series(std::int64_t count, std::string_view last_observed_time) {
  Set({"series", "count"}, count);
  Set({"series", "lastObservedTime"}, last_observed_time);
}

std::vector<ShapeRule> ResourceSlice::ShapeRules() {
  return WithMetadata({{{"spec"}, JsonType::kObject},
                       {{"spec", "driver"}, JsonType::kString},
                       {{"spec", "pool"}, JsonType::kObject},
                       {{"spec", "pool", "name"}, JsonType::kString},
                       {{"spec", "pool", "generation"}, JsonType::kInteger},
                       {{"spec", "pool", "resourceSliceCount"}, JsonType::kInteger},
                       {{"spec", "nodeName"}, JsonType::kString},
                       {{"spec", "devices"}, JsonType::kArrayOfObjects},
                       {{"spec", "devices", "[]", "name"}, JsonType::kString},
                       {{"spec", "devices", "[]", "attributes"}, JsonType::kObject},
                       {{"spec", "devices", "[]", "capacity"}, JsonType::kObject}});
}

ResourceClaimConsumerReference ResourceClaimConsumerReference::New(std::string_view resource, std::string_view name,
                                                                   std::string_view uid, std::string_view api_group) {
  Json ref = {{"resource", resource}, {"name", name}, {"uid", uid}};
  if (!api_group.empty()) ref["apiGroup"] = api_group;
  return ResourceClaimConsumerReference(std::move(ref));
}

std::vector<ShapeRule> ResourceClaim::ShapeRules() {
  return WithMetadata({{{"spec"}, JsonType::kObject},
                       {{"spec", "devices"}, JsonType::kObject},
                       {{"status"}, JsonType::kObject},
                       {{"status", "allocation"}, JsonType::kObject},
                       {{"status", "allocation", "devices"}, JsonType::kObject},
                       {{"status", "allocation", "devices", "results"}, JsonType::kArrayOfObjects},
                       {{"status", "allocation", "devices", "config"}, JsonType::kArray},
                       {{"status", "allocation", "nodeSelector"}, JsonType::kObject},
                       {{"status", "reservedFor"}, JsonType::kArrayOfObjects}});
}

Json ResourceClaim::allocation_config() const {
  const Json* v = Find({"status", "allocation", "devices", "config"});
  return v != nullptr && v->is_array() ? *v : Json::array();
}

std::vector<ShapeRule> ResourceClaimTemplate::ShapeRules() {
  return WithMetadata({{{"spec"}, JsonType::kObject},
                       {{"spec", "metadata"}, JsonType::kObject},
                       {{"spec", "metadata", "labels"}, JsonType::kStringMap},
                       {{"spec", "spec"}, JsonType::kObject},
                       {{"spec", "spec", "devices"}, JsonType::kObject}});
}

std::vector<ShapeRule> DeviceClass::ShapeRules() {
  return WithMetadata({{{"spec"}, JsonType::kObject},
                       {{"spec", "selectors"}, JsonType::kArrayOfObjects},
                       {{"spec", "config"}, JsonType::kArrayOfObjects}});
}

Json DeviceClass::selectors() const {
  const Json* v = Find({"spec", "selectors"});
  return v != nullptr && v->is_array() ? *v : Json::array();
}

Json DeviceClass::config() const {
  const Json* v = Find({"spec", "config"});
  return v != nullptr && v->is_array() ? *v : Json::array();
}

std::vector<ShapeRule> ComputeDomain::ShapeRules() {
  return WithMetadata({{{"spec"}, JsonType::kObject},
                       {{"spec", "numNodes"}, JsonType::kInteger},
                       {{"spec", "channel"}, JsonType::kObject},
                       {{"spec", "channel", "resourceClaimTemplate"}, JsonType::kObject},
                       {{"spec", "channel", "resourceClaimTemplate", "name"}, JsonType::kString},
                       {{"spec", "channel", "allocationMode"}, JsonType::kString},
                       {{"status"}, JsonType::kObject},
                       {{"status", "status"}, JsonType::kString},
                       {{"status", "nodes"}, JsonType::kArrayOfObjects},
                       {{"status", "nodes", "[]", "index"}, JsonType::kInteger}});
}

std::string ComputeDomain::channel_allocation_mode() const {
  std::string mode = GetString({"spec", "channel", "allocationMode"});
  return mode.empty() ? "Single" : mode;
}

std::string ComputeDomain::status() const {
  std::string status = GetString({"status", "status"});
  return status.empty() ? "NotReady" : status;
}

std::vector<ShapeRule> ComputeDomainClique::ShapeRules() {
  return WithMetadata({{{"daemons"}, JsonType::kArrayOfObjects}, {{"daemons", "[]", "index"}, JsonType::kInteger}});
}

}  // namespace nvdra::k8s
