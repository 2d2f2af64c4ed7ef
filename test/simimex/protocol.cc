#include "protocol.h"

#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace nvdra::simimex {
namespace {

constexpr DaemonState kAllStates[] = {
    DaemonState::kInitializing, DaemonState::kWaitingForPeers,
    DaemonState::kWaitingForRecovery, DaemonState::kReady,
    DaemonState::kShuttingDown, DaemonState::kUnavailable};

constexpr ConnState kAllConnStates[] = {
    ConnState::kConnected, ConnState::kNeverConnected, ConnState::kRecovering,
    ConnState::kDisconnected, ConnState::kInvalid, ConnState::kVersionMismatch,
    ConnState::kMapMismatch};

std::vector<std::string> Fields(std::string_view line) {
  std::istringstream in{std::string(line)};
  std::vector<std::string> out;
  std::string field;
  while (in >> field) out.push_back(field);
  return out;
}

}  // namespace

std::string_view DaemonStateName(DaemonState state) {
  switch (state) {
    case DaemonState::kInitializing: return "INITIALIZING";
    case DaemonState::kWaitingForPeers: return "WAITING_FOR_PEERS";
    case DaemonState::kWaitingForRecovery: return "WAITING_FOR_RECOVERY";
    case DaemonState::kReady: return "READY";
    case DaemonState::kShuttingDown: return "SHUTTING_DOWN";
    case DaemonState::kUnavailable: return "UNAVAILABLE";
  }
  return "UNAVAILABLE";
}

std::optional<DaemonState> DaemonStateFromName(std::string_view name) {
  for (const DaemonState s : kAllStates) {
    if (DaemonStateName(s) == name) return s;
  }
  return std::nullopt;
}

std::string_view ConnStateLetter(ConnState state) {
  switch (state) {
    case ConnState::kConnected: return "C";
    case ConnState::kNeverConnected: return "N";
    case ConnState::kRecovering: return "R";
    case ConnState::kDisconnected: return "D";
    case ConnState::kInvalid: return "I";
    case ConnState::kVersionMismatch: return "!V!";
    case ConnState::kMapMismatch: return "!M!";
  }
  return "I";
}

// INVALID and CONNECTED are seen in real JSON; the other names are the
// legend's words in the same style (the simulator's guess).
std::string_view ConnStateJsonName(ConnState state) {
  switch (state) {
    case ConnState::kConnected: return "CONNECTED";
    case ConnState::kNeverConnected: return "NEVER_CONNECTED";
    case ConnState::kRecovering: return "RECOVERING";
    case ConnState::kDisconnected: return "DISCONNECTED";
    case ConnState::kInvalid: return "INVALID";
    case ConnState::kVersionMismatch: return "VERSION_MISMATCH";
    case ConnState::kMapMismatch: return "NODE_MAP_MISMATCH";
  }
  return "INVALID";
}

std::optional<ConnState> ConnStateFromLetter(std::string_view letter) {
  for (const ConnState s : kAllConnStates) {
    if (ConnStateLetter(s) == letter) return s;
  }
  return std::nullopt;
}

std::string EncodeNodeStatus(const NodeStatus& status) {
  std::string out = fmt::format("state {}\nindex {}\nhost {}\nversion {}\nconnections",
                                DaemonStateName(status.state), status.index,
                                status.host.empty() ? "-" : status.host,
                                status.version.empty() ? "-" : status.version);
  for (const ConnState c : status.connections) out += fmt::format(" {}", ConnStateLetter(c));
  out += "\nend\n";
  return out;
}

common::StatusOr<NodeStatus> DecodeNodeStatus(std::string_view text) {
  NodeStatus status;
  bool ended = false;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    const auto fields = Fields(line);
    if (fields.empty()) continue;
    const std::string& key = fields[0];
    if (key == "end") {
      ended = true;
      break;
    }
    if (key == "connections") {
      for (std::size_t i = 1; i < fields.size(); ++i) {
        const auto c = ConnStateFromLetter(fields[i]);
        if (!c) return common::InvalidArgumentError("status: bad connection " + fields[i]);
        status.connections.push_back(*c);
      }
      continue;
    }
    if (fields.size() != 2) return common::InvalidArgumentError("status: bad line " + line);
    const std::string& value = fields[1];
    if (key == "state") {
      const auto s = DaemonStateFromName(value);
      if (!s) return common::InvalidArgumentError("status: bad state " + value);
      status.state = *s;
    } else if (key == "index") {
      try {
        status.index = std::stoi(value);
      } catch (const std::exception&) {
        return common::InvalidArgumentError("status: bad index " + value);
      }
    } else if (key == "host") {
      status.host = value == "-" ? "" : value;
    } else if (key == "version") {
      status.version = value == "-" ? "" : value;
    }
  }
  if (!ended) return common::InvalidArgumentError("status: truncated answer");
  return status;
}

