#include "common/log.h"

#include <atomic>
#include <memory>
#include <ostream>

#include <fmt/format.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace nvdra::common {
namespace {

std::atomic<int> g_verbosity{kDefaultVerbosity};

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
  state->logger->set_pattern(format == LogFormat::kJson ? R"({"ts":%E.%f,%v)"
                                                        : "%L%m%d %H:%M:%S.%f %7t %v");
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
  if (verbosity > kMaxVerbosity) verbosity = kMaxVerbosity;
  g_verbosity.store(verbosity, std::memory_order_relaxed);
}

bool VerbosityEnabled(int verbosity) {
  return verbosity <= g_verbosity.load(std::memory_order_relaxed);
}

void LogLine(LogSeverity severity, int verbosity, std::string_view message,
             std::span<const LogField> fields, std::source_location location) {
  const std::shared_ptr<LoggerState> state = State().load();
  std::string line;
  line.reserve(128);
  const std::string_view file = BaseName(location.file_name());
  if (state->format == LogFormat::kJson) {
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
