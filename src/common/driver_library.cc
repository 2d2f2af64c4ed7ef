#include "common/driver_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace nvdra::common {

StatusOr<LoadedDriverLibrary> OpenDriverLibrary(const std::filesystem::path& driver_root,
                                                const std::optional<std::filesystem::path>& library_path,
                                                const std::vector<std::string>& names, const std::string& what,
                                                const std::string& hint) {
  std::vector<std::filesystem::path> candidates;
  if (library_path) {
    candidates.push_back(*library_path);
  } else {
    for (const char* folder : kDriverLibraryFolders) {
      for (const std::string& name : names) candidates.push_back(driver_root / folder / name);
    }
  }
  std::vector<std::string> tried;
  for (const auto& candidate : candidates) {
    std::error_code ec;
    if (!std::filesystem::exists(candidate, ec)) {
      tried.push_back(candidate.string() + " (absent)");
      continue;
    }
    if (void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL)) return LoadedDriverLibrary{handle, candidate};
    const char* reason = dlerror();
    tried.push_back(fmt::format("{} ({})", candidate.string(), reason ? reason : "dlopen failed"));
  }
  if (!library_path && driver_root == std::filesystem::path("/")) {
    for (const std::string& name : names) {
      if (void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return LoadedDriverLibrary{handle, name};
      const char* reason = dlerror();
      tried.push_back(fmt::format("{} via the loader's search ({})", name, reason ? reason : "dlopen failed"));
    }
  }
  return NotFoundError(fmt::format("{} not found under driver root {}: tried {}; {}", what, driver_root.string(),
                                   fmt::join(tried, ", "), hint));
}

std::string DriverBufferString(const char* buffer, std::size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

std::string NormalizePciBusId(std::string bus_id) {
  std::transform(bus_id.begin(), bus_id.end(), bus_id.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (bus_id.size() > 9 && bus_id.compare(0, 4, "0000") == 0 && bus_id[8] == ':') bus_id.erase(0, 4);
  return bus_id;
}

}  // namespace nvdra::common
