#pragma once

// Bounds on JSON nesting and size from outside input. nlohmann's parser is iterative,
// but copying, comparing and printing a value recurse once per level: an
// AdmissionReview or ResourceClaim nesting ~100,000 arrays overflows a
// thread's stack long after it parsed. Components that take JSON from
// outside check the text first and refuse what nests deeper than any object
// they handle (ours nest about 15 levels; 512 leaves room for other drivers'
// opaque parameters).
//
// Thread-safety: pure functions.

#include <cstddef>
#include <string_view>

namespace nvdra::common {

inline constexpr std::size_t kMaxJsonNesting = 512;

// Whether `text` opens more than `limit` arrays and objects inside each
// other. Linear, no allocation; brackets inside strings (escapes included)
// do not count. Malformed text is judged by its brackets alone (the parser
// refuses it afterwards).
bool JsonNestsDeeperThan(std::string_view text, std::size_t limit = kMaxJsonNesting);

// Whether `text` holds more than `limit` JSON values, counted as containers
// opened plus separators (outside strings): an upper bound on the nodes its
// parsed tree has, so a caller can refuse a body whose tree would be many
// times its size before parsing it. Linear, no allocation.
bool JsonHasMoreValuesThan(std::string_view text, std::size_t limit);

}  // namespace nvdra::common
