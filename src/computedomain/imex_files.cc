#include "computedomain/imex_files.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>

#include <fmt/format.h>

#include "common/file_io.h"
#include "common/unique_fd.h"

namespace nvdra::computedomain {
namespace {

using common::Status;
using common::StatusOr;

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.remove_suffix(1);
  return text;
}

int LineOf(std::string_view text, size_t offset) {
  int line = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) line += text[i] == '\n' ? 1 : 0;
  return line;
}

}  // namespace

StatusOr<std::string> RenderImexConfig(std::string_view template_text, const ImexConfigValues& values) {
  std::string out;
  out.reserve(template_text.size());
  size_t pos = 0;
  while (true) {
    const size_t open = template_text.find("{{", pos);
    if (open == std::string_view::npos) {
      out.append(template_text.substr(pos));
      return out;
    }
    out.append(template_text.substr(pos, open - pos));
    const size_t close = template_text.find("}}", open + 2);
    if (close == std::string_view::npos) {
      return common::InvalidArgumentError(
          fmt::format("IMEX config template line {}: unclosed {{{{", LineOf(template_text, open)));
    }
    const std::string_view name = Trim(template_text.substr(open + 2, close - open - 2));
    if (name == ".IMEXCmdBindInterfaceIP") {
      out.append(values.cmd_bind_interface_ip);
    } else if (name == ".IMEXDaemonNodesConfigPath") {
      out.append(values.nodes_config_path);
    } else {
      return common::InvalidArgumentError(fmt::format("IMEX config template line {}: unknown variable '{}'",
                                                      LineOf(template_text, open), name));
    }
    pos = close + 2;
  }
}

std::string DnsName(std::int64_t index) { return fmt::format("{}{:04d}", kDnsNamePrefix, index); }

std::string StaticNodesConfig(int max_nodes) {
  std::string out;
  for (int i = 0; i < max_nodes; ++i) out += DnsName(i) + "\n";
  return out;
}

std::string IpNodesConfig(const std::vector<std::string>& ips) {
  std::string out;
  for (const std::string& ip : ips) out += ip + "\n";
  return out;
}

bool IsIpAddressLiteral(std::string_view text) {
  if (text.empty() || text.size() > 45) return false;  // INET6_ADDRSTRLEN - 1
  const std::string copy(text);
  in6_addr address{};
  return inet_pton(AF_INET, copy.c_str(), &address) == 1 || inet_pton(AF_INET6, copy.c_str(), &address) == 1;
}

std::string RewriteHostsFile(std::string_view hosts, const std::map<std::int64_t, std::string>& ip_by_index) {
  std::string out;
  std::istringstream lines{std::string(hosts)};
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find(kDnsNamePrefix) != std::string::npos) continue;
    // Upstream wrote the marker again on every update; drop old copies.
    if (Trim(line) == kHostsMarker) continue;
    out += line + "\n";
  }
  out += std::string(kHostsMarker) + "\n";
  for (const auto& [index, ip] : ip_by_index) out += fmt::format("{}\t{}\n", ip, DnsName(index));
  return out;
}

Status WriteFileAtomically(const std::filesystem::path& path, std::string_view content) {
  std::filesystem::path temp = path;
  temp += ".tmp-XXXXXX";
  std::string name = temp.string();
  common::UniqueFd fd(mkstemp(name.data()));
  if (!fd) return common::ErrnoToStatus(errno, "create a temporary file for " + path.string());
  Status status = common::WriteAll(fd.get(), content, name);
  if (status.ok() && fchmod(fd.get(), 0644) != 0) status = common::ErrnoToStatus(errno, "chmod " + name);
  if (status.ok() && rename(name.c_str(), path.c_str()) != 0) {
    status = common::ErrnoToStatus(errno, "rename to " + path.string());
  }
  if (!status.ok()) unlink(name.c_str());
  return status;
}

Status WriteFileInPlace(const std::filesystem::path& path, std::string_view content) {
  // No O_TRUNC: a truncate-then-write leaves the file empty until the write,
  // and a reader in that gap (nvidia-imex resolving its own name at start, or
  // any resolver in the pod) finds no mapping at all. Overwrite from offset
  // 0 instead, padded with newlines to the old length when shorter, and cut
  // the padding off after: a reader sees the old text, the new text, or the
  // new text followed by blank lines, never an empty or half-erased file.
  common::UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
  if (!fd) return common::ErrnoToStatus(errno, "open " + path.string());
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return common::ErrnoToStatus(errno, "stat " + path.string());
  const auto old_size = static_cast<std::size_t>(st.st_size);
  std::string padded;
  if (old_size > content.size()) {
    padded.reserve(old_size);
    padded.append(content);
    padded.append(old_size - content.size(), '\n');
  }
  if (Status status = common::WriteAll(fd.get(), padded.empty() ? content : std::string_view(padded), path.string());
      !status.ok()) {
    return status;
  }
  if (ftruncate(fd.get(), static_cast<off_t>(content.size())) != 0) {
    return common::ErrnoToStatus(errno, "truncate " + path.string());
  }
  return common::OkStatus();
}

}  // namespace nvdra::computedomain
