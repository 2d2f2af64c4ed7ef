// Kubeconfig files (--kubeconfig / KUBECONFIG): YAML, base64 certificate
// data, contexts. The input is the file, written to a private temporary
// folder and loaded as the binaries load it; alone, and merged after itself
// with another context asked for.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_support.h"
#include "k8s/config.h"

namespace {

const std::filesystem::path& Folder() {
  static const std::filesystem::path folder = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "nvdra-fuzz-kubeconfig-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror("fuzz: mkdtemp");
      std::abort();
    }
    // Gone at exit; a crash leaves it in the temporary folder.
    std::atexit([] { std::filesystem::remove_all(Folder()); });
    return std::filesystem::path(pattern);
  }();
  return folder;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path file = Folder() / "config";
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  (void)nvdra::k8s::LoadKubeconfig({file});
  (void)nvdra::k8s::LoadKubeconfig({file, file}, "other");
  return 0;
}
