#include "imex_config.h"

#include <charconv>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace nvdra::simimex {
namespace {

std::string_view Trim(std::string_view s) {
  const auto begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  const auto end = s.find_last_not_of(" \t\r\n");
  return s.substr(begin, end - begin + 1);
}

common::StatusOr<long> ParseInt(std::string_view value, long min, long max) {
  long out = 0;
  const auto* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, out);
  if (ec != std::errc() || ptr != end || out < min || out > max) {
    return common::InvalidArgumentError(
        fmt::format("{:?} is not an integer in [{}, {}]", value, min, max));
  }
  return out;
}

common::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    return common::ErrnoToStatus(errno == 0 ? ENOENT : errno, "open " + path.string());
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

common::Status ApplyKey(ImexConfig& config, std::string_view key, std::string_view value) {
  auto port = [&](std::uint16_t& out) -> common::Status {
    ASSIGN_OR_RETURN(long v, ParseInt(value, 0, 65535));
    out = static_cast<std::uint16_t>(v);
    return common::OkStatus();
  };
  auto flag = [&](bool& out) -> common::Status {
    ASSIGN_OR_RETURN(long v, ParseInt(value, 0, 1));
    out = v == 1;
    return common::OkStatus();
  };
  if (key == "LOG_LEVEL") {
    ASSIGN_OR_RETURN(long v, ParseInt(value, 0, 4));
    config.log_level = static_cast<int>(v);
  } else if (key == "LOG_FILE_NAME") {
    config.log_file_name = value;
  } else if (key == "DAEMONIZE") {
    return flag(config.daemonize);
  } else if (key == "BIND_INTERFACE_IP") {
    config.bind_interface_ip = value;
  } else if (key == "SERVER_PORT") {
    return port(config.server_port);
  } else if (key == "IMEX_NODE_CONFIG_FILE") {
    config.node_config_file = std::string(value);
  } else if (key == "IMEX_WAIT_FOR_QUORUM") {
    if (value == "NONE") {
      config.wait_for_quorum = QuorumMode::kNone;
    } else if (value == "RECOVERY") {
      config.wait_for_quorum = QuorumMode::kRecovery;
    } else if (value == "FULL") {
      config.wait_for_quorum = QuorumMode::kFull;
    } else {
      return common::InvalidArgumentError(
          fmt::format("{:?} is not NONE, RECOVERY or FULL", value));
    }
  } else if (key == "IMEX_ENABLE_AUTH_ENCRYPTION") {
    return flag(config.enable_auth_encryption);
  } else if (key == "IMEX_CMD_ENABLED") {
    return flag(config.cmd_enabled);
  } else if (key == "IMEX_CMD_BIND_INTERFACE_IP") {
    config.cmd_bind_interface_ip = value;
  } else if (key == "IMEX_CMD_PORT") {
    return port(config.cmd_port);
  } else if (key == "IMEX_CMD_UNIX_DOMAIN_PATH") {
    config.cmd_unix_domain_path = value;
  } else if (key == "IMEX_NODE_DISCONNECTED_GRACE_TIME") {
    ASSIGN_OR_RETURN(long v, ParseInt(value, -1, 1L << 30));
    config.node_disconnected_grace_time = static_cast<int>(v);
  }
  return common::OkStatus();
}

}  // namespace

std::string_view QuorumModeName(QuorumMode mode) {
  switch (mode) {
    case QuorumMode::kNone: return "NONE";
    case QuorumMode::kRecovery: return "RECOVERY";
    case QuorumMode::kFull: return "FULL";
  }
  return "?";
}

common::StatusOr<ImexConfig> ParseImexConfig(std::string_view text) {
  ImexConfig config;
  int line_number = 0;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const std::string_view raw = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_number;
    const std::string_view line = Trim(raw);
    if (line.empty() || line.front() == '#') continue;
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) {
      return common::InvalidArgumentError(
          fmt::format("line {}: {:?} is not KEY=value", line_number, line));
    }
    const std::string_view key = Trim(line.substr(0, eq));
    const std::string_view value = Trim(line.substr(eq + 1));
    if (value.empty()) continue;
    RETURN_IF_ERROR(ApplyKey(config, key, value)
                        .WithContext(fmt::format("line {}: {}", line_number, key)));
  }
  return config;
}

common::StatusOr<ImexConfig> LoadImexConfig(const std::filesystem::path& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  auto config = ParseImexConfig(text);
  if (!config.ok()) return config.status().WithContext(path.string());
  return config;
}

std::vector<std::string> ParseNodesConfig(std::string_view text) {
  std::vector<std::string> entries;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const std::string_view line = Trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty() || line.front() == '#') continue;
    entries.emplace_back(line);
  }
  return entries;
}

common::StatusOr<std::vector<std::string>> LoadNodesConfig(const std::filesystem::path& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseNodesConfig(text);
}

std::string NodesConfigKey(const std::vector<std::string>& entries) {
  // FNV-1a, 64 bits: stable across processes and builds, which std::hash is not.
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const auto& entry : entries) {
    for (const char c : entry + "\n") {
      hash ^= static_cast<unsigned char>(c);
      hash *= 0x100000001b3ULL;
    }
  }
  return fmt::format("{:016x}", hash);
}

}  // namespace nvdra::simimex
