#include "k8s/watch.h"

#include <utility>

namespace nvdra::k8s {

using common::StatusOr;
using nlohmann::json;

StatusOr<WatchEvent> ParseWatchEvent(std::string_view line) {
  json parsed = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) return common::InvalidArgumentError("watch event: not a JSON object");
  const auto type = parsed.find("type");
  if (type == parsed.end() || !type->is_string()) return common::InvalidArgumentError("watch event: no type");
  WatchEvent event;
  const std::string& t = type->get_ref<const std::string&>();
  StatusOr<WatchEventType> parsed_type = cache::ParseWatchEventType(t);
  if (!parsed_type.ok()) return common::InvalidArgumentError("watch event: unknown type \"" + t + "\"");
  event.type = *parsed_type;
  auto object = parsed.find("object");
  if (object == parsed.end() || !object->is_object()) {
    return common::InvalidArgumentError("watch event " + t + ": no object");
  }
  event.object = std::move(*object);
  return event;
}

WatchStream::WatchStream(std::unique_ptr<HttpStream> stream, std::string what)
    : stream_(std::move(stream)), what_(std::move(what)) {}

WatchStream::~WatchStream() { Stop(); }

void WatchStream::Stop() { stream_->Cancel(); }

ApiResult<std::optional<WatchEvent>> WatchStream::Next(std::stop_token stop) {
  while (true) {
    const auto newline = buffer_.find('\n', consumed_);
    if (newline != std::string::npos) {
      // Parsed in place: copying each line out would allocate a few KiB per
      // event, and a large malloc makes glibc consolidate every small chunk
      // the previous event's tree freed (measured: ~10 % of an informer's CPU).
      const std::string_view line = std::string_view(buffer_).substr(consumed_, newline - consumed_);
      consumed_ = newline + 1;
      if (line.find_first_not_of(" \r\t") == std::string_view::npos) continue;
      StatusOr<WatchEvent> event = ParseWatchEvent(line);
      if (!event.ok()) return common::DataLossError(what_ + ": " + event.status().message());
      if (event->type == WatchEventType::kError) {
        ended_ = true;
        stream_->Cancel();
        ApiError error = ApiErrorFromStatusObject(event->object);
        if (error.http_code == 0) error.http_code = 500;
        return ApiResult<std::optional<WatchEvent>>(std::move(error), what_);
      }
      if (auto meta = event->object.find("metadata"); meta != event->object.end() && meta->is_object()) {
        if (auto rv = meta->find("resourceVersion"); rv != meta->end() && rv->is_string()) {
          last_resource_version_ = rv->get<std::string>();
        }
      }
      return std::optional<WatchEvent>(*std::move(event));
    }
    // Only a partial line is left: drop the consumed lines before reading on.
    buffer_.erase(0, consumed_);
    consumed_ = 0;
    if (ended_) return std::optional<WatchEvent>();
    StatusOr<std::optional<std::string>> chunk = stream_->Read(stop);
    if (!chunk.ok()) return chunk.status().WithContext(what_);
    if (!chunk->has_value()) {
      ended_ = true;
      // A last event without its newline is still an event.
      if (buffer_.find_first_not_of(" \r\t\n") != std::string::npos) buffer_ += '\n';
      continue;
    }
    buffer_ += **chunk;
  }
}

}  // namespace nvdra::k8s
