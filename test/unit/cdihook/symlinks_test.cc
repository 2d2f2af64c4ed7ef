#include "cdihook/symlinks.h"

#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cdihook/in_root.h"
#include "cdihook/test_root.h"

namespace nvdra::cdihook {
namespace {

namespace fs = std::filesystem;
using testing::TestBundle;

TEST(ParseSymlinkSpec, SplitsTargetAndLink) {
  auto spec = ParseSymlinkSpec("libcuda.so.1::/usr/lib64/libcuda.so");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->target, "libcuda.so.1");
  EXPECT_EQ(spec->link, "/usr/lib64/libcuda.so");
}

TEST(ParseSymlinkSpec, RejectsMalformedSpecs) {
  for (const char* bad : {"no-separator", "a::b::c", "::/link", "target::", ""}) {
    auto spec = ParseSymlinkSpec(bad);
    ASSERT_FALSE(spec.ok()) << bad;
    EXPECT_EQ(spec.status().code(), common::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(CreateSymlinks, CreatesLinksAndMissingParents) {
  TestBundle b;
  const std::vector<std::string> specs = {"libcuda.so.1::/usr/lib64/libcuda.so",
                                          "/usr/bin/nvidia-smi::/opt/bin/smi"};
  ASSERT_TRUE(CreateSymlinks(b.rootfs(), specs).ok());
  EXPECT_EQ(fs::read_symlink(b.rootfs() / "usr/lib64/libcuda.so"), "libcuda.so.1");
  EXPECT_EQ(fs::read_symlink(b.rootfs() / "opt/bin/smi"), "/usr/bin/nvidia-smi");
}

TEST(CreateSymlinkInRoot, SecondRunLeavesTheLinkAlone) {
  TestBundle b;
  auto root = OpenRoot(b.rootfs());
  ASSERT_TRUE(root.ok());
  const SymlinkSpec spec{"libcuda.so.1", "/usr/lib/libcuda.so"};
  auto first = CreateSymlinkInRoot(root->get(), spec);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, LinkOutcome::kCreated);
  auto second = CreateSymlinkInRoot(root->get(), spec);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*second, LinkOutcome::kAlreadyPresent);
  EXPECT_EQ(fs::read_symlink(b.rootfs() / "usr/lib/libcuda.so"), "libcuda.so.1");
}

TEST(CreateSymlinkInRoot, ReplacesAFileAWrongLinkAndAnEmptyFolder) {
  TestBundle b;
  TestBundle::WriteFile(b.rootfs() / "lib/a", "image file");
  fs::create_directory_symlink("elsewhere", b.rootfs() / "lib/b");
  fs::create_directories(b.rootfs() / "lib/c");
  auto root = OpenRoot(b.rootfs());
  ASSERT_TRUE(root.ok());
  for (const char* name : {"a", "b", "c"}) {
    auto outcome = CreateSymlinkInRoot(root->get(), {"t", std::string("/lib/") + name});
    ASSERT_TRUE(outcome.ok()) << name << ": " << outcome.status();
    EXPECT_EQ(*outcome, LinkOutcome::kReplaced) << name;
    EXPECT_EQ(fs::read_symlink(b.rootfs() / "lib" / name), "t") << name;
  }
}

TEST(CreateSymlinkInRoot, NonEmptyFolderInTheWayIsAnErrorAndKept) {
  TestBundle b;
  TestBundle::WriteFile(b.rootfs() / "lib/dir/file", "x");
  auto root = OpenRoot(b.rootfs());
  ASSERT_TRUE(root.ok());
  auto outcome = CreateSymlinkInRoot(root->get(), {"t", "/lib/dir"});
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.status().code(), common::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::exists(b.rootfs() / "lib/dir/file"));
}

TEST(CreateSymlinkInRoot, DotDotInTheLinkStopsAtTheRoot) {
  TestBundle b;
  auto root = OpenRoot(b.rootfs());
  ASSERT_TRUE(root.ok());
  auto outcome = CreateSymlinkInRoot(root->get(), {"t", "/../../../host/escaped"});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_TRUE(fs::is_symlink(b.rootfs() / "host/escaped"));
  EXPECT_TRUE(fs::is_empty(b.host()));
}

TEST(CreateSymlinkInRoot, AbsoluteSymlinkInTheImageResolvesInTheRoot) {
  TestBundle b;
  // An image folder that is a symlink to a host-looking absolute path.
  fs::create_directories(b.rootfs() / "usr");
  fs::create_directory_symlink(b.host(), b.rootfs() / "usr/lib64");
  auto root = OpenRoot(b.rootfs());
  ASSERT_TRUE(root.ok());
  auto outcome = CreateSymlinkInRoot(root->get(), {"t", "/usr/lib64/libcuda.so"});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_TRUE(fs::is_empty(b.host()));
  // The same absolute path, taken inside the root.
  EXPECT_TRUE(fs::is_symlink(b.rootfs() / b.host().relative_path() / "libcuda.so"));
}

TEST(CreateSymlinkInRoot, RelativeSymlinkClimbingOutStaysInTheRoot) {
  TestBundle b;
  fs::create_directories(b.rootfs() / "a");
  fs::create_directory_symlink("../../../../../../host", b.rootfs() / "a/up");
  auto root = OpenRoot(b.rootfs());
  ASSERT_TRUE(root.ok());
  auto outcome = CreateSymlinkInRoot(root->get(), {"t", "/a/up/x"});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_TRUE(fs::is_empty(b.host()));
  EXPECT_TRUE(fs::is_symlink(b.rootfs() / "host/x"));
}

TEST(CreateSymlinkInRoot, LinkPathThatIsASymlinkToTheHostIsReplacedNotFollowed) {
  TestBundle b;
  TestBundle::WriteFile(b.host() / "precious", "keep");
  fs::create_symlink(b.host() / "precious", b.rootfs() / "lnk");
  auto root = OpenRoot(b.rootfs());
  ASSERT_TRUE(root.ok());
  auto outcome = CreateSymlinkInRoot(root->get(), {"t", "/lnk"});
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(fs::read_symlink(b.rootfs() / "lnk"), "t");
  EXPECT_EQ(TestBundle::ReadFile(b.host() / "precious"), "keep");
}

TEST(CreateSymlinkInRoot, SymlinkLoopIsAnError) {
  TestBundle b;
  fs::create_directory_symlink("/loop", b.rootfs() / "loop");
  auto root = OpenRoot(b.rootfs());
  ASSERT_TRUE(root.ok());
  auto outcome = CreateSymlinkInRoot(root->get(), {"t", "/loop/x"});
  ASSERT_FALSE(outcome.ok());
  EXPECT_EQ(outcome.status().code(), common::StatusCode::kInvalidArgument);
}

TEST(CreateSymlinks, BadSpecChangesNothing) {
  TestBundle b;
  const std::vector<std::string> specs = {"t::/first", "broken"};
  auto status = CreateSymlinks(b.rootfs(), specs);
  EXPECT_EQ(status.code(), common::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(fs::symlink_status(b.rootfs() / "first")));
}

}  // namespace
}  // namespace nvdra::cdihook
