#include "mps_settings.h"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <string>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace nvdra::simmps {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::vector<std::string_view> SplitBlanks(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && IsBlank(line[i])) ++i;
    const std::size_t start = i;
    while (i < line.size() && !IsBlank(line[i])) ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

// The expected form of each command, for error replies.
constexpr std::string_view kSetPercentageUsage =
    "set_default_active_thread_percentage <percentage>, a number from 0 to 100";
constexpr std::string_view kSetPinnedUsage =
    "set_default_device_pinned_mem_limit <device index or UUID> <value>, "
    "the value an integer followed by M or G (e.g. 10240M, 10G)";
constexpr std::string_view kGetPinnedUsage =
    "get_default_device_pinned_mem_limit <device index or UUID>";

CommandResult Error(std::string message) {
  CommandResult out;
  out.reply.push_back(std::move(message));
  return out;
}

CommandResult BadArguments(std::string_view command, std::string_view usage) {
  return Error(fmt::format("Invalid arguments to {}. Usage: {}", command, usage));
}

CommandResult NoArguments(std::string_view command, const std::vector<std::string_view>& args) {
  if (args.size() == 1) return {};
  return BadArguments(command, command);
}

// Real commands that act on MPS servers or clients. The simulation never
// starts a server, so these say so rather than pretending.
constexpr std::string_view kServerCommands[] = {
    "get_server_status",        "start_server",           "get_client_list",
    "get_device_client_list",   "terminate_client",       "set_active_thread_percentage",
    "get_active_thread_percentage", "set_device_pinned_mem_limit",
    "get_device_pinned_mem_limit",  "set_default_client_priority",
    "get_default_client_priority",  "shutdown_server",    "ps",
    "lspart",                   "sm_partition"};

}  // namespace

std::optional<double> ParseThreadPercentage(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::size_t dots = 0;
  for (char c : text) {
    if (c == '.') {
      ++dots;
    } else if (!IsDigit(c)) {
      return std::nullopt;
    }
  }
  if (dots > 1 || text.front() == '.' || text.back() == '.') return std::nullopt;
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  if (value < 0.0 || value > 100.0) return std::nullopt;
  return value;
}

std::optional<std::uint64_t> ParsePinnedMemLimitMiB(std::string_view text) {
  // At most 12 digits: 10^12 GiB is far beyond any device and cannot overflow.
  if (text.size() < 2 || text.size() > 13) return std::nullopt;
  const char unit = text.back();
  if (unit != 'M' && unit != 'G') return std::nullopt;
  const std::string_view digits = text.substr(0, text.size() - 1);
  if (!std::all_of(digits.begin(), digits.end(), IsDigit)) return std::nullopt;
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return unit == 'G' ? value * 1024 : value;
}

std::string FormatPinnedMemLimit(std::uint64_t mib) {
  if (mib == 0) return "0";
  return fmt::format("{}M", mib);
}

std::optional<std::string> ParseDevice(std::string_view text) {
  if (text.starts_with("GPU-") || text.starts_with("MIG-")) {
    if (text.size() == 4) return std::nullopt;
    return std::string(text);
  }
  if (text.empty() || text.size() > 6 || !std::all_of(text.begin(), text.end(), IsDigit)) {
    return std::nullopt;
  }
  unsigned index = 0;
  std::from_chars(text.data(), text.data() + text.size(), index);
  return std::to_string(index);
}

CommandResult MpsSettings::Execute(std::string_view line) {
  const std::vector<std::string_view> args = SplitBlanks(line);
  if (args.empty()) return {};
  const std::string_view command = args[0];

  if (command == "set_default_active_thread_percentage") {
    if (args.size() != 2) return BadArguments(command, kSetPercentageUsage);
    const auto value = ParseThreadPercentage(args[1]);
    if (!value) return BadArguments(command, kSetPercentageUsage);
    default_active_thread_percentage_ = *value;
    CommandResult out;
    out.reply.push_back(fmt::format("{:.1f}", *value));
    out.changed = true;
    return out;
  }
  if (command == "get_default_active_thread_percentage") {
    if (args.size() != 1) return BadArguments(command, command);
    CommandResult out;
    out.reply.push_back(fmt::format("{:.1f}", default_active_thread_percentage_.value_or(100.0)));
    return out;
  }
  if (command == "set_default_device_pinned_mem_limit") {
    if (args.size() != 3) return BadArguments(command, kSetPinnedUsage);
    const auto device = ParseDevice(args[1]);
    const auto mib = ParsePinnedMemLimitMiB(args[2]);
    if (!device || !mib) return BadArguments(command, kSetPinnedUsage);
    default_pinned_mem_limit_mib_[*device] = *mib;
    CommandResult out;
    out.changed = true;
    return out;
  }
  if (command == "get_default_device_pinned_mem_limit") {
    if (args.size() != 2) return BadArguments(command, kGetPinnedUsage);
    const auto device = ParseDevice(args[1]);
    if (!device) return BadArguments(command, kGetPinnedUsage);
    const auto it = default_pinned_mem_limit_mib_.find(*device);
    CommandResult out;
    out.reply.push_back(
        FormatPinnedMemLimit(it == default_pinned_mem_limit_mib_.end() ? 0 : it->second));
    return out;
  }
  if (command == "get_server_list") return NoArguments(command, args);
  if (command == "quit") {
    CommandResult out = NoArguments(command, args);
    out.quit = out.reply.empty();
    return out;
  }
  if (std::find(std::begin(kServerCommands), std::end(kServerCommands), command) !=
      std::end(kServerCommands)) {
    return Error(fmt::format("{}: not supported by the simulated MPS control daemon "
                             "(it runs no MPS servers)",
                             command));
  }
  return Error(fmt::format(
      "Unrecognized command: {}. Known: set_default_active_thread_percentage, "
      "get_default_active_thread_percentage, set_default_device_pinned_mem_limit, "
      "get_default_device_pinned_mem_limit, get_server_list, quit",
      command));
}

nlohmann::json MpsSettings::ToStateJson() const {
  nlohmann::json limits = nlohmann::json::object();
  for (const auto& [device, mib] : default_pinned_mem_limit_mib_) {
    limits[device] = FormatPinnedMemLimit(mib);
  }
  nlohmann::json out = nlohmann::json::object();
  out["multiUser"] = multi_user_;
  out["defaultActiveThreadPercentage"] =
      default_active_thread_percentage_ ? nlohmann::json(*default_active_thread_percentage_)
                                        : nlohmann::json(nullptr);
  out["defaultDevicePinnedMemLimits"] = std::move(limits);
  return out;
}

}  // namespace nvdra::simmps
