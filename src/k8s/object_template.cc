#include "k8s/object_template.h"

#include <cstdint>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

namespace nvdra::k8s {

using common::InvalidArgumentError;
using common::StatusOr;
using nlohmann::json;

namespace {

json ScalarToJson(const YAML::Node& node) {
  const std::string& text = node.Scalar();
  // yaml-cpp tags quoted (and block) scalars "!", plain ones "?".
  if (node.Tag() != "?") return text;
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  if (text == "null" || text == "Null" || text == "NULL" || text == "~" || text.empty()) return nullptr;
  if (!text.empty() && (text.find_first_not_of("-0123456789") == std::string::npos)) {
    std::int64_t value = 0;
    std::istringstream in(text);
    if (in >> value && in.eof()) return value;
  }
  return text;
}

json NodeToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& item : node) out[item.first.Scalar()] = NodeToJson(item.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) out.push_back(NodeToJson(item));
      return out;
    }
    case YAML::NodeType::Scalar:
      return ScalarToJson(node);
    default:
      return nullptr;
  }
}

}  // namespace

StatusOr<json> YamlToJson(std::string_view yaml) {
  try {
    return NodeToJson(YAML::Load(std::string(yaml)));
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(fmt::format("YAML: {}", e.what()));
  }
}

StatusOr<json> RenderTemplate(std::string_view name, std::string_view text, const TemplateValues& values) {
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  while (true) {
    const std::size_t open = text.find("${", pos);
    if (open == std::string_view::npos) break;
    const std::size_t close = text.find('}', open);
    if (close == std::string_view::npos) break;
    const std::string key(text.substr(open + 2, close - open - 2));
    auto it = values.find(key);
    if (it == values.end()) {
      return InvalidArgumentError(fmt::format("template {}: no value for placeholder ${{{}}}", name, key));
    }
    out.append(text.substr(pos, open - pos));
    out.append(it->second);
    pos = close + 1;
  }
  out.append(text.substr(pos));
  StatusOr<json> parsed = YamlToJson(out);
  if (!parsed.ok()) {
    return InvalidArgumentError(fmt::format("template {}: {}", name, parsed.status().message()));
  }
  return parsed;
}

std::string YamlQuoted(std::string_view text) { return json(std::string(text)).dump(); }

std::string ImagePullSecretsLine(const std::vector<std::string>& names) {
  std::vector<std::string> items;
  for (const std::string& name : names) {
    if (!name.empty()) items.push_back(fmt::format("{{name: {}}}", YamlQuoted(name)));
  }
  if (items.empty()) return "";
  return fmt::format("imagePullSecrets: [{}]", fmt::join(items, ", "));
}

std::string FeatureGatesEnvLine(std::string_view gates) {
  if (gates.empty()) return "";
  return fmt::format("- {{name: FEATURE_GATES, value: {}}}", YamlQuoted(gates));
}

}  // namespace nvdra::k8s
