#include "cdihook/container_state.h"

#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cdihook/test_root.h"

namespace nvdra::cdihook {
namespace {

using ::testing::HasSubstr;
using testing::TestBundle;

TEST(ContainerRootFromState, RelativeRootPathIsJoinedToBundle) {
  TestBundle b;
  std::istringstream state(b.State());
  auto root = ContainerRootFromState(state);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(*root, b.rootfs());
}

TEST(ContainerRootFromState, AbsoluteRootPathIsKept) {
  TestBundle b;
  TestBundle::WriteFile(b.bundle() / "config.json",
                        R"({"root":{"path":")" + b.host().string() + R"("}})");
  std::istringstream state(b.State());
  auto root = ContainerRootFromState(state);
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(*root, b.host());
}

TEST(ContainerRootFromState, HostRootIsRefused) {
  TestBundle b;
  for (const char* path : {"/", "//", "/."}) {
    TestBundle::WriteFile(b.bundle() / "config.json",
                          std::string(R"({"root":{"path":")") + path + R"("}})");
    std::istringstream state(b.State());
    auto root = ContainerRootFromState(state);
    ASSERT_FALSE(root.ok()) << path;
    EXPECT_EQ(root.status().code(), common::StatusCode::kFailedPrecondition) << path;
  }
}

TEST(ContainerRootFromState, StateThatIsNotJsonIsAClearError) {
  std::istringstream state("not json");
  auto root = ContainerRootFromState(state);
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_THAT(root.status().message(), HasSubstr("container state: not valid JSON"));
}

TEST(ContainerRootFromState, StateWithoutBundleNamesTheField) {
  std::istringstream state(R"({"id":"c1"})");
  auto root = ContainerRootFromState(state);
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_THAT(root.status().message(), HasSubstr("bundle"));
}

TEST(ContainerRootFromState, MissingConfigIsNotFound) {
  TestBundle b;
  std::filesystem::remove(b.bundle() / "config.json");
  std::istringstream state(b.State());
  auto root = ContainerRootFromState(state);
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().code(), common::StatusCode::kNotFound);
  EXPECT_THAT(root.status().message(), HasSubstr("config.json"));
}

TEST(ContainerRootFromState, ConfigWithoutRootPathNamesTheField) {
  TestBundle b;
  TestBundle::WriteFile(b.bundle() / "config.json", R"({"root":{}})");
  std::istringstream state(b.State());
  auto root = ContainerRootFromState(state);
  ASSERT_FALSE(root.ok());
  EXPECT_THAT(root.status().message(), HasSubstr("root.path"));
}

TEST(LoadContainerRoot, ReadsStateFromAFile) {
  TestBundle b;
  TestBundle::WriteFile(b.dir() / "state.json", b.State());
  auto root = LoadContainerRoot((b.dir() / "state.json").string());
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(*root, b.rootfs());
}

}  // namespace
}  // namespace nvdra::cdihook
