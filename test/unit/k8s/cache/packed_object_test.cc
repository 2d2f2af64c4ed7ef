#include "k8s/cache/packed_object.h"

#include <cstdint>
#include <limits>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace nvdra::k8s::cache {
namespace {

using nlohmann::json;

// Every JSON type, and lengths and integers at each CBOR head size boundary.
json EveryKind() {
  json object = {
      {"null", nullptr},
      {"true", true},
      {"false", false},
      {"small", 23},
      {"one_byte", 24},
      {"two_bytes", 256},
      {"four_bytes", 65536},
      {"eight_bytes", 4294967296ULL},
      {"uint64_max", std::numeric_limits<std::uint64_t>::max()},
      {"minus_one", -1},
      {"minus_25", -25},
      {"int64_min", std::numeric_limits<std::int64_t>::min()},
      {"float", 3.5},
      {"negative_float", -1e-300},
      {"unicode", "GPU \u00e9\u4e2d \U0001F680"},
      {"empty_string", ""},
      {"empty_object", json::object()},
      {"empty_array", json::array()},
      {"nested", {{"a", {{"b", {{"c", json::array({1, "two", 3.0, false, nullptr})}}}}}}},
  };
  object["string_23"] = std::string(23, 'a');
  object["string_24"] = std::string(24, 'b');
  object["string_300"] = std::string(300, 'c');
  object["string_70000"] = std::string(70000, 'd');
  json many = json::array();
  for (int i = 0; i < 300; ++i) many.push_back(i * 1000);
  object["array_300"] = many;
  json wide = json::object();
  for (int i = 0; i < 30; ++i) wide["k" + std::to_string(i)] = i;
  object["object_30"] = wide;
  return object;
}

TEST(PackedObjectTest, RoundTripsEveryKindOfValue) {
  const json original = EveryKind();
  EXPECT_EQ(UnpackJson(PackJson(original)), original);
  for (const json& scalar : {json(nullptr), json(7), json(-7), json("s"), json(0.5), json::array()}) {
    EXPECT_EQ(UnpackJson(PackJson(scalar)), scalar) << scalar.dump();
  }
}

TEST(PackedObjectTest, IsStandardCbor) {
  const json original = EveryKind();
  const std::string packed = PackJson(original);
  EXPECT_EQ(json::from_cbor(packed), original) << "another CBOR reader disagrees";
  // And we read what another CBOR writer wrote for the same value (minus its
  // float32 shortening, which we never emit).
  json integers = {{"a", 1}, {"b", -300}, {"c", "text"}, {"d", {true, nullptr}}};
  const std::vector<std::uint8_t> theirs = json::to_cbor(integers);
  EXPECT_EQ(UnpackJson(std::string(theirs.begin(), theirs.end())), integers);
}

TEST(PackedObjectTest, IsMuchSmallerThanTheTreeAndKeepsTheResourceVersion) {
  json slice = {{"metadata", {{"name", "s"}, {"resourceVersion", "42"}}}, {"spec", {{"devices", json::array()}}}};
  for (int d = 0; d < 8; ++d) {
    slice["spec"]["devices"].push_back({{"name", "gpu-" + std::to_string(d)},
                                        {"attributes", {{"productName", {{"string", "NVIDIA H100 80GB HBM3"}}}}}});
  }
  PackedObject packed(slice);
  EXPECT_EQ(packed.resource_version(), "42");
  EXPECT_LT(packed.bytes().size(), slice.dump().size());
  EXPECT_EQ(*packed.Unpack(), slice);
  EXPECT_NE(packed.Unpack().get(), packed.Unpack().get()) << "nothing held: each read decodes";
  EXPECT_EQ(PackedObject(json{{"metadata", {{"name", "x"}}}}).resource_version(), "");
}

TEST(PackedObjectTest, SharesTheLiveTreeUntilItIsDropped) {
  auto tree = std::make_shared<const json>(json{{"metadata", {{"name", "a"}, {"resourceVersion", "1"}}}});
  PackedObject packed(tree);
  EXPECT_EQ(packed.Unpack().get(), tree.get());
  const json copy = *tree;
  tree.reset();
  ObjectPtr fresh = packed.Unpack();
  EXPECT_EQ(*fresh, copy);
}

TEST(PackedObjectTest, SameContentMeansEqualJson) {
  PackedObject a(json{{"x", 1}, {"y", {1, 2}}});
  PackedObject b(json{{"y", {1, 2}}, {"x", 1}});
  PackedObject c(json{{"x", 1}, {"y", {2, 1}}});
  EXPECT_TRUE(a.SameContent(b));
  EXPECT_FALSE(a.SameContent(c));
}

TEST(PackedObjectDeathTest, CorruptBytesAbort) {
  EXPECT_DEATH(UnpackJson(std::string("\x62" "a", 2)), "corrupt packed object");
  EXPECT_DEATH(UnpackJson(std::string("\x01\x01", 2)), "trailing bytes");
}

}  // namespace
}  // namespace nvdra::k8s::cache
