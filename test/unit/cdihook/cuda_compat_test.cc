// The enable-cuda-compat hook on a scratch container root: the compat folder
// is listed only when its libcuda is of a newer major than the host driver,
// in a 00-compat file that sorts before update-ldcache's 00-nvcr one; every
// other case leaves the container alone; links out of the root are not
// followed to the host.

#include "cdihook/cuda_compat.h"

#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cdihook/in_root.h"
#include "cdihook/ldcache.h"
#include "cdihook/test_root.h"

namespace nvdra::cdihook {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::TestBundle;

std::vector<fs::path> ConfDFiles(const fs::path& root) {
  std::vector<fs::path> files;
  if (!fs::exists(root / "etc/ld.so.conf.d")) return files;
  for (const auto& e : fs::directory_iterator(root / "etc/ld.so.conf.d")) files.push_back(e.path());
  return files;
}

// An image with the cuda-compat package of driver `compat_version` and an
// ldcache.
void AddCompat(const fs::path& root, const std::string& compat_version) {
  TestBundle::WriteFile(root / "etc/ld.so.cache", "cache");
  const fs::path compat = root / "usr/local/cuda/compat";
  TestBundle::WriteFile(compat / ("libcuda.so." + compat_version), "elf");
  fs::create_symlink("libcuda.so." + compat_version, compat / "libcuda.so.1");
  fs::create_symlink("libcuda.so.1", compat / "libcuda.so");
}

common::StatusOr<std::optional<std::string>> RunHook(const TestBundle& b, const std::string& host_version) {
  return EnableCudaCompat({.container_root = b.rootfs(), .host_driver_version = host_version});
}

TEST(EnableCudaCompat, NewerCompatMajorIsListedBeforeTheDriverFolders) {
  TestBundle b;
  AddCompat(b.rootfs(), "570.124.06");
  auto written = RunHook(b, "550.163.01");
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_TRUE(written->has_value());
  EXPECT_THAT(**written, HasSubstr("/etc/ld.so.conf.d/00-compat-"));
  EXPECT_LT(fs::path(**written).filename().string(), std::string(kLdSoConfDPrefix))
      << "must sort before update-ldcache's file";
  EXPECT_EQ(TestBundle::ReadFile(b.rootfs() / fs::path(**written).relative_path()), "/usr/local/cuda/compat\n");
}

TEST(EnableCudaCompat, SameOrOlderMajorLeavesTheContainerAlone) {
  for (const std::string host : {"570.86.10", "575.51.03"}) {
    TestBundle b;
    AddCompat(b.rootfs(), "570.124.06");
    auto written = RunHook(b, host);
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_FALSE(written->has_value()) << host;
    EXPECT_TRUE(ConfDFiles(b.rootfs()).empty()) << host;
  }
}

TEST(EnableCudaCompat, NothingToDoWithoutCompatLibsCacheOrVersion) {
  {
    TestBundle b;  // no compat folder
    TestBundle::WriteFile(b.rootfs() / "etc/ld.so.cache", "cache");
    auto written = RunHook(b, "550.163.01");
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_FALSE(written->has_value());
  }
  {
    TestBundle b;  // no ldcache: the image does not use ldconfig's list
    AddCompat(b.rootfs(), "570.124.06");
    fs::remove(b.rootfs() / "etc/ld.so.cache");
    auto written = RunHook(b, "550.163.01");
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_FALSE(written->has_value());
  }
  {
    TestBundle b;  // no host version given
    AddCompat(b.rootfs(), "570.124.06");
    auto written = RunHook(b, "");
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_FALSE(written->has_value());
  }
  {
    TestBundle b;  // two compat libraries: which one wins is unclear
    AddCompat(b.rootfs(), "570.124.06");
    TestBundle::WriteFile(b.rootfs() / "usr/local/cuda/compat/libcuda.so.575.51.03", "elf");
    auto written = RunHook(b, "550.163.01");
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_FALSE(written->has_value());
  }
}

TEST(EnableCudaCompat, CompatFolderLinkedOutOfTheRootStaysInside) {
  TestBundle b;
  // The host has a newer compat library; the container links to its path.
  AddCompat(b.host(), "570.124.06");
  TestBundle::WriteFile(b.rootfs() / "etc/ld.so.cache", "cache");
  fs::create_directories(b.rootfs() / "usr/local");
  fs::create_symlink(b.host() / "usr/local/cuda", b.rootfs() / "usr/local/cuda");
  auto written = RunHook(b, "550.163.01");
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_FALSE(written->has_value()) << "the host's compat folder was read through the link";
}

TEST(EnableCudaCompat, BadVersionsNameTheVersion) {
  TestBundle b;
  AddCompat(b.rootfs(), "570.124.06");
  auto bad_host = RunHook(b, "r550");
  ASSERT_FALSE(bad_host.ok());
  EXPECT_THAT(bad_host.status().ToString(), HasSubstr("--host-driver-version \"r550\""));
  TestBundle c;
  AddCompat(c.rootfs(), "x70.1");
  auto bad_compat = RunHook(c, "550.163.01");
  ASSERT_FALSE(bad_compat.ok());
  EXPECT_THAT(bad_compat.status().ToString(), HasSubstr("x70.1"));
}

TEST(CompatLibcudaVersion, OnlyTheVersionedRegularFileCounts) {
  TestBundle b;
  AddCompat(b.rootfs(), "570.124.06");
  auto root = OpenRoot(b.rootfs());
  ASSERT_TRUE(root.ok());
  auto version = CompatLibcudaVersion(root->get());
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(version->value_or(""), "570.124.06");
}

}  // namespace
}  // namespace nvdra::cdihook
