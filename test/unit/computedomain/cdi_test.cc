// CdCdi without a driver: the channel and capability device nodes from a
// fake /proc tree, the claim spec file (written only for devices with edits,
// removed when none has any) and the CDI names.

#include "computedomain/cdi.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace nvdra::computedomain {
namespace {

namespace fs = std::filesystem;

void WriteFile(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class CdCdiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "cd-cdi-test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    WriteFile(dir_ / "proc/devices",
              "Character devices:\n195 nvidia\n235 nvidia-caps\n236 nvidia-caps-imex-channels\n\nBlock devices:\n");
    WriteFile(dir_ / "proc/driver/nvidia/capabilities/fabric-imex-mgmt",
              "DeviceFileMinor: 7\nDeviceFileMode: 256\nDeviceFileModify: 1\n");
  }
  void TearDown() override { fs::remove_all(dir_); }

  CdCdiOptions Options() const {
    CdCdiOptions options;
    options.cdi_root = dir_ / "cdi";
    options.proc.proc_root = dir_ / "proc";
    return options;
  }
  fs::path SpecPath(const std::string& uid) const {
    return dir_ / "cdi" / ("k8s.compute-domain.nvidia.com-claim_" + uid + ".yaml");
  }

  fs::path dir_;
};

TEST_F(CdCdiTest, ChannelNodesUseTheImexChannelsMajorAndTheIdAsMinor) {
  CdCdi cdi(Options());
  auto edits = cdi.ChannelEdits({0, 5});
  ASSERT_TRUE(edits.ok()) << edits.status().ToString();
  ASSERT_EQ(edits->device_nodes.size(), 2u);
  EXPECT_EQ(edits->device_nodes[0].path, "/dev/nvidia-caps-imex-channels/channel0");
  EXPECT_EQ(edits->device_nodes[1].path, "/dev/nvidia-caps-imex-channels/channel5");
  EXPECT_EQ(edits->device_nodes[1].type, "c");
  EXPECT_EQ(edits->device_nodes[1].major, 236);
  EXPECT_EQ(edits->device_nodes[1].minor, 5);
  EXPECT_EQ(edits->device_nodes[1].file_mode, 0666u);
}

TEST_F(CdCdiTest, NoImexChannelsDeviceIsAnErrorNamingIt) {
  WriteFile(dir_ / "proc/devices", "Character devices:\n195 nvidia\n");
  CdCdi cdi(Options());
  auto edits = cdi.ChannelEdits({0});
  ASSERT_FALSE(edits.ok());
  EXPECT_NE(edits.status().message().find("nvidia-caps-imex-channels"), std::string::npos)
      << edits.status().ToString();
}

TEST_F(CdCdiTest, ImexManagementCapabilityFromItsFile) {
  CdCdi cdi(Options());
  auto edits = cdi.ImexManagementEdits();
  ASSERT_TRUE(edits.ok()) << edits.status().ToString();
  ASSERT_EQ(edits->device_nodes.size(), 1u);
  EXPECT_EQ(edits->device_nodes[0].path, "/dev/nvidia-caps/nvidia-cap7");
  EXPECT_EQ(edits->device_nodes[0].major, 235);
  EXPECT_EQ(edits->device_nodes[0].minor, 7);
  EXPECT_EQ(edits->device_nodes[0].file_mode, 0400u);
}

TEST_F(CdCdiTest, ClaimSpecHoldsOnlyDevicesWithEditsAndGoesWhenNoneHas) {
  CdCdi cdi(Options());
  auto channel = cdi.ChannelEdits({3});
  ASSERT_TRUE(channel.ok());
  ASSERT_TRUE(cdi.WriteClaimSpec("uid-1", {{"channel-3", *channel}, {"daemon-0", {}}}).ok());
  const std::string text = ReadFile(SpecPath("uid-1"));
  ASSERT_FALSE(text.empty());
  EXPECT_NE(text.find("k8s.compute-domain.nvidia.com/claim"), std::string::npos) << text;
  EXPECT_NE(text.find("uid-1-channel-3"), std::string::npos) << text;
  EXPECT_EQ(text.find("daemon-0"), std::string::npos) << "a device without edits is in the spec:\n" << text;
  EXPECT_NE(text.find("/dev/nvidia-caps-imex-channels/channel3"), std::string::npos) << text;

  // Same claim, no edits any more (a node without a clique): no spec.
  ASSERT_TRUE(cdi.WriteClaimSpec("uid-1", {{"channel-3", {}}}).ok());
  EXPECT_FALSE(fs::exists(SpecPath("uid-1")));
  EXPECT_TRUE(cdi.RemoveClaimSpec("uid-1").ok()) << "removing a missing spec is fine";
}

TEST_F(CdCdiTest, CdiNames) {
  EXPECT_EQ(BaseSpecDeviceId(), "k8s.compute-domain.nvidia.com/device=all");
  EXPECT_EQ(CdCdi::ClaimDeviceId("abc", "channel-0"), "k8s.compute-domain.nvidia.com/claim=abc-channel-0");
}

}  // namespace
}  // namespace nvdra::computedomain
