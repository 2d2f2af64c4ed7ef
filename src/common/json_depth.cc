#include "common/json_depth.h"

namespace nvdra::common {
namespace {

// Calls `structural(c)` for each character of `text` outside strings (escapes
// included) until it returns true; whether it did.
template <typename Structural>
bool AnyStructural(std::string_view text, Structural structural) {
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (structural(c)) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool JsonNestsDeeperThan(std::string_view text, std::size_t limit) {
  std::size_t depth = 0;
  return AnyStructural(text, [&](char c) {
    if (c == '[' || c == '{') return ++depth > limit;
    if ((c == ']' || c == '}') && depth > 0) --depth;
    return false;
  });
}

bool JsonHasMoreValuesThan(std::string_view text, std::size_t limit) {
  // Every value but the first of a container follows a ',' (or a ':' for an
  // object's value, which pairs with its key); every container opens once.
  std::size_t values = 1;
  return AnyStructural(text, [&](char c) { return (c == ',' || c == '[' || c == '{') && ++values > limit; });
}

}  // namespace nvdra::common
