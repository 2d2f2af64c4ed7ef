#include "cdihook/ldcache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cdihook/in_root.h"
#include "cdihook/test_root.h"

namespace nvdra::cdihook {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;
using testing::TestBundle;

std::vector<fs::path> ConfDFiles(const fs::path& root) {
  std::vector<fs::path> files;
  if (!fs::exists(root / "etc/ld.so.conf.d")) return files;
  for (const auto& e : fs::directory_iterator(root / "etc/ld.so.conf.d")) {
    if (e.path().filename().string().starts_with(kLdSoConfDPrefix)) files.push_back(e.path());
  }
  return files;
}

TEST(WriteLdSoConfFile, WritesFoldersOnceEachWorldReadable) {
  TestBundle b;
  ::umask(077);  // the file's mode must not depend on the umask
  auto root = OpenRoot(b.rootfs());
  ASSERT_TRUE(root.ok());
  const std::vector<std::string> folders = {"/usr/lib64", "/opt/nv", "/usr/lib64"};
  auto written = WriteLdSoConfFile(root->get(), folders);
  ::umask(022);
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_TRUE(written->has_value());
  EXPECT_THAT(**written, HasSubstr("/etc/ld.so.conf.d/00-nvcr-"));
  const fs::path host_path = b.rootfs() / fs::path(**written).relative_path();
  EXPECT_EQ(TestBundle::ReadFile(host_path), "/usr/lib64\n/opt/nv\n");
  struct stat st {};
  ASSERT_EQ(::stat(host_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST(WriteLdSoConfFile, NoFoldersWritesNothing) {
  TestBundle b;
  auto root = OpenRoot(b.rootfs());
  ASSERT_TRUE(root.ok());
  auto written = WriteLdSoConfFile(root->get(), {});
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_FALSE(written->has_value());
  EXPECT_TRUE(ConfDFiles(b.rootfs()).empty());
}

TEST(ConfiguredLibraryFolders, FollowsIncludesInsideTheRoot) {
  TestBundle b;
  TestBundle::WriteFile(b.rootfs() / "etc/ld.so.conf",
                        "# comment\ninclude /etc/ld.so.conf.d/*.conf\n/usr/local/lib/  # trailing\n"
                        "include extra.conf\n");
  TestBundle::WriteFile(b.rootfs() / "etc/ld.so.conf.d/a.conf", "/opt/a\n");
  TestBundle::WriteFile(b.rootfs() / "etc/ld.so.conf.d/b.notconf", "/opt/ignored\n");
  TestBundle::WriteFile(b.rootfs() / "etc/extra.conf", "/opt/extra\n");
  auto root = OpenRoot(b.rootfs());
  ASSERT_TRUE(root.ok());
  auto folders = ConfiguredLibraryFolders(root->get(), /*debian_like=*/false);
  ASSERT_TRUE(folders.ok()) << folders.status();
  EXPECT_THAT(*folders, IsSupersetOf({"/lib64", "/usr/lib64", "/usr/local/lib", "/opt/a",
                                      "/opt/extra"}));
  EXPECT_FALSE(folders->contains("/opt/ignored"));
}

TEST(ConfiguredLibraryFolders, MissingLdSoConfMeansSystemFoldersOnly) {
  TestBundle b;
  auto root = OpenRoot(b.rootfs());
  ASSERT_TRUE(root.ok());
  auto folders = ConfiguredLibraryFolders(root->get(), /*debian_like=*/true);
  ASSERT_TRUE(folders.ok()) << folders.status();
  EXPECT_TRUE(folders->contains("/usr/lib"));
  EXPECT_FALSE(folders->contains("/usr/lib64"));
}

TEST(UpdateLdcache, MissingLdconfigIsNotFoundAndChangesNothing) {
  TestBundle b;
  LdcacheOptions options;
  options.container_root = b.rootfs();
  options.folders = {"/opt/nv/lib"};
  options.ldconfig_path = b.dir() / "no-such-ldconfig";
  const common::Status status = UpdateLdcache(options);
  EXPECT_EQ(status.code(), common::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("--ldconfig-path"));
  EXPECT_TRUE(ConfDFiles(b.rootfs()).empty());
}

TEST(UpdateLdcache, FailingLdconfigIsAnError) {
  TestBundle b;
  LdcacheOptions options;
  options.container_root = b.rootfs();
  options.ldconfig_path = "/bin/false";
  EXPECT_EQ(UpdateLdcache(options).code(), common::StatusCode::kInternal);
}

// Only runs where ldconfig can chroot (as root), as the hook does.
TEST(UpdateLdcache, RealLdconfigCachesTheNewFolderOnly) {
  if (::access("/sbin/ldconfig", X_OK) != 0 || ::geteuid() != 0) {
    GTEST_SKIP() << "needs /sbin/ldconfig and root";
  }
  TestBundle b;
  TestBundle::WriteFile(b.rootfs() / "etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n");
  TestBundle::WriteFile(b.rootfs() / "etc/ld.so.conf.d/image.conf", "/opt/image\n");
  // Any real shared object will do: take the C library this test runs with.
  fs::path libc;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const auto slash = line.find('/');
    if (slash != std::string::npos && line.find("libc.so.6") != std::string::npos) {
      libc = line.substr(slash);
      break;
    }
  }
  ASSERT_FALSE(libc.empty());
  fs::create_directories(b.rootfs() / "opt/nv/lib");
  fs::copy_file(libc, b.rootfs() / "opt/nv/lib/libc.so.6");

  LdcacheOptions options;
  options.container_root = b.rootfs();
  options.folders = {"/opt/image", "/opt/nv/lib"};
  const common::Status status = UpdateLdcache(options);
  ASSERT_TRUE(status.ok()) << status;
  const std::vector<fs::path> files = ConfDFiles(b.rootfs());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(TestBundle::ReadFile(files.front()), "/opt/nv/lib\n");
  EXPECT_THAT(TestBundle::ReadFile(b.rootfs() / "etc/ld.so.cache"), HasSubstr("/opt/nv/lib/libc.so.6"));
}

}  // namespace
}  // namespace nvdra::cdihook
