#pragma once

// Standard base64 (RFC 4648, with padding) decoding for kubeconfig *-data
// fields. Thread-safety: pure function.

#include <optional>
#include <string>
#include <string_view>

namespace nvdra::k8s::internal {

// The bytes `text` encodes; whitespace is skipped (kubeconfig writers wrap
// lines). nullopt on any other character outside the alphabet or bad padding.
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace nvdra::k8s::internal
