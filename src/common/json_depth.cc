#include "common/json_depth.h"

namespace nvdra::common {

bool JsonNestsDeeperThan(std::string_view text, std::size_t limit) {
  std::size_t depth = 0;
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
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > limit) return true;
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return false;
}

bool JsonHasMoreValuesThan(std::string_view text, std::size_t limit) {
  // Every value but the first of a container follows a ',' (or a ':' for an
  // object's value, which pairs with its key); every container opens once.
  std::size_t values = 1;
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
    } else if (c == ',' || c == '[' || c == '{') {
      if (++values > limit) return true;
    }
  }
  return false;
}

}  // namespace nvdra::common
