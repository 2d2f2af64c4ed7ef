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

}  // namespace
}  // namespace nvdra::common
