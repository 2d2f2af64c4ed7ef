#pragma once

// The YAML templates compute-domain-controller renders per ComputeDomain
// (templates/compute-domain-*.tmpl.yaml, shipped at /templates in the image),
// rendered with k8s::RenderTemplate (k8s/object_template.h).
//
// Ownership: values. Thread-safety: Templates is immutable after Load and
// safe to share.

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "k8s/object_template.h"

namespace nvdra::computedomain::controller {

using k8s::RenderTemplate;
using k8s::TemplateValues;
using k8s::YamlToJson;

inline constexpr std::string_view kDaemonSetTemplate = "compute-domain-daemon.tmpl.yaml";
inline constexpr std::string_view kDaemonClaimTemplate = "compute-domain-daemon-claim-template.tmpl.yaml";
inline constexpr std::string_view kWorkloadClaimTemplate = "compute-domain-workload-claim-template.tmpl.yaml";

// The three templates' text, read once at start-up.
struct Templates {
  std::string daemon_set;
  std::string daemon_claim;
  std::string workload_claim;

  // Reads the three files from `dir`. kNotFound naming the file and the
  // --templates-dir flag when one is missing.
  static common::StatusOr<Templates> Load(const std::filesystem::path& dir);
};

}  // namespace nvdra::computedomain::controller