std::string EncodeHello(const Hello& hello) {
  return fmt::format("IMEXSIM1 HELLO {} {} {} {} {}\n", hello.version, hello.key, hello.index,
                     hello.address, hello.instance);
}

common::StatusOr<Hello> DecodeHello(std::string_view line) {
  const auto fields = Fields(line);
  if (fields.size() != 7 || fields[0] != "IMEXSIM1" || fields[1] != "HELLO") {
    return common::InvalidArgumentError(fmt::format("not a hello: {:?}", line));
  }
  Hello hello;
  hello.version = fields[2];
  hello.key = fields[3];
  try {
    hello.index = std::stoi(fields[4]);
  } catch (const std::exception&) {
    return common::InvalidArgumentError(fmt::format("hello: bad index {:?}", fields[4]));
  }
  hello.address = fields[5];
  hello.instance = fields[6];
  return hello;
}

ConnState ReportedConnection(const DomainReport& report, std::size_t from, std::size_t to) {
  const auto& status = report.rows[from].status;
  if (!status || to >= status->connections.size()) return ConnState::kInvalid;
  return status->connections[to];
}

std::string_view DomainStateName(const DomainReport& report) {
  std::size_t counted = 0;
  std::size_t ready = 0;
  std::size_t answered = 0;
  bool all_connected = true;
  for (std::size_t i = 0; i < report.rows.size(); ++i) {
    if (!report.rows[i].address) continue;
    ++counted;
    const auto& status = report.rows[i].status;
    if (status) ++answered;
    if (status && status->state == DaemonState::kReady) ++ready;
    for (std::size_t j = 0; j < report.rows.size(); ++j) {
      if (report.rows[j].address && ReportedConnection(report, i, j) != ConnState::kConnected) {
        all_connected = false;
      }
    }
  }
  if (answered == 0) return "DOWN";
  if (ready == counted && all_connected) return "UP";
  return "DEGRADED";
}

std::string FormatDomainText(const DomainReport& report, bool show_hostnames) {
  std::string out =
      "Connectivity Table Legend:\n"
      "I - Invalid - Node wasn't reachable, no connection status available\n"
      "N - Never Connected\n"
      "R - Recovering - Connection was lost, but clean up has not yet been triggered.\n"
      "D - Disconnected - Connection was lost, and clean up has been triggered.\n"
      "A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.\n"
      "!V! - Version mismatch, communication disabled.\n"
      "!M! - Node map mismatch, communication disabled.\n"
      "C - Connected - Ready for operation\n\n";
  out += report.timestamp + "\n";
  out += "Nodes:\n";
  for (std::size_t i = 0; i < report.rows.size(); ++i) {
    const DomainRow& row = report.rows[i];
    const std::string host = row.address.value_or(row.entry);
    const std::string label = show_hostnames ? fmt::format("{} ({})", host, row.entry) : host;
    const auto state = row.status ? row.status->state : DaemonState::kUnavailable;
    const std::string version = row.status && !row.status->version.empty()
                                    ? row.status->version : std::string("N/A");
    out += fmt::format("{:<9} - {:<15} - {:<20} - Version: {}\n", fmt::format("Node #{}", i),
                       label, DaemonStateName(state), version);
  }
  out += "\n Nodes From\\To ";
  for (std::size_t j = 0; j < report.rows.size(); ++j) out += fmt::format(" {:<3}", j);
  out += "\n";
  for (std::size_t i = 0; i < report.rows.size(); ++i) {
    out += fmt::format("{:>8}       ", i);
    for (std::size_t j = 0; j < report.rows.size(); ++j) {
      out += fmt::format(" {:<3}", ConnStateLetter(ReportedConnection(report, i, j)));
    }
    out += "\n";
  }
  out += fmt::format("\nDomain State: {}\n", DomainStateName(report));
  return out;
}

std::string FormatDomainJson(const DomainReport& report) {
  nlohmann::json nodes = nlohmann::json::object();
  for (std::size_t i = 0; i < report.rows.size(); ++i) {
    const DomainRow& row = report.rows[i];
    const std::string host = row.address.value_or(row.entry);
    nlohmann::json connections = nlohmann::json::object();
    for (std::size_t j = 0; j < report.rows.size(); ++j) {
      connections[std::to_string(j)] = {
          {"host", report.rows[j].address.value_or(report.rows[j].entry)},
          {"status", ConnStateJsonName(ReportedConnection(report, i, j))},
          {"changed", false}};
    }
    nodes[std::to_string(i)] = {
        {"status", DaemonStateName(row.status ? row.status->state : DaemonState::kUnavailable)},
        {"host", host},
        {"hostName", row.entry},
        {"connections", connections}};
  }
  nlohmann::json out = {
      {"nodes", nodes}, {"timestamp", report.timestamp}, {"status", DomainStateName(report)}};
  return out.dump(2) + "\n";
}

}  // namespace nvdra::simimex
