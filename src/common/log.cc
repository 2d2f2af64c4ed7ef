#include "common/log.h"

#include <fnmatch.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace nvdra::common {
namespace {

std::atomic<int> g_verbosity{kDefaultVerbosity};

struct VmoduleEntry {
  std::string pattern;
  bool match_path = false;  // the pattern holds a '/'
  int verbosity = 0;
};
// Set before threads start (SetVmodule); read-only afterwards.
std::vector<VmoduleEntry> g_vmodule;
std::atomic<bool> g_vmodule_set{false};

struct LoggerState {
  std::shared_ptr<spdlog::logger> logger;
  LogFormat format = LogFormat::kText;
};

std::shared_ptr<LoggerState> MakeState(LogFormat format, std::ostream* out) {
  spdlog::sink_ptr sink;
  if (out != nullptr) {
    sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(*out, /*force_flush=*/true);
  } else {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  }
  auto state = std::make_shared<LoggerState>();
  state->format = format;
  state->logger = std::make_shared<spdlog::logger>("nvdra", std::move(sink));
  // Filtering is ours (VerbosityEnabled); spdlog writes whatever reaches it.
  state->logger->set_level(spdlog::level::trace);
  state->logger->flush_on(spdlog::level::err);
  // Text looks like klog: "I1122 23:01:02.123456  12345 main.cc:42] "msg" k="v"".
  // JSON: the timestamp comes from spdlog; the rest of the object is ours.
  // JSON "ts" is written by LogLine: milliseconds since the epoch, as the
  // Go driver's JSON logger (component-base) writes it.
  state->logger->set_pattern(format == LogFormat::kJson ? "{%v" : "%L%m%d %H:%M:%S.%f %7t %v");
  return state;
}

// Swapped whole by InitLogging, so a concurrent line sees either the old or the
// new logger, never a half-configured one.
std::atomic<std::shared_ptr<LoggerState>>& State() {
  static std::atomic<std::shared_ptr<LoggerState>> state{MakeState(LogFormat::kText, nullptr)};
  return state;
}

void AppendQuoted(std::string& out, std::string_view text) {
  out.push_back('"');
  for (char c : text) {
    switch (c) {
      case '"': out.append("\\\""); break;
      case '\\': out.append("\\\\"); break;
      case '\n': out.append("\\n"); break;
      case '\r': out.append("\\r"); break;
      case '\t': out.append("\\t"); break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

void AppendValue(std::string& out, const LogValue& value) {
  std::visit(
      [&out](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::string_view> || std::is_same_v<V, std::string>) {
          AppendQuoted(out, v);
        } else if constexpr (std::is_same_v<V, bool>) {
          out.append(v ? "true" : "false");
        } else {
          fmt::format_to(std::back_inserter(out), "{}", v);
        }
      },
      value.get());
}

std::string_view BaseName(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

spdlog::level::level_enum SpdlogLevel(LogSeverity severity) {
  switch (severity) {
    case LogSeverity::kInfo: return spdlog::level::info;
    case LogSeverity::kWarning: return spdlog::level::warn;
    case LogSeverity::kError: return spdlog::level::err;
  }
  return spdlog::level::err;
}

std::string_view SeverityName(LogSeverity severity) {
  switch (severity) {
    case LogSeverity::kInfo: return "info";
    case LogSeverity::kWarning: return "warning";
    case LogSeverity::kError: return "error";
  }
  return "error";
}

}  // namespace

StatusOr<LogFormat> ParseLogFormat(std::string_view text) {
  if (text == "text") return LogFormat::kText;
  if (text == "json") return LogFormat::kJson;
  return InvalidArgumentError(fmt::format("unknown log format \"{}\": want text or json", text));
}

void InitLogging(const LogOptions& options, std::ostream* out) {
  SetVerbosity(options.verbosity);
  State().store(MakeState(options.format, out));
}

int Verbosity() { return g_verbosity.load(std::memory_order_relaxed); }

void SetVerbosity(int verbosity) {
  if (verbosity < kMinVerbosity) verbosity = kMinVerbosity;
  g_verbosity.store(verbosity, std::memory_order_relaxed);
}

bool VerbosityEnabled(int verbosity, std::source_location where) {
  if (verbosity <= g_verbosity.load(std::memory_order_relaxed)) return true;
  if (!g_vmodule_set.load(std::memory_order_acquire)) return false;
  const char* path = where.file_name();
  const std::string_view base = BaseName(path);
  const std::string name(base.substr(0, base.find('.')));
  for (const VmoduleEntry& entry : g_vmodule) {
    if (::fnmatch(entry.pattern.c_str(), entry.match_path ? path : name.c_str(), 0) == 0) {
      return verbosity <= entry.verbosity;
    }
  }
  return false;
}

Status SetVmodule(std::string_view spec) {
  std::vector<VmoduleEntry> entries;
  while (!spec.empty()) {
    const std::size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    const std::size_t equals = item.rfind('=');
    int level = -1;
    if (equals != std::string_view::npos && equals > 0) {
      const std::string_view number = item.substr(equals + 1);
      const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), level);
      if (ec != std::errc() || end != number.data() + number.size()) level = -1;
    }
    if (level < 0) {
      return InvalidArgumentError(fmt::format(
          "--vmodule: \"{}\" is not pattern=N (a file-name glob and a level, e.g. claim_preparer=6)", item));
    }
    const std::string_view pattern = item.substr(0, equals);
    entries.push_back({.pattern = std::string(pattern),
                       .match_path = pattern.find('/') != std::string_view::npos,
                       .verbosity = level});
  }
  g_vmodule_set.store(false, std::memory_order_release);
  g_vmodule = std::move(entries);
  g_vmodule_set.store(!g_vmodule.empty(), std::memory_order_release);
  return OkStatus();
}

void LogLine(LogSeverity severity, int verbosity, std::string_view message,
             std::span<const LogField> fields, std::source_location location) {
  const std::shared_ptr<LoggerState> state = State().load();
  std::string line;
  line.reserve(128);
  const std::string_view file = BaseName(location.file_name());
  if (state->format == LogFormat::kJson) {
    const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
    const auto nanos = std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch).count();
    fmt::format_to(std::back_inserter(line), R"("ts":{}.{:06},)", nanos / 1000000, nanos % 1000000);
    line.append(R"("caller":)");
    AppendQuoted(line, fmt::format("{}:{}", file, location.line()));
    line.append(R"(,"msg":)");
    AppendQuoted(line, message);
    if (severity == LogSeverity::kInfo) {
      fmt::format_to(std::back_inserter(line), R"(,"v":{})", verbosity);
    } else {
      line.append(R"(,"level":)");
      AppendQuoted(line, SeverityName(severity));
    }
    for (const LogField& field : fields) {
      line.push_back(',');
      AppendQuoted(line, field.key);
      line.push_back(':');
      AppendValue(line, field.value);
    }
    line.push_back('}');
  } else {
    fmt::format_to(std::back_inserter(line), "{}:{}] ", file, location.line());
    AppendQuoted(line, message);
    for (const LogField& field : fields) {
      line.push_back(' ');
      line.append(field.key);
      line.push_back('=');
      AppendValue(line, field.value);
    }
  }
  state->logger->log(SpdlogLevel(severity), "{}", line);
}

void FlushLogs() { State().load()->logger->flush(); }

}  // namespace nvdra::common
