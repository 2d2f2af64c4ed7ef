// ReplaceFile: the whole file or the old one, the mode asked for, the folder
// made, and nothing left behind when the write cannot happen.

#include "common/file_io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace nvdra::common {
namespace {

namespace fs = std::filesystem;

class ReplaceFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "replace-file-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(ReplaceFileTest, WritesAndReplacesWithTheModeInAFolderItMakes) {
  const fs::path path = dir_ / "a" / "b" / "file.json";
  ASSERT_TRUE(ReplaceFile(path, "first\n", 0600, /*durable=*/true).ok());
  EXPECT_EQ(*ReadWholeFile(path), "first\n");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_TRUE(ReplaceFile(path, "second", 0644, /*durable=*/false).ok());
  EXPECT_EQ(*ReadWholeFile(path), "second");
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
}

TEST_F(ReplaceFileTest, AFailedReplaceLeavesTheOldFile) {
  const fs::path path = dir_ / "file";
  ASSERT_TRUE(ReplaceFile(path, "old", 0644, false).ok());
  // A folder where the temporary file would go: the write cannot start.
  fs::create_directories(path.string() + ".tmp");
  Status status = ReplaceFile(path, "new", 0644, false);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find(".tmp"), std::string::npos) << status.message();
  EXPECT_EQ(*ReadWholeFile(path), "old");
}

}  // namespace
}  // namespace nvdra::common
