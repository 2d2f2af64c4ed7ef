#pragma once

// What simulated IMEX daemons say to each other and to nvidia-imex-ctl, and
// how nvidia-imex-ctl prints it. Test infrastructure, not product.
//
// Defines: DaemonState, ConnState, NodeStatus (the command service's STATUS
// answer), Hello (the peer handshake), DomainReport (what `-N` prints).
//
// The wire format is the simulator's own (line-based text; the real daemons use
// gRPC). The printed formats follow the real tool, from these sources:
//   - `-q` prints the daemon's state name. Names: NVIDIA DCGM's field
//     DCGM_FI_IMEX_DAEMON_STATUS, "Retrieved from nvidia-imex-ctl -q":
//     INITIALIZING, STARTING_AUTH_SERVER, WAITING_FOR_PEERS,
//     WAITING_FOR_RECOVERY, INIT_GPU, READY, SHUTTING_DOWN, UNAVAILABLE. The
//     compute-domain daemon's `check` requires the whole output to be "READY\n".
//   - `-N` prints a legend, a timestamp, "Nodes:" with one
//     "Node #<i> - <ip> - <STATE> - Version: <v>" line each, the
//     "Nodes From\To" connectivity matrix and "Domain State: UP|DEGRADED|DOWN"
//     (AWS ParallelCluster's capacity-block guide shows a real 18-node output;
//     the letters C/N/R/D/I/A/!V!/!M! are the real legend's). `-N -j` prints
//     {"nodes": {"<i>": {"status", "host", "hostName", "connections":
//     {"<j>": {"host", "status", "changed"}}}}, "timestamp", "status"}, the
//     shape NVIDIA's isvctl tests record from a live `nvidia-imex-ctl -N -j -H`.
//
// Thread-safety: values and pure functions; thread-compatible.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nvdra::simimex {

// The version the simulated daemons report ("Version:" in `-N`); peers with a
// different version refuse each other (!V!).
inline constexpr std::string_view kDefaultVersion = "570.172.08";

enum class DaemonState : std::uint8_t {
  kInitializing,
  kWaitingForPeers,
  kWaitingForRecovery,
  kReady,
  kShuttingDown,
  kUnavailable,  // what `-N` shows for a node whose command service did not answer
};
std::string_view DaemonStateName(DaemonState state);

// One directed connection, as the legend of `-N` names them.
enum class ConnState : std::uint8_t {
  kConnected,      // C
  kNeverConnected, // N
  kRecovering,     // R: lost, clean-up not triggered (grace time not over)
  kDisconnected,   // D: lost and cleaned up (grace time over, or the peer said goodbye)
  kInvalid,        // I: the node did not answer, no status available
  kVersionMismatch,// !V!
  kMapMismatch,    // !M!: the nodes files differ
};
std::string_view ConnStateLetter(ConnState state);  // "C", "!M!", ...
std::string_view ConnStateJsonName(ConnState state);  // "CONNECTED", ...
std::optional<ConnState> ConnStateFromLetter(std::string_view letter);

// One daemon's answer to STATUS: its state and its view of every connection,
// indexed like its nodes file (its own index is shown as C once it is READY).
struct NodeStatus {
  DaemonState state = DaemonState::kUnavailable;
  int index = -1;
  std::string host;     // own address
  std::string version;
  std::vector<ConnState> connections;
  friend bool operator==(const NodeStatus&, const NodeStatus&) = default;
};
std::string EncodeNodeStatus(const NodeStatus& status);
// kInvalidArgument on anything it cannot read.
common::StatusOr<NodeStatus> DecodeNodeStatus(std::string_view text);
std::optional<DaemonState> DaemonStateFromName(std::string_view name);

// The handshake a daemon sends on each outgoing peer connection, and the
// answer. `key` is NodesConfigKey of the sender's nodes file; `instance` is a
// random id per process, so a restarted peer is seen as a new instance.
struct Hello {
  std::string version;
  std::string key;
  int index = -1;
  std::string address;
  std::string instance;
  friend bool operator==(const Hello&, const Hello&) = default;
};
std::string EncodeHello(const Hello& hello);  // "IMEXSIM1 HELLO ...\n"
common::StatusOr<Hello> DecodeHello(std::string_view line);
// Answers: "IMEXSIM1 ACK <index> <instance>", "IMEXSIM1 NAK MAP|VERSION",
// and "IMEXSIM1 BYE" sent by a daemon that shuts down cleanly.
inline constexpr std::string_view kAckPrefix = "IMEXSIM1 ACK ";
inline constexpr std::string_view kNakMap = "IMEXSIM1 NAK MAP";
inline constexpr std::string_view kNakVersion = "IMEXSIM1 NAK VERSION";
inline constexpr std::string_view kBye = "IMEXSIM1 BYE";

// Command service requests (one line each; the service answers and closes).
inline constexpr std::string_view kQueryRequest = "QUERY";    // answer: "<STATE>\n"
inline constexpr std::string_view kStatusRequest = "STATUS";  // answer: EncodeNodeStatus

// What `nvidia-imex-ctl -N` gathered: one row per nodes-file entry.
struct DomainRow {
  std::string entry;                  // as written in the nodes file
  std::optional<std::string> address; // nullopt: the entry did not resolve
  std::optional<NodeStatus> status;   // nullopt: no answer from its command service
};
struct DomainReport {
  std::string timestamp;  // "M/D/YYYY HH:MM:SS.mmm"
  std::vector<DomainRow> rows;
};

// UP when every resolvable node is READY and all connections among them are C;
// DOWN when no node answered (real `-N -j` output of an unreachable domain says
// DOWN with every node UNAVAILABLE); DEGRADED otherwise. Unresolvable entries (unused
// DNS-name slots) do not count: the simulator's choice, the docs are silent.
std::string_view DomainStateName(const DomainReport& report);
// The connection from row `from` to row `to` as `-N` prints it (I when `from`
// did not answer or has no such column).
ConnState ReportedConnection(const DomainReport& report, std::size_t from, std::size_t to);
std::string FormatDomainText(const DomainReport& report, bool show_hostnames);
std::string FormatDomainJson(const DomainReport& report);

}  // namespace nvdra::simimex
