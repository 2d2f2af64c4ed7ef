// The IMEX daemon's config: the template the compute-domain daemon renders
// (RenderImexConfig; the template file comes from the image or an operator's
// override), and imexd.cfg as the simulated nvidia-imex reads it
// (ParseImexConfig), both the rendered text and the input itself.

#include <cstddef>
#include <cstdint>
#include <string>

#include "computedomain/imex_files.h"
#include "fuzz_support.h"
#include "imex_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = nvdra::fuzz::Text(data, size);
  (void)nvdra::simimex::ParseImexConfig(text);
  const auto rendered = nvdra::computedomain::RenderImexConfig(
      text, {.cmd_bind_interface_ip = "10.0.0.7", .nodes_config_path = "/imexd/nodes_config.cfg"});
  if (!rendered.ok()) return 0;
  if (text.find("{{") == std::string::npos) {
    NVDRA_FUZZ_CHECK(*rendered == text, "a template without {{ renders as itself");
  }
  (void)nvdra::simimex::ParseImexConfig(*rendered);
  return 0;
}
