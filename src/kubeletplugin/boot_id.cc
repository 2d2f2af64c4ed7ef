#include "kubeletplugin/boot_id.h"

#include <cerrno>
#include <fstream>
#include <sstream>

namespace nvdra::kubeletplugin {

common::StatusOr<std::string> ReadBootId(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return common::ErrnoToStatus(errno, "read boot id " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return common::ErrnoToStatus(errno, "read boot id " + path.string());
  std::string id = text.str();
  constexpr const char* kSpace = " \t\r\n\v\f";
  const auto first = id.find_first_not_of(kSpace);
  if (first == std::string::npos) {
    return common::FailedPreconditionError("boot id file " + path.string() + " is empty");
  }
  id = id.substr(first, id.find_last_not_of(kSpace) - first + 1);
  return id;
}

}  // namespace nvdra::kubeletplugin
