#pragma once

// MpsSettings: what the simulated MPS control daemon has been told, and the
// interpreter of its command language. Test infrastructure, not product.
//
// Commands and replies follow NVIDIA's MPS documentation and logs of the real
// daemon (README.md, "Sources"):
//   set_default_active_thread_percentage <0..100>  reply "<value>" as "50.0"
//   get_default_active_thread_percentage            reply "100.0" until set
//   set_default_device_pinned_mem_limit <dev> <n>M|<n>G   no reply
//   get_default_device_pinned_mem_limit <dev>       reply the limit, or "0"
//   get_server_list                                 no reply (no servers)
//   quit                                            no reply; the daemon stops
// <dev> is a device index or a GPU-/MIG- UUID, kept as given (an index and the
// UUID of the same GPU are two entries: the simulator knows no device list).
// Anything else, or bad arguments, gets one error line that names the command
// and its expected form; that is a reply like any other, not a failure.
//
// Thread-safety: thread-compatible (the daemon's single loop owns it).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace nvdra::simmps {

struct CommandResult {
  std::vector<std::string> reply;  // lines, without newlines; may be empty
  bool changed = false;            // the settings changed: rewrite the state file
  bool quit = false;               // the daemon must stop after replying
};

class MpsSettings {
 public:
  explicit MpsSettings(bool multi_user) : multi_user_(multi_user) {}

  // Runs one command line (surrounding blanks ignored; tokens split on blanks).
  CommandResult Execute(std::string_view line);

  // The simulation-only state file's content:
  // {"multiUser": bool, "defaultActiveThreadPercentage": number|null,
  //  "defaultDevicePinnedMemLimits": {"<dev>": "<limit as get replies it>"}}.
  [[nodiscard]] nlohmann::json ToStateJson() const;

 private:
  bool multi_user_;
  std::optional<double> default_active_thread_percentage_;
  std::map<std::string, std::uint64_t> default_pinned_mem_limit_mib_;  // by <dev>
};

// Parsing and formatting, exposed for tests.

// "50", "50.0", "12.5" within [0, 100]; nullopt otherwise (signs, exponents,
// "%" and empty text are refused).
std::optional<double> ParseThreadPercentage(std::string_view text);
// "<digits>M" or "<digits>G" in MiB; nullopt otherwise.
std::optional<std::uint64_t> ParsePinnedMemLimitMiB(std::string_view text);
// The limit as get_default_device_pinned_mem_limit replies it: "0" for none,
// else in MiB, "<n>M" ("10G" reads back as "10240M"). NVIDIA documents no
// reply format; MiB is the unit the driver and the device plugin send.
std::string FormatPinnedMemLimit(std::uint64_t mib);
// A device index (decimal, normalised: "00" is "0") or a UUID starting with
// "GPU-" or "MIG-" (kept as given); nullopt otherwise.
std::optional<std::string> ParseDevice(std::string_view text);

}  // namespace nvdra::simmps
