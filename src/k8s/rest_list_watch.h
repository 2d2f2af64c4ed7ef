#pragma once

// RestListWatch: the informer's ListWatch (k8s/cache/list_watch.h) served by
// the REST client, for one resource (and optionally one namespace).
//
//   auto lw = std::make_unique<k8s::RestListWatch>(client, k8s::resources::kResourceSlices, "");
//   k8s::cache::Informer informer(std::move(lw), options);
//
// List pages through the whole collection (ListOptions.page_size per page,
// following continue tokens; a continue token that expired mid-list starts the
// list over, as the informer expects a consistent snapshot). Watch opens a
// watch from the given resourceVersion; 410 arrives as an IsGone status, from
// the request or from an ERROR event, for the informer to relist.
//
// Ownership: borrows the Client, which must outlive this object and every
// stream it returns. Thread-safety: thread-safe (the Client is).

#include <memory>
#include <stop_token>
#include <string>
#include <string_view>

#include "k8s/cache/list_watch.h"
#include "k8s/client.h"

namespace nvdra::k8s {

class RestListWatch final : public cache::ListWatch {
 public:
  // `ns` empty: all namespaces (or a cluster-scoped resource).
  RestListWatch(Client& client, ResourceRef resource, std::string ns)
      : client_(client), resource_(std::move(resource)), namespace_(std::move(ns)) {}

  common::StatusOr<cache::ListResult> List(const cache::ListOptions& options,
                                           std::stop_token stop) override;
  // Each page is parsed item by item, so memory stays about one item above
  // what the visitor keeps, even for a list the server sends in one piece.
  common::StatusOr<std::string> ListEach(const cache::ListOptions& options, std::stop_token stop,
                                         const cache::ListVisitor& visitor) override;
  common::StatusOr<std::unique_ptr<cache::WatchStream>> Watch(const cache::WatchOptions& options,
                                                              std::stop_token stop) override;

 private:
  struct PageMetadata {
    std::string resource_version;
    std::string continue_token;
  };
  // Visits the items of one List page body; kDataLoss when it is not JSON.
  static common::StatusOr<PageMetadata> ParseListPage(std::string_view body,
                                                      const cache::ListVisitor& visitor);

  Client& client_;
  const ResourceRef resource_;
  const std::string namespace_;
};

}  // namespace nvdra::k8s
