// Shape rules and the non-inline accessors of compute_domain.h. A rule lists
// every field an accessor reads, so that a field of the wrong type is an
// error at FromJson rather than a silent default later.

#include "k8s/objects/compute_domain.h"

namespace nvdra::k8s {
namespace {

std::vector<ShapeRule> WithMetadata(std::vector<ShapeRule> rules) {
  std::vector<ShapeRule> all = Object::MetadataRules();
  all.insert(all.end(), rules.begin(), rules.end());
  return all;
}

}  // namespace

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
