#include "computedomain/controller/templates.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace nvdra::computedomain::controller {

using common::InvalidArgumentError;
using common::StatusOr;
using nlohmann::json;

namespace {

StatusOr<std::string> ReadText(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    return common::NotFoundError(fmt::format(
        "template {} cannot be read; point --templates-dir (TEMPLATES_DIR) at the folder holding it",
        path.string()));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

StatusOr<Templates> Templates::Load(const std::filesystem::path& dir) {
  Templates out;
  for (auto [file, target] : {std::pair{kDaemonSetTemplate, &out.daemon_set},
                              std::pair{kDaemonClaimTemplate, &out.daemon_claim},
                              std::pair{kWorkloadClaimTemplate, &out.workload_claim}}) {
    StatusOr<std::string> text = ReadText(dir / file);
    if (!text.ok()) return text.status();
    *target = std::move(*text);
  }
  return out;
}

}  // namespace nvdra::computedomain::controller
