#pragma once

// The nvidia-imex configuration file and nodes file, as the simulated IMEX
// (test/simimex) reads them. Test infrastructure, not product.
//
// Defines: QuorumMode, ImexConfig, ParseImexConfig, LoadImexConfig,
// ParseNodesConfig, LoadNodesConfig, NodesConfigKey.
//
// Sources for the keys and their defaults:
//   - NVIDIA IMEX guide, "IMEX Service Config Options"
//     (https://docs.nvidia.com/multi-node-nvlink-systems/imex-guide/config.html):
//     BIND_INTERFACE_IP empty = "find an IP address in the IMEX_NODE_CONFIG_FILE
//     that matches the IP addresses available via the system interface list";
//     SERVER_PORT default 50000; the file is read once at start.
//   - upstream templates/compute-domain-daemon-config.tmpl.cfg (the comments on
//     each key: IMEX_CMD_BIND_INTERFACE_IP empty = all interfaces,
//     IMEX_NODE_DISCONNECTED_GRACE_TIME -1/0/>0, IMEX_WAIT_FOR_QUORUM NONE |
//     RECOVERY with default RECOVERY).
//   - "Connections, Quorum, and Clean up" (…/imex-guide/connections.html): "IMEX
//     no longer requires a full quorum to complete initialization"; RECOVERY only
//     waits, after an unclean shutdown, for nodes that had imported memory.
//
// Thread-safety: values and pure functions; thread-compatible.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nvdra::simimex {

// IMEX_WAIT_FOR_QUORUM. NONE and RECOVERY are the documented values. FULL is a
// simulator extension (no such value is documented): the daemon is READY only
// while it is connected to every resolvable node of its nodes file, as IMEX did
// before it "no longer required a full quorum"; tests use it to see peer loss
// in `nvidia-imex-ctl -q`.
enum class QuorumMode : std::uint8_t { kNone, kRecovery, kFull };

// "NONE", "RECOVERY", "FULL".
std::string_view QuorumModeName(QuorumMode mode);

// The keys the simulator acts on; every other key is accepted and ignored, as
// the real daemon's files carry many (logging, auth, GSS) that change nothing
// here. Defaults are the vendor's documented ones.
struct ImexConfig {
  int log_level = 4;                    // LOG_LEVEL: 0 off .. 4 INFO
  std::string log_file_name;            // LOG_FILE_NAME: empty = stderr
  bool daemonize = true;                // DAEMONIZE (vendor default 1)
  std::string bind_interface_ip;        // BIND_INTERFACE_IP: empty = from nodes file
  std::uint16_t server_port = 50000;    // SERVER_PORT: peer TCP port
  std::filesystem::path node_config_file = "/etc/nvidia-imex/nodes_config.cfg";
  QuorumMode wait_for_quorum = QuorumMode::kRecovery;  // IMEX_WAIT_FOR_QUORUM
  bool enable_auth_encryption = false;  // IMEX_ENABLE_AUTH_ENCRYPTION (1 is refused)
  bool cmd_enabled = false;             // IMEX_CMD_ENABLED
  std::string cmd_bind_interface_ip;    // IMEX_CMD_BIND_INTERFACE_IP: empty = all
  std::uint16_t cmd_port = 0;           // IMEX_CMD_PORT: 0 = no TCP command service
  std::string cmd_unix_domain_path;     // IMEX_CMD_UNIX_DOMAIN_PATH: empty = none
  int node_disconnected_grace_time = -1;  // seconds; -1 forever, 0 at once
};

// Parses `KEY=value` lines; `#` starts a comment line; blank lines and spaces
// around keys and values are ignored. An empty value keeps the default.
// kInvalidArgument naming the line for a line without '=', a number out of
// range, or an unknown IMEX_WAIT_FOR_QUORUM value. Unknown keys are not errors.
common::StatusOr<ImexConfig> ParseImexConfig(std::string_view text);

// Reads and parses `path`. kNotFound if it is missing.
common::StatusOr<ImexConfig> LoadImexConfig(const std::filesystem::path& path);

// The nodes file: one IPv4/IPv6 address or host name per line, no other syntax
// (dra-wire-facts 7.2). Surrounding whitespace is trimmed; blank lines and,
// as a simulator leniency, `#` lines are skipped. Order is kept: a node's index
// (Node #N in `nvidia-imex-ctl -N`) is its position among the entries.
std::vector<std::string> ParseNodesConfig(std::string_view text);

// Reads `path` and parses it. kNotFound if it is missing.
common::StatusOr<std::vector<std::string>> LoadNodesConfig(const std::filesystem::path& path);

// The "key generated from nodes_config" (connections.html): equal lists give
// equal keys. Peers compare keys in their handshake; a mismatch is shown as
// !M! (node map mismatch) and the connection is refused.
std::string NodesConfigKey(const std::vector<std::string>& entries);

}  // namespace nvdra::simimex
