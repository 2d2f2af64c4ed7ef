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

common::StatusOr<cache::ListResult> RestListWatch::List(const cache::ListOptions& options,
                                                        std::stop_token stop) {
  for (int attempt = 0;; ++attempt) {
    cache::ListResult result;
    ListOptions page;
    page.label_selector = options.label_selector;
    page.field_selector = options.field_selector;
    page.resource_version = options.resource_version;
    page.limit = options.page_size;
    bool restart = false;
    while (true) {
      ApiResult<nlohmann::json> list = client_.List(resource_, namespace_, page, stop);
      if (!list.ok()) {
        // An expired continue token: the snapshot is gone, start over.
        if (IsGone(list.status()) && !page.continue_token.empty() && attempt < kMaxListRestarts) {
          restart = true;
          break;
        }
        return list.status();
      }
      nlohmann::json& body = *list;
      if (auto items = body.find("items"); items != body.end() && items->is_array()) {
        for (auto& item : *items) result.items.push_back(std::move(item));
      }
      const nlohmann::json& metadata = body.value("metadata", nlohmann::json::object());
      result.resource_version = metadata.value("resourceVersion", "");
      std::string next = metadata.value("continue", "");
      if (next.empty()) break;
      page.continue_token = std::move(next);
      // Later pages come from the first page's snapshot; resourceVersion may
      // not be combined with continue.
      page.resource_version.clear();
    }
    if (!restart) return result;
  }
}

common::StatusOr<std::unique_ptr<cache::WatchStream>> RestListWatch::Watch(
    const cache::WatchOptions& options, std::stop_token stop) {
  WatchOptions watch;
  watch.resource_version = options.resource_version;
  watch.label_selector = options.label_selector;
  watch.field_selector = options.field_selector;
  watch.allow_bookmarks = options.allow_bookmarks;
  if (options.timeout.count() > 0) watch.timeout_seconds = static_cast<int>(options.timeout.count());
  ApiResult<std::unique_ptr<k8s::WatchStream>> stream = client_.Watch(resource_, namespace_, watch, stop);
  if (!stream.ok()) return stream.status();
  return std::unique_ptr<cache::WatchStream>(std::make_unique<RestWatchStream>(std::move(*stream)));
}

}  // namespace nvdra::k8s
