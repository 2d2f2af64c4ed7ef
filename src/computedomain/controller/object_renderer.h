#pragma once

// The objects a ComputeDomain gets, as the controller wants them: its IMEX
// daemon DaemonSet and daemon claim template (driver namespace) and its
// workload claim template (the domain's namespace). Each comes whole from
// its template (templates.h); this class only supplies the placeholder
// values, so a template is the one place an object's shape is defined.
// Defines: DomainObjectRenderer.
//
// Ownership: borrows the ControllerOptions (must outlive it).
// Thread-safety: immutable; pure functions of the options and the domain.

#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "computedomain/controller/controller_options.h"
#include "computedomain/controller/templates.h"
#include "k8s/objects/compute_domain.h"

namespace nvdra::computedomain::controller {

class DomainObjectRenderer {
 public:
  explicit DomainObjectRenderer(const ControllerOptions& options) : options_(options) {}

  // Each: kInvalidArgument (naming the template) when a template does not
  // render, e.g. a custom one with a placeholder we have no value for.
  common::StatusOr<nlohmann::json> DaemonSet(std::string_view cd_uid) const;
  common::StatusOr<nlohmann::json> DaemonClaimTemplate(std::string_view cd_uid) const;
  // `channel`: the domain's own IMEX channel under channel isolation; its
  // request then matches only that channel's device.
  common::StatusOr<nlohmann::json> WorkloadClaimTemplate(const k8s::ComputeDomain& cd,
                                                         std::optional<int> channel) const;

  // The values every template shares: name, namespace, finalizer, labels.
  static TemplateValues CommonValues(std::string_view ns, std::string_view name, std::string_view cd_uid);

 private:
  const ControllerOptions& options_;
};

}  // namespace nvdra::computedomain::controller
