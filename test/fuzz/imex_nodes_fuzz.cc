// The IMEX peers: the nodes file as the simulated nvidia-imex reads it
// (ParseNodesConfig), and /etc/hosts, which the compute-domain daemon reads
// and rewrites with its peers' names (RewriteHostsFile). The input is the
// file; its first lines double as peer addresses.
//
// Properties: a nodes file written from parsed entries (IpNodesConfig) parses
// to the same entries; rewriting /etc/hosts twice with the same peers changes
// nothing the second time, and keeps one mapping line per peer.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "computedomain/imex_files.h"
#include "fuzz_support.h"
#include "imex_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = nvdra::fuzz::Text(data, size);
  const std::vector<std::string> entries = nvdra::simimex::ParseNodesConfig(text);
  NVDRA_FUZZ_CHECK(nvdra::simimex::ParseNodesConfig(nvdra::computedomain::IpNodesConfig(entries)) == entries,
                   "a written nodes file reads back as written");

  std::map<std::int64_t, std::string> ip_by_index;
  for (std::size_t i = 0; i < entries.size() && i < 4; ++i) {
    ip_by_index[static_cast<std::int64_t>(i * 7)] = entries[i];
  }
  const std::string once = nvdra::computedomain::RewriteHostsFile(text, ip_by_index);
  const std::string twice = nvdra::computedomain::RewriteHostsFile(once, ip_by_index);
  NVDRA_FUZZ_CHECK(once == twice, "rewriting /etc/hosts is idempotent");
  for (const auto& [index, ip] : ip_by_index) {
    const std::string line = ip + "\t" + nvdra::computedomain::DnsName(index) + "\n";
    NVDRA_FUZZ_CHECK(once.find(line) != std::string::npos, "every peer has its mapping line");
  }
  return 0;
}
