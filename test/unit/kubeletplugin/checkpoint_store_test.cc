#include "kubeletplugin/checkpoint_store.h"

#include <sys/stat.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "kubeletplugin/boot_id.h"

namespace nvdra::kubeletplugin {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const fs::path kDataDir = fs::path(NVDRA_TEST_DATA_DIR) / "checkpoint";
constexpr const char* kFixtureBootId = "8a3f1c52-6a1e-4c1b-9a52-0d1f3c7e9b21";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteFile(const fs::path& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
}

class CheckpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("nvdra-ckpt-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Every entry in the directory: no temporary file may be left behind.
  std::vector<std::string> Entries(const fs::path& dir) const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
    return names;
  }

  fs::path dir_;
};

TEST_F(CheckpointStoreTest, MissingFileLoadsAsEmpty) {
  CheckpointStore store(dir_ / "checkpoint.json");
  auto cp = store.Load();
  ASSERT_TRUE(cp.ok()) << cp.status();
  EXPECT_EQ(*cp, Checkpoint{});
}

TEST_F(CheckpointStoreTest, StoreWritesTheEncodingAtomicallyAndLeavesNoTempFile) {
  const fs::path nested = dir_ / "plugins" / "gpu.nvidia.com";
  CheckpointStore store(nested / "checkpoint.json");
  Checkpoint cp;
  cp.node_boot_id = "boot";
  cp.claims["uid"].state = ClaimCheckpointState::kPrepareCompleted;
  cp.claims["uid"].status = nlohmann::ordered_json::object();
  ASSERT_TRUE(store.Store(cp).ok());
  EXPECT_EQ(ReadFile(store.path()), EncodeCheckpoint(cp));
  EXPECT_THAT(Entries(nested), ::testing::ElementsAre("checkpoint.json"));
  struct stat st {};
  ASSERT_EQ(::stat(store.path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);  // as Go's os.CreateTemp leaves it

  cp.claims.erase("uid");
  ASSERT_TRUE(store.Store(cp).ok());
  auto loaded = store.Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, cp);
  EXPECT_THAT(Entries(nested), ::testing::ElementsAre("checkpoint.json"));
}

TEST_F(CheckpointStoreTest, StoreFailureKeepsTheOldFileAndRemovesTheTempFile) {
  // The target is a directory: rename fails after the temp file was written.
  const fs::path target = dir_ / "checkpoint.json";
  fs::create_directories(target / "occupied");
  const common::Status status = CheckpointStore(target).Store(Checkpoint{});
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("rename"));
  EXPECT_THAT(Entries(dir_), ::testing::ElementsAre("checkpoint.json"));
}

TEST_F(CheckpointStoreTest, CorruptedFileIsDataLossNamingThePath) {
  const fs::path path = dir_ / "checkpoint.json";
  fs::copy_file(kDataDir / "corrupted-content.json", path);
  auto cp = CheckpointStore(path).Load();
  ASSERT_FALSE(cp.ok());
  EXPECT_EQ(cp.status().code(), common::StatusCode::kDataLoss);
  EXPECT_THAT(cp.status().message(), HasSubstr(path.string()));
  EXPECT_THAT(cp.status().message(), HasSubstr("checksum mismatch"));
}

TEST_F(CheckpointStoreTest, LoadForBootWithoutFileCreatesAnEmptyCheckpoint) {
  const fs::path path = dir_ / "checkpoint.json";
  auto cp = LoadForBoot(path, kFixtureBootId);
  ASSERT_TRUE(cp.ok()) << cp.status();
  EXPECT_TRUE(cp->claims.empty());
  EXPECT_EQ(ReadFile(path), ReadFile(kDataDir / "gpu-v2-empty.json"));
}

TEST_F(CheckpointStoreTest, LoadForBootInjectsTheIdIntoALegacyFileAndKeepsClaims) {
  const fs::path path = dir_ / "checkpoint.json";
  fs::copy_file(kDataDir / "gpu-v2-no-boot-id.json", path);
  auto cp = LoadForBoot(path, "boot-now");
  ASSERT_TRUE(cp.ok()) << cp.status();
  EXPECT_EQ(cp->node_boot_id, "boot-now");
  EXPECT_EQ(cp->claims.size(), 1u);
  auto reread = CheckpointStore(path).Load();
  ASSERT_TRUE(reread.ok());
  EXPECT_EQ(*reread, *cp);
}

TEST_F(CheckpointStoreTest, LoadForBootWithTheSameIdKeepsTheFileUntouched) {
  const fs::path path = dir_ / "checkpoint.json";
  fs::copy_file(kDataDir / "gpu-v2-completed.json", path);
  const auto before = fs::last_write_time(path);
  auto cp = LoadForBoot(path, kFixtureBootId);
  ASSERT_TRUE(cp.ok()) << cp.status();
  EXPECT_EQ(cp->claims.size(), 3u);
  EXPECT_EQ(ReadFile(path), ReadFile(kDataDir / "gpu-v2-completed.json"));
  EXPECT_EQ(fs::last_write_time(path), before);
}

TEST_F(CheckpointStoreTest, LoadForBootAfterARebootDiscardsClaims) {
  const fs::path path = dir_ / "checkpoint.json";
  Checkpoint old;
  old.node_boot_id = "boot-before";
  old.claims["uid"].state = ClaimCheckpointState::kPrepareCompleted;
  ASSERT_TRUE(CheckpointStore(path).Store(old).ok());
  auto cp = LoadForBoot(path, kFixtureBootId);
  ASSERT_TRUE(cp.ok()) << cp.status();
  EXPECT_TRUE(cp->claims.empty());
  EXPECT_EQ(cp->node_boot_id, kFixtureBootId);
  // The same bytes the Go driver writes for its fresh checkpoint.
  EXPECT_EQ(ReadFile(path), ReadFile(kDataDir / "gpu-v2-empty.json"));
}

TEST_F(CheckpointStoreTest, LoadForBootFailsOnACorruptedFileAndLeavesIt) {
  const fs::path path = dir_ / "checkpoint.json";
  fs::copy_file(kDataDir / "corrupted-content.json", path);
  auto cp = LoadForBoot(path, kFixtureBootId);
  EXPECT_EQ(cp.status().code(), common::StatusCode::kDataLoss);
  EXPECT_EQ(ReadFile(path), ReadFile(kDataDir / "corrupted-content.json"));
}

TEST_F(CheckpointStoreTest, BootIdIsTrimmed) {
  const fs::path path = dir_ / "boot_id";
  WriteFile(path, "  1c7a-42\n");
  auto id = ReadBootId(path);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "1c7a-42");
  WriteFile(path, " \n");
  EXPECT_EQ(ReadBootId(path).status().code(), common::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadBootId(dir_ / "missing").status().code(), common::StatusCode::kNotFound);
}

TEST(BootIdTest, ReadsTheKernelsBootIdWhenPresent) {
  if (!fs::exists(kBootIdPath)) GTEST_SKIP() << kBootIdPath << " absent";
  auto id = ReadBootId();
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->size(), 36u);  // a UUID
}

}  // namespace
}  // namespace nvdra::kubeletplugin
