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

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace nvdra::k8s {

using TemplateValues = std::map<std::string, std::string>;

// `text` with every ${KEY} replaced by values[KEY], then parsed. kInvalidArgument
// naming `name` and the key for a placeholder without a value, and for YAML
// that does not parse (with yaml-cpp's line and column).
common::StatusOr<nlohmann::json> RenderTemplate(std::string_view name, std::string_view text,
                                                const TemplateValues& values);

// One YAML document as JSON (scalars as in the file comment).
// kInvalidArgument when it does not parse.
common::StatusOr<nlohmann::json> YamlToJson(std::string_view yaml);

}  // namespace nvdra::k8s
