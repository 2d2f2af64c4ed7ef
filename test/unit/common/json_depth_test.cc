// JsonNestsDeeperThan: counts the brackets of arrays and objects, not those
// inside strings, and stops at the limit.
#include "common/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace nvdra::common {
namespace {

TEST(JsonNestsDeeperThan, CountsArraysAndObjectsButNotStrings) {
  EXPECT_FALSE(JsonNestsDeeperThan(R"({"a":[{"b":1}]})", 3));
  EXPECT_TRUE(JsonNestsDeeperThan(R"({"a":[{"b":[1]}]})", 3));
  // Brackets in strings, escaped quotes included, do not count.
  EXPECT_FALSE(JsonNestsDeeperThan(R"({"a":"[[[[{{{{\"[[[["})", 1));
  // Siblings do not add up.
  EXPECT_FALSE(JsonNestsDeeperThan("[[1],[2],[3],[4]]", 2));
  EXPECT_FALSE(JsonNestsDeeperThan("", 0));
  EXPECT_TRUE(JsonNestsDeeperThan(std::string(kMaxJsonNesting + 1, '['), kMaxJsonNesting));
  EXPECT_FALSE(JsonNestsDeeperThan(std::string(kMaxJsonNesting, '['), kMaxJsonNesting));
}

TEST(JsonHasMoreValuesThan, BoundsTheParsedTreeNotTheText) {
  EXPECT_FALSE(JsonHasMoreValuesThan("1", 1));
  EXPECT_FALSE(JsonHasMoreValuesThan("[1,2]", 3));  // the array and its two numbers
  EXPECT_TRUE(JsonHasMoreValuesThan("[1,2,3]", 3));
  EXPECT_FALSE(JsonHasMoreValuesThan(R"({"a":1,"b":2})", 3));
  // Separators inside strings (escaped quotes included) are text, not values.
  EXPECT_FALSE(JsonHasMoreValuesThan(R"(["a,b,c,[{", "\",,,"])", 3));
  // A long string is one value however long; many tiny values are many.
  EXPECT_FALSE(JsonHasMoreValuesThan("\"" + std::string(1 << 20, 'x') + "\"", 1));
  std::string tiny = "[";
  for (int i = 0; i < 1000; ++i) tiny += i == 0 ? "0" : ",0";
  tiny += "]";
  EXPECT_TRUE(JsonHasMoreValuesThan(tiny, 1000));
  EXPECT_FALSE(JsonHasMoreValuesThan(tiny, 1001));
}

}  // namespace
}  // namespace nvdra::common
