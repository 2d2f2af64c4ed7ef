#pragma once

// Kubernetes objects from YAML templates shipped in the image (/templates):
// `${KEY}` placeholders replaced by plain text, then parsed as YAML into
// JSON. The compute-domain controller renders its DaemonSet and claim
// templates with it, the GPU plugin its MPS control daemon Deployment.
//
// Scalars: quoted ones stay strings; plain ones become integers, booleans or
// null when they read as such (YAML 1.2 core schema), else strings. So a
// placeholder whose value must stay a string (a UID, "2") is quoted in the
// template. A template has no escape for a literal "${": shell scripts in
// templates write $NAME instead.
//
// Thread-safety: pure functions.

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace nvdra::k8s {

using TemplateValues = std::map<std::string, std::string>;

// `text` with every ${KEY} replaced by values[KEY], then parsed. kInvalidArgument
// naming `name` and the key for a placeholder without a value, and for YAML
// that does not parse (with yaml-cpp's line and column).
common::StatusOr<nlohmann::json> RenderTemplate(std::string_view name, std::string_view text,
                                                const TemplateValues& values);

// Text for placeholders, in YAML flow style (JSON's quoting is valid YAML,
// so names and values go in whatever characters they hold):
// `text` as a double-quoted scalar;
std::string YamlQuoted(std::string_view text);
// "imagePullSecrets: [{name: "a"}, ...]", or "" for no names (empty names
// are skipped);
std::string ImagePullSecretsLine(const std::vector<std::string>& names);
// an env list item "- {name: FEATURE_GATES, value: ...}", or "" for no gates.
std::string FeatureGatesEnvLine(std::string_view gates);

// One YAML document as JSON (scalars as in the file comment).
// kInvalidArgument when it does not parse.
common::StatusOr<nlohmann::json> YamlToJson(std::string_view yaml);

}  // namespace nvdra::k8s
