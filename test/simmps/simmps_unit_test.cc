// The simulated MPS control's command language and formats, in process.

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "control_wire.h"
#include "mps_settings.h"

namespace nvdra::simmps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Optional;

TEST(SimMpsSettings, ThreadPercentageDefaultsTo100AndEchoesWhatIsSet) {
  MpsSettings settings(false);
  EXPECT_THAT(settings.Execute("get_default_active_thread_percentage").reply,
              ElementsAre("100.0"));
  const CommandResult set = settings.Execute("set_default_active_thread_percentage 50");
  EXPECT_THAT(set.reply, ElementsAre("50.0"));  // as real logs show the reply
  EXPECT_TRUE(set.changed);
  EXPECT_THAT(settings.Execute("  get_default_active_thread_percentage \r").reply,
              ElementsAre("50.0"));
  EXPECT_THAT(settings.Execute("set_default_active_thread_percentage 12.5").reply,
              ElementsAre("12.5"));
}

TEST(SimMpsSettings, ThreadPercentageRefusesWhatIsNotAPercentage) {
  MpsSettings settings(false);
  for (const char* bad : {"set_default_active_thread_percentage",
                          "set_default_active_thread_percentage 101",
                          "set_default_active_thread_percentage -1",
                          "set_default_active_thread_percentage 50%",
                          "set_default_active_thread_percentage 1e2",
                          "set_default_active_thread_percentage 5 0"}) {
    const CommandResult result = settings.Execute(bad);
    ASSERT_EQ(result.reply.size(), 1U) << bad;
    EXPECT_THAT(result.reply[0], HasSubstr("set_default_active_thread_percentage <percentage>"))
        << bad;
    EXPECT_FALSE(result.changed) << bad;
  }
  EXPECT_THAT(settings.Execute("get_default_active_thread_percentage").reply,
              ElementsAre("100.0"));
}

TEST(SimMpsSettings, PinnedMemLimitIsKeptPerDeviceAsGiven) {
  MpsSettings settings(false);
  const std::string uuid = "GPU-a4f87852-c040-2818-e88b-bf8725dc5f6c";
  EXPECT_THAT(settings.Execute("get_default_device_pinned_mem_limit " + uuid).reply,
              ElementsAre("0"));
  const CommandResult set = settings.Execute("set_default_device_pinned_mem_limit " + uuid +
                                             " 10240M");
  EXPECT_THAT(set.reply, IsEmpty());  // the real daemon answers nothing to a set
  EXPECT_TRUE(set.changed);
  EXPECT_THAT(settings.Execute("get_default_device_pinned_mem_limit " + uuid).reply,
              ElementsAre("10240M"));
  EXPECT_THAT(settings.Execute("set_default_device_pinned_mem_limit " + uuid + " 2G").reply,
              IsEmpty());
  EXPECT_THAT(settings.Execute("get_default_device_pinned_mem_limit " + uuid).reply,
              ElementsAre("2048M"));
  EXPECT_THAT(settings.Execute("set_default_device_pinned_mem_limit 0 4000M").reply, IsEmpty());
  EXPECT_THAT(settings.Execute("get_default_device_pinned_mem_limit 0").reply,
              ElementsAre("4000M"));
  EXPECT_THAT(settings.Execute("get_default_device_pinned_mem_limit 00").reply,
              ElementsAre("4000M"));
  // No device list in the simulation: index 1 is not the UUID's GPU.
  EXPECT_THAT(settings.Execute("get_default_device_pinned_mem_limit 1").reply, ElementsAre("0"));

  const nlohmann::json state = settings.ToStateJson();
  EXPECT_EQ(state, nlohmann::json::parse(R"({"multiUser": false,
      "defaultActiveThreadPercentage": null,
      "defaultDevicePinnedMemLimits": {"GPU-a4f87852-c040-2818-e88b-bf8725dc5f6c": "2048M",
                                       "0": "4000M"}})"));
}

