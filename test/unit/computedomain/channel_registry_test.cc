// IMEX channels under channel isolation: one per domain, never two domains
// on one, freed with the domain.

#include "computedomain/controller/channel_registry.h"

#include <gtest/gtest.h>

namespace nvdra::computedomain::controller {
namespace {

TEST(ChannelRegistryTest, ARecordedChannelIsKeptAndNeedsNoWrite) {
  ChannelRegistry channels(8);
  auto reserved = channels.Reserve("u1", 5, {});
  ASSERT_TRUE(reserved);
  EXPECT_EQ(reserved->channel, 5);
  EXPECT_FALSE(reserved->needs_write);
}

TEST(ChannelRegistryTest, ANewDomainGetsTheLowestChannelNobodyHolds) {
  ChannelRegistry channels(8);
  channels.Record("u1", 1);
  auto reserved = channels.Reserve("u2", std::nullopt, {2});
  ASSERT_TRUE(reserved);
  EXPECT_EQ(reserved->channel, 3);
  EXPECT_TRUE(reserved->needs_write);
  // Until its status shows it, the same reservation (written again).
  auto again = channels.Reserve("u2", std::nullopt, {});
  ASSERT_TRUE(again);
  EXPECT_EQ(again->channel, 3);
  EXPECT_TRUE(again->needs_write);
}

TEST(ChannelRegistryTest, NoneWhenAllAreTakenAndFreedWithTheDomain) {
  ChannelRegistry channels(2);  // only channel 1 is handed out
  ASSERT_TRUE(channels.Reserve("u1", std::nullopt, {}));
  EXPECT_FALSE(channels.Reserve("u2", std::nullopt, {}));
  channels.Forget("u1");
  auto reserved = channels.Reserve("u2", std::nullopt, {});
  ASSERT_TRUE(reserved);
  EXPECT_EQ(reserved->channel, 1);
}

}  // namespace
}  // namespace nvdra::computedomain::controller
