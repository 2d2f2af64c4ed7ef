// The watch stream decoder: an API server's (or anything answering on its
// address) `?watch=1` body, read event by event. The first input byte picks a
// chunk size; the rest is the body, handed to the decoder in chunks of that
// size. Property: the events decoded do not depend on where the chunks end
// (the same body in one piece gives the same events and the same outcome).

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_support.h"
#include "k8s/watch.h"

namespace {

using nvdra::common::StatusOr;

// A finished response body, handed out in fixed-size pieces.
class ChunkedBody : public nvdra::k8s::HttpStream {
 public:
  ChunkedBody(std::string_view body, std::size_t chunk) {
    head_.status = 200;
    for (std::size_t i = 0; i < body.size(); i += chunk) chunks_.emplace_back(body.substr(i, chunk));
  }
  const nvdra::k8s::HttpResponse& head() const override { return head_; }
  StatusOr<std::optional<std::string>> Read(std::stop_token) override {
    if (cancelled_) return nvdra::common::CancelledError("cancelled");
    if (chunks_.empty()) return std::optional<std::string>();
    std::string chunk = std::move(chunks_.front());
    chunks_.pop_front();
    return std::optional<std::string>(std::move(chunk));
  }
  void Cancel() override { cancelled_ = true; }

 private:
  nvdra::k8s::HttpResponse head_;
  std::deque<std::string> chunks_;
  bool cancelled_ = false;
};

// What the decoder made of `body`: each event as "<type> <object>", then how
// it ended ("end", or the error's code).
std::vector<std::string> Decode(std::string_view body, std::size_t chunk) {
  nvdra::k8s::WatchStream stream(std::make_unique<ChunkedBody>(body, chunk), "fuzz watch");
  std::vector<std::string> seen;
  while (true) {
    auto next = stream.Next();
    if (!next.ok()) {
      seen.push_back("error " + std::to_string(static_cast<int>(next.status().code())));
      return seen;
    }
    if (!next->has_value()) {
      seen.push_back("end");
      return seen;
    }
    const auto& event = **next;
    seen.push_back(std::string(nvdra::k8s::WatchEventTypeName(event.type)) + " " + event.object.dump());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t chunk = 1 + data[0] % 64;
  const auto body = nvdra::fuzz::Text(data + 1, size - 1);
  const auto in_chunks = Decode(body, chunk);
  const auto whole = Decode(body, body.size() + 1);
  NVDRA_FUZZ_CHECK(in_chunks == whole, "events do not depend on chunk boundaries");
  return 0;
}
