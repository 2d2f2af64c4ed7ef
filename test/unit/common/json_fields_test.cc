#include "common/json_fields.h"

#include <string>
#include <type_traits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace nvdra::common {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

template <typename T>
class JsonFieldsTest : public ::testing::Test {};
using JsonTypes = ::testing::Types<json, ordered_json>;
// Short names: gtest's default spells out the whole template type, and ctest
// pads every line of its report to the longest test name.
struct JsonTypeName {
  template <typename T>
  static std::string GetName(int) {
    return std::is_same_v<T, json> ? "json" : "ordered_json";
  }
};
TYPED_TEST_SUITE(JsonFieldsTest, JsonTypes, JsonTypeName);

TYPED_TEST(JsonFieldsTest, ReadsPresentFieldsOfTheRightType) {
  const auto object = TypeParam::parse(R"({
    "name": "a", "count": 7, "on": true, "list": ["x", "y"],
    "spec": {"pool": {"name": "p", "generation": 3}}
  })");
  EXPECT_EQ(JsonString(object, "name"), "a");
  EXPECT_EQ(JsonString(object, {"spec", "pool", "name"}), "p");
  EXPECT_EQ(JsonInt(object, {"spec", "pool", "generation"}), 3);
  EXPECT_EQ(JsonInt(object, {"count"}), 7);
  EXPECT_TRUE(JsonBool(object, {"on"}));
  EXPECT_EQ(JsonStrings(object, {"list"}), (std::vector<std::string>{"x", "y"}));
  ASSERT_NE(JsonFind(object, "spec"), nullptr);
  EXPECT_EQ(JsonFind(object, {"spec", "pool"}), &object["spec"]["pool"]);
  EXPECT_EQ(JsonMember(object, "name"), "a");
}

TYPED_TEST(JsonFieldsTest, AbsentNullAndWrongTypeReadAsDefaults) {
  const auto object = TypeParam::parse(R"({
    "null": null, "number": 1.5, "string": "s", "list": ["x", 1, null, "y"],
    "spec": "not an object"
  })");
  EXPECT_EQ(JsonFind(object, "missing"), nullptr);
  EXPECT_EQ(JsonFind(object, "null"), nullptr);
  EXPECT_EQ(JsonFind(object, {"spec", "pool"}), nullptr);
  EXPECT_TRUE(JsonMember(object, "null").is_null());
  EXPECT_TRUE(JsonMember(object, {"spec", "pool"}).is_null());

  EXPECT_EQ(JsonString(object, "missing"), "");
  EXPECT_EQ(JsonString(object, "null"), "");
  EXPECT_EQ(JsonString(object, "number"), "");
  EXPECT_EQ(JsonString(object, {"spec", "name"}), "");
  EXPECT_EQ(JsonInt(object, {"number"}), 0);
  EXPECT_EQ(JsonInt(object, {"string"}, -1), -1);
  EXPECT_EQ(JsonInt(object, {"missing"}, -1), -1);
  EXPECT_FALSE(JsonBool(object, {"string"}));
  EXPECT_TRUE(JsonBool(object, {"missing"}, true));
  EXPECT_TRUE(JsonStrings(object, {"string"}).empty());
  EXPECT_EQ(JsonStrings(object, {"list"}), (std::vector<std::string>{"x", "y"}));
}

TYPED_TEST(JsonFieldsTest, NonObjectsNeverThrow) {
  for (const auto& value : {TypeParam(), TypeParam(3), TypeParam("text"), TypeParam::array({1, 2})}) {
    EXPECT_EQ(JsonFind(value, "a"), nullptr);
    EXPECT_EQ(JsonFind(value, {"a", "b"}), nullptr);
    EXPECT_EQ(JsonString(value, "a"), "");
    EXPECT_EQ(JsonString(value, {"a", "b"}), "");
    EXPECT_EQ(JsonInt(value, {"a"}), 0);
    EXPECT_FALSE(JsonBool(value, {"a"}));
    EXPECT_TRUE(JsonStrings(value, {"a"}).empty());
  }
}

TYPED_TEST(JsonFieldsTest, EmptyPathIsTheObjectItself) {
  const TypeParam object = "top";
  EXPECT_EQ(JsonFind(object, JsonKeys{}), &object);
  EXPECT_EQ(JsonString(object, JsonKeys{}), "top");
  EXPECT_EQ(JsonFind(TypeParam(), JsonKeys{}), nullptr);
}

TEST(JsonFieldsTest, OneBracedKeyIsAPath) {
  const json object = {{"a", "b"}};
  EXPECT_EQ(JsonString(object, {"a"}), "b");
}

}  // namespace
}  // namespace nvdra::common
