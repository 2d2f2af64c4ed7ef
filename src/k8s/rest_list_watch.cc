#include "k8s/rest_list_watch.h"

#include <utility>

namespace nvdra::k8s {
namespace {

// A list that keeps coming back 410 is not a snapshot the informer can use;
// give up after this many restarts and let its backoff retry.
constexpr int kMaxListRestarts = 3;

// The REST watch stream under the cache's interface.
class RestWatchStream final : public cache::WatchStream {
 public:
  explicit RestWatchStream(std::unique_ptr<k8s::WatchStream> stream) : stream_(std::move(stream)) {}

  common::StatusOr<std::optional<cache::WatchEvent>> Next(std::stop_token stop) override {
    ApiResult<std::optional<WatchEvent>> next = stream_->Next(stop);
    if (!next.ok()) return next.status();
    return std::move(*next);
  }
  void Stop() override { stream_->Stop(); }

 private:
  const std::unique_ptr<k8s::WatchStream> stream_;
};

}  // namespace

common::StatusOr<RestListWatch::PageMetadata> RestListWatch::ParseListPage(
    std::string_view body, const cache::ListVisitor& visitor) {
  using nlohmann::json;
  // The callback sees every value as the parser finishes it; an item of the
  // top-level "items" array (depth 2) is handed over and then dropped from
  // the tree, so at most one item is ever parsed but not yet visited.
  std::string top_key;
  json::parser_callback_t callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key) {
      top_key = parsed.get<std::string>();
    } else if (depth == 2 && event == json::parse_event_t::object_end && top_key == "items") {
      visitor.on_item(parsed);
      return false;
    }
    return true;
  };
  json page = json::parse(body, callback, /*allow_exceptions=*/false);
  if (page.is_discarded() || !page.is_object()) {
    return common::DataLossError("list response is not a JSON object");
  }
  PageMetadata out;
  if (auto metadata = page.find("metadata"); metadata != page.end() && metadata->is_object()) {
    out.resource_version = metadata->value("resourceVersion", "");
    out.continue_token = metadata->value("continue", "");
  }
  return out;
}

common::StatusOr<cache::ListResult> RestListWatch::List(const cache::ListOptions& options,
                                                        std::stop_token stop) {
  cache::ListResult result;
  cache::ListVisitor visitor;
  visitor.on_item = [&](nlohmann::json& item) { result.items.push_back(std::move(item)); };
  visitor.on_restart = [&] { result.items.clear(); };
  common::StatusOr<std::string> resource_version = ListEach(options, stop, visitor);
  if (!resource_version.ok()) return resource_version.status();
  result.resource_version = *std::move(resource_version);
  return result;
}

common::StatusOr<std::string> RestListWatch::ListEach(const cache::ListOptions& options,
                                                      std::stop_token stop,
                                                      const cache::ListVisitor& visitor) {
  for (int attempt = 0;; ++attempt) {
    std::string resource_version;
    std::string continue_token;
    bool restart = false;
    while (true) {
      // The raw page, parsed here item by item: a list served from the API
      // server's watch cache (resourceVersion "0") ignores the page size and
      // comes back whole, and as one tree it would weigh ~9x its text.
      RestRequest request;
      request.path = resource_.Path(namespace_);
      auto add = [&](const char* key, const std::string& value) {
        if (!value.empty()) request.query.emplace_back(key, value);
      };
      add("labelSelector", options.label_selector);
      add("fieldSelector", options.field_selector);
      if (options.page_size > 0) request.query.emplace_back("limit", std::to_string(options.page_size));
      add("continue", continue_token);
      // Later pages come from the first page's snapshot; resourceVersion may
      // not be combined with continue.
      if (continue_token.empty()) add("resourceVersion", options.resource_version);
      ApiResult<HttpResponse> page = client_.Do(request, stop);
      if (!page.ok()) {
        // An expired continue token: the snapshot is gone, start over.
        if (IsGone(page.status()) && !continue_token.empty() && attempt < kMaxListRestarts) {
          restart = true;
          break;
        }
        return page.status();
      }
      common::StatusOr<PageMetadata> metadata = ParseListPage(page->body, visitor);
      if (!metadata.ok()) {
        return common::DataLossError("GET " + request.path + ": " + metadata.status().message());
      }
      resource_version = std::move(metadata->resource_version);
      if (metadata->continue_token.empty()) return resource_version;
      continue_token = std::move(metadata->continue_token);
    }
    if (restart && visitor.on_restart) visitor.on_restart();
  }
}

common::StatusOr<std::unique_ptr<cache::WatchStream>> RestListWatch::Watch(
    const cache::WatchOptions& options, std::stop_token stop) {
  WatchOptions watch;
  watch.resource_version = options.resource_version;
  watch.label_selector = options.label_selector;
  watch.field_selector = options.field_selector;
  watch.allow_bookmarks = options.allow_bookmarks;
  watch.send_initial_events = options.send_initial_events;
  if (options.timeout.count() > 0) watch.timeout_seconds = static_cast<int>(options.timeout.count());
  ApiResult<std::unique_ptr<k8s::WatchStream>> stream = client_.Watch(resource_, namespace_, watch, stop);
  if (!stream.ok()) return stream.status();
  return std::unique_ptr<cache::WatchStream>(std::make_unique<RestWatchStream>(std::move(*stream)));
}

}  // namespace nvdra::k8s
