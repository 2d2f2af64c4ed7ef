#pragma once

// Name resolution and socket helpers for the simulated IMEX.
// Test infrastructure, not product.
//
// Defines: Resolver, LookupHostsFile, LocalInterfaceAddresses, ListenTcp,
// ListenUnix, StartConnect, CommandEndpoint, RunCommand.
//
// Thread-safety: free functions are thread-compatible; Resolver is immutable.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/unique_fd.h"

namespace nvdra::simimex {

// The address `name` has in hosts-file text ("<ip> <name> [<alias>...]" lines,
// '#' comments), or nullopt. The first matching line wins, as in glibc's
// files backend. Names compare case-insensitively.
std::optional<std::string> LookupHostsFile(std::string_view hosts_text, std::string_view name);

// Turns a nodes-file entry into a numeric address.
//
// A literal IPv4/IPv6 address is returned in canonical form. A name is looked up
// in the hosts file (/etc/hosts unless the simulator's environment names
// another, see README) and, only when `use_system_resolver` is set, then with
// getaddrinfo. The default stays off DNS on purpose: simulated clusters have no
// cluster DNS, the compute-domain daemon's DNS-names mode maps names only in
// /etc/hosts, and a DNS timeout would stall the daemon's single event loop.
// Immutable.
class Resolver {
 public:
  Resolver(std::filesystem::path hosts_file, bool use_system_resolver)
      : hosts_file_(std::move(hosts_file)), use_system_resolver_(use_system_resolver) {}

  // The address, or nullopt when the entry does not resolve (not an error: a
  // DNS-names nodes file lists more names than there are daemons).
  [[nodiscard]] std::optional<std::string> Resolve(std::string_view entry) const;

 private:
  std::filesystem::path hosts_file_;
  bool use_system_resolver_;
};

// The canonical form of a numeric address, or nullopt if `text` is none.
std::optional<std::string> CanonicalAddress(std::string_view text);

// Addresses assigned to this host's interfaces (getifaddrs), canonical form.
std::set<std::string> LocalInterfaceAddresses();

// A listening, non-blocking TCP socket on `ip` (empty: all IPv4 interfaces)
// and `port`, with SO_REUSEADDR so a restarted daemon rebinds at once.
common::StatusOr<common::UniqueFd> ListenTcp(const std::string& ip, std::uint16_t port);

// A listening, non-blocking unix socket at `path` (a stale file is replaced).
common::StatusOr<common::UniqueFd> ListenUnix(const std::filesystem::path& path);

// Starts a non-blocking connect to ip:port. The socket is ready for writing
// when the connect completes; check SO_ERROR then.
common::StatusOr<common::UniqueFd> StartConnect(const std::string& ip, std::uint16_t port);

// Where a command service listens: TCP ip:port, or a unix socket path.
struct CommandEndpoint {
  std::string ip;
  std::uint16_t port = 0;
  std::filesystem::path unix_path;  // used when non-empty
  [[nodiscard]] std::string ToString() const;
};

// Sends `request` (one line) to a command service and returns everything it
// answers until it closes. kUnavailable if it cannot connect; kDeadlineExceeded
// past `timeout`.
common::StatusOr<std::string> RunCommand(const CommandEndpoint& endpoint,
                                         std::string_view request,
                                         std::chrono::milliseconds timeout);

}  // namespace nvdra::simimex