TEST(SimMpsSettings, PinnedMemLimitRefusesBadDevicesAndValues) {
  MpsSettings settings(false);
  for (const char* bad : {"set_default_device_pinned_mem_limit 0",
                          "set_default_device_pinned_mem_limit 0 10",
                          "set_default_device_pinned_mem_limit 0 10MB",
                          "set_default_device_pinned_mem_limit 0 10Gi",
                          "set_default_device_pinned_mem_limit 0 -1G",
                          "set_default_device_pinned_mem_limit gpu0 1G",
                          "set_default_device_pinned_mem_limit GPU- 1G"}) {
    const CommandResult result = settings.Execute(bad);
    ASSERT_EQ(result.reply.size(), 1U) << bad;
    EXPECT_THAT(result.reply[0], HasSubstr("Usage: set_default_device_pinned_mem_limit <device"))
        << bad;
    EXPECT_FALSE(result.changed) << bad;
  }
  const CommandResult get = settings.Execute("get_default_device_pinned_mem_limit");
  ASSERT_EQ(get.reply.size(), 1U);
  EXPECT_THAT(get.reply[0], HasSubstr("get_default_device_pinned_mem_limit <device"));
}

TEST(SimMpsSettings, ServerListQuitAndUnknownCommands) {
  MpsSettings settings(true);
  EXPECT_THAT(settings.Execute("get_server_list").reply, IsEmpty());
  const CommandResult unknown = settings.Execute("frobnicate 3");
  ASSERT_EQ(unknown.reply.size(), 1U);
  EXPECT_THAT(unknown.reply[0], HasSubstr("frobnicate"));
  const CommandResult server = settings.Execute("get_client_list 42");
  ASSERT_EQ(server.reply.size(), 1U);
  EXPECT_THAT(server.reply[0], HasSubstr("get_client_list"));
  EXPECT_FALSE(settings.Execute("quit now").quit);
  const CommandResult quit = settings.Execute("quit");
  EXPECT_TRUE(quit.quit);
  EXPECT_THAT(quit.reply, IsEmpty());
  EXPECT_EQ(settings.ToStateJson()["multiUser"], true);
}

TEST(SimMpsFormats, ParsersAndFormatter) {
  EXPECT_THAT(ParseThreadPercentage("0"), Optional(0.0));
  EXPECT_THAT(ParseThreadPercentage("100"), Optional(100.0));
  EXPECT_EQ(ParseThreadPercentage("."), std::nullopt);
  EXPECT_EQ(ParseThreadPercentage("50."), std::nullopt);
  EXPECT_EQ(ParseThreadPercentage(""), std::nullopt);
  EXPECT_THAT(ParsePinnedMemLimitMiB("10G"), Optional(10240U));
  EXPECT_THAT(ParsePinnedMemLimitMiB("0M"), Optional(0U));
  EXPECT_EQ(ParsePinnedMemLimitMiB("10g"), std::nullopt);
  EXPECT_EQ(ParsePinnedMemLimitMiB("G"), std::nullopt);
  EXPECT_EQ(ParsePinnedMemLimitMiB("99999999999999G"), std::nullopt);
  EXPECT_EQ(FormatPinnedMemLimit(0), "0");
  EXPECT_EQ(FormatPinnedMemLimit(1024), "1024M");
  EXPECT_EQ(FormatPinnedMemLimit(1500), "1500M");
  EXPECT_THAT(ParseDevice("MIG-0e4d2f6a-1234"), Optional(std::string("MIG-0e4d2f6a-1234")));
  EXPECT_THAT(ParseDevice("007"), Optional(std::string("7")));
  EXPECT_EQ(ParseDevice("-1"), std::nullopt);
}

TEST(SimMpsWire, RepliesAreCountedLines) {
  EXPECT_EQ(EncodeReply({}), "0\n");
  EXPECT_EQ(EncodeReply({"50.0"}), "1\n50.0\n");
  EXPECT_EQ(EncodeReply({"a", ""}), "2\na\n\n");
}

}  // namespace
}  // namespace nvdra::simmps
