#pragma once

// The YAML templates compute-domain-controller renders per ComputeDomain
// (templates/compute-domain-*.tmpl.yaml, shipped at /templates in the image):
// `${KEY}` placeholders replaced by plain text, then parsed as YAML into
// JSON. Defines: TemplateValues, RenderTemplate, YamlToJson, Templates.
//
// Scalars: quoted ones stay strings; plain ones become integers, booleans or
// null when they read as such (YAML 1.2 core schema), else strings. So a
// placeholder whose value must stay a string (a UID, "2") is quoted in the
// template.
//
// Ownership: values. Thread-safety: Templates is immutable after Load and
// safe to share.

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace nvdra::computedomain::controller {

using TemplateValues = std::map<std::string, std::string>;

// `text` with every ${KEY} replaced by values[KEY], then parsed. kInvalidArgument
// naming `name` and the key for a placeholder without a value, and for YAML
// that does not parse (with yaml-cpp's line and column).
common::StatusOr<nlohmann::json> RenderTemplate(std::string_view name, std::string_view text,
                                                const TemplateValues& values);

// One YAML document as JSON (scalars as in the file comment).
// kInvalidArgument when it does not parse.
common::StatusOr<nlohmann::json> YamlToJson(std::string_view yaml);

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
