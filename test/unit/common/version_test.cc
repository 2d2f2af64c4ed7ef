#include "common/version.h"

#include <gtest/gtest.h>

namespace nvdra::common {
namespace {

TEST(VersionTest, VersionIsProjectVersion) { EXPECT_EQ(Version(), NVDRA_EXPECTED_VERSION); }

TEST(VersionTest, CommitAndDateAreNeverEmpty) {
  EXPECT_FALSE(GitCommit().empty());
  EXPECT_FALSE(BuildDate().empty());
}

TEST(VersionTest, VersionTextNamesBinaryVersionCommitAndDate) {
  const std::string text = VersionText("webhook");
  EXPECT_EQ(text.rfind(std::string("webhook version ") + NVDRA_EXPECTED_VERSION + "\n", 0), 0u) << text;
  EXPECT_NE(text.find("commit: " + std::string(GitCommit())), std::string::npos);
  EXPECT_NE(text.find("build date: " + std::string(BuildDate())), std::string::npos);
}

}  // namespace
}  // namespace nvdra::common
