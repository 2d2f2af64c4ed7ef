// Owned objects: when the controller writes over an existing object, and
// when it leaves it alone.

#include "computedomain/controller/owned_objects.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace nvdra::computedomain::controller {
namespace {

using json = nlohmann::json;

TEST(IsSubsetTest, ServerDefaultsAndOmittedZeroValuesAreNoDifference) {
  EXPECT_TRUE(IsSubset(json::parse(R"({"a": 1, "b": {"c": "x"}})"),
                       json::parse(R"({"a": 1, "b": {"c": "x", "d": 2}, "e": true})")));
  EXPECT_TRUE(IsSubset(json::parse(R"({"a": [], "b": "", "c": 0, "d": false, "e": null})"), json::object()));
  EXPECT_FALSE(IsSubset(json::parse(R"({"a": 1})"), json::parse(R"({"a": 2})")));
  EXPECT_FALSE(IsSubset(json::parse(R"({"a": "x"})"), json::object()));
}

TEST(IsSubsetTest, ArraysCompareElementByElementWithTheSameLength) {
  EXPECT_TRUE(IsSubset(json::parse(R"([{"a": 1}])"), json::parse(R"([{"a": 1, "b": 2}])")));
  EXPECT_FALSE(IsSubset(json::parse(R"([{"a": 1}])"), json::parse(R"([{"a": 1}, {"a": 2}])")));
}

json Owned(std::string uid, std::string spec_value, bool finalizer = true) {
  json o = {{"metadata", {{"name", "n"}, {"namespace", "ns"}, {"labels", {{"resource.nvidia.com/computeDomain", uid}}}}},
            {"spec", {{"x", spec_value}}}};
  if (finalizer) o["metadata"]["finalizers"] = {std::string(kFinalizer)};
  return o;
}

TEST(DecideOwnedObjectActionTest, AsWantedIsLeftAlone) {
  EXPECT_EQ(DecideOwnedObjectAction(Owned("u1", "a"), Owned("u1", "a"), "u1", false), OwnedObjectAction::kNone);
}

TEST(DecideOwnedObjectActionTest, SomeoneElsesObjectIsNeverWritten) {
  EXPECT_EQ(DecideOwnedObjectAction(Owned("u1", "a"), Owned("u2", "b"), "u1", false), OwnedObjectAction::kForeign);
  json unlabelled = Owned("u1", "a");
  unlabelled["metadata"].erase("labels");
  EXPECT_EQ(DecideOwnedObjectAction(Owned("u1", "a"), unlabelled, "u1", true), OwnedObjectAction::kForeign);
}

TEST(DecideOwnedObjectActionTest, OneBeingDeletedIsLetGo) {
  json deleting = Owned("u1", "a");
  deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  EXPECT_EQ(DecideOwnedObjectAction(Owned("u1", "a"), deleting, "u1", false), OwnedObjectAction::kRelease);
}

TEST(DecideOwnedObjectActionTest, DriftIsUpdatedButAnImmutableSpecIsReplaced) {
  EXPECT_EQ(DecideOwnedObjectAction(Owned("u1", "a"), Owned("u1", "b"), "u1", false), OwnedObjectAction::kUpdate);
  EXPECT_EQ(DecideOwnedObjectAction(Owned("u1", "a"), Owned("u1", "b"), "u1", true), OwnedObjectAction::kReplace);
  // Only the finalizer missing: an update, even of a claim template.
  EXPECT_EQ(DecideOwnedObjectAction(Owned("u1", "a"), Owned("u1", "a", false), "u1", true),
            OwnedObjectAction::kUpdate);
}

}  // namespace
}  // namespace nvdra::computedomain::controller
