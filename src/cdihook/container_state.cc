#include "cdihook/container_state.h"

#include <cerrno>
#include <fstream>
#include <iostream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/json_fields.h"

namespace nvdra::cdihook {
namespace fs = std::filesystem;
using common::StatusOr;

namespace {

StatusOr<nlohmann::json> ParseJsonObject(std::istream& in, std::string_view what) {
  nlohmann::json doc;
  try {
    in >> doc;
  } catch (const nlohmann::json::exception& e) {
    return common::InvalidArgumentError(fmt::format("{}: not valid JSON: {}", what, e.what()));
  }
  if (!doc.is_object()) {
    return common::InvalidArgumentError(fmt::format("{}: not a JSON object", what));
  }
  return doc;
}

// The non-empty string at doc[key], or kInvalidArgument naming `what` and
// `field`.
StatusOr<std::string> RequiredString(const nlohmann::json& doc, std::string_view key, std::string_view what,
                                     std::string_view field) {
  std::string value = common::JsonString(doc, key);
  if (value.empty()) return common::InvalidArgumentError(fmt::format("{}: {} is missing or empty", what, field));
  return value;
}

}  // namespace

StatusOr<fs::path> ContainerRootFromState(std::istream& state) {
  ASSIGN_OR_RETURN(const nlohmann::json doc, ParseJsonObject(state, "container state"));
  ASSIGN_OR_RETURN(const std::string bundle, RequiredString(doc, "bundle", "container state", "bundle"));

  const fs::path config_path = fs::path(bundle) / "config.json";
  std::ifstream config_file(config_path);
  if (!config_file) return common::ErrnoToStatus(errno, fmt::format("open {}", config_path.string()));
  const std::string what = config_path.string();
  ASSIGN_OR_RETURN(const nlohmann::json config, ParseJsonObject(config_file, what));
  const nlohmann::json* root = common::JsonFind(config, "root");
  if (root == nullptr || !root->is_object()) {
    return common::InvalidArgumentError(fmt::format("{}: root is missing", what));
  }
  ASSIGN_OR_RETURN(const std::string root_path, RequiredString(*root, "path", what, "root.path"));

  fs::path container_root = fs::path(root_path).is_absolute() ? fs::path(root_path)
                                                              : fs::path(bundle) / root_path;
  container_root = container_root.lexically_normal();
  if (container_root.string().find_first_not_of('/') == std::string::npos) {
    return common::FailedPreconditionError(
        fmt::format("{}: root.path is the host root \"/\"; refusing to edit it", what));
  }
  return container_root;
}

StatusOr<fs::path> LoadContainerRoot(std::string_view container_spec) {
  if (container_spec.empty() || container_spec == "-") return ContainerRootFromState(std::cin);
  std::ifstream in{std::string(container_spec)};
  if (!in) return common::ErrnoToStatus(errno, fmt::format("open {}", container_spec));
  return ContainerRootFromState(in);
}

}  // namespace nvdra::cdihook
