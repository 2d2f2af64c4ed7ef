#pragma once

// The files the compute-domain daemon writes for nvidia-imex
// (dra-wire-facts.md section 7): imexd.cfg rendered from its template, the
// nodes file (static DNS names or peer IPs) and the daemon's mappings in
// /etc/hosts. Text in, text out, plus two small file writers.
// Defines: ImexConfigValues, RenderImexConfig, DnsName, StaticNodesConfig,
// IpNodesConfig, IsIpAddressLiteral, RewriteHostsFile, WriteFileAtomically, WriteFileInPlace.
// Ownership: values only. Thread-safety: thread-safe (no shared state).

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace nvdra::computedomain {

// Names in the nodes file and in /etc/hosts: "compute-domain-daemon-%04d".
inline constexpr std::string_view kDnsNamePrefix = "compute-domain-daemon-";
// The comment above the daemon's lines in /etc/hosts (upstream's text).
inline constexpr std::string_view kHostsMarker = "# Compute Domain Daemon mappings";

// The template's variables, by upstream's names.
struct ImexConfigValues {
  std::string cmd_bind_interface_ip;  // {{ .IMEXCmdBindInterfaceIP }}: the pod IP
  std::string nodes_config_path;      // {{ .IMEXDaemonNodesConfigPath }}
};

// Replaces each `{{ .Name }}` (spaces inside the braces optional) by its
// value. The template language is Go's text/template, of which only this
// form is understood, so upstream's template file renders the same.
// kInvalidArgument naming the line for an unknown variable or an unclosed
// `{{`.
common::StatusOr<std::string> RenderImexConfig(std::string_view template_text, const ImexConfigValues& values);

// "compute-domain-daemon-0007" for 7.
std::string DnsName(std::int64_t index);

// DNS-names mode: every name for indexes 0..max_nodes-1, one per line. The
// file never changes afterwards; peers move by /etc/hosts.
std::string StaticNodesConfig(int max_nodes);

// IP mode: one address per line, in the given order.
std::string IpNodesConfig(const std::vector<std::string>& ips);

// Whether `text` is one IPv4 or IPv6 address literal (inet_pton): what a
// peer's ipAddress must be before it goes into the nodes file or
// /etc/hosts, where a newline or a space would add lines or names.
bool IsIpAddressLiteral(std::string_view text);

// `hosts` with every line naming a kDnsNamePrefix name (and the marker
// comment) dropped, then the marker and "<ip>\t<name>" for each entry of
// `ip_by_index`, by index. Other lines are kept as they are.
std::string RewriteHostsFile(std::string_view hosts, const std::map<std::int64_t, std::string>& ip_by_index);

// Writes `content` to a temporary file next to `path`, then renames it over
// `path`: a reader sees the old file or the new one, never half of one.
// Errors are errno-mapped, naming the path.
common::Status WriteFileAtomically(const std::filesystem::path& path, std::string_view content);

// Rewrites `path` in place, never leaving it empty or shorter than its new
// content while a reader looks (overwrite from offset 0, then truncate). For
// /etc/hosts, which the container runtime bind-mounts as a single file:
// rename() over a mount point fails with EBUSY, so the atomic writer cannot
// be used there.
common::Status WriteFileInPlace(const std::filesystem::path& path, std::string_view content);

}  // namespace nvdra::computedomain
