#include "common/version.h"

#ifndef NVDRA_VERSION
#error "NVDRA_VERSION must be defined by the build"
#endif
#ifndef NVDRA_GIT_COMMIT
#define NVDRA_GIT_COMMIT "unknown"
#endif
#ifndef NVDRA_BUILD_DATE
#define NVDRA_BUILD_DATE "unknown"
#endif

namespace nvdra::common {

std::string_view Version() { return NVDRA_VERSION; }
std::string_view GitCommit() { return NVDRA_GIT_COMMIT; }
std::string_view BuildDate() { return NVDRA_BUILD_DATE; }

std::string VersionText(std::string_view binary_name) {
  std::string text(binary_name);
  text.append(" version ").append(Version());
  text.append("\ncommit: ").append(GitCommit());
  text.append("\nbuild date: ").append(BuildDate());
  return text;
}

}  // namespace nvdra::common
