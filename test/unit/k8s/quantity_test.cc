#include "k8s/quantity.h"

#include <gtest/gtest.h>

namespace nvdra::k8s {
namespace {

TEST(Quantity, BinarySIPicksLargestExactSuffix) {
  EXPECT_EQ(FormatBinarySI(85520809984), "81559Mi");  // a real H100's memory
  EXPECT_EQ(FormatBinarySI(1024), "1Ki");
  EXPECT_EQ(FormatBinarySI(1LL << 30), "1Gi");
  EXPECT_EQ(FormatBinarySI(1536), "1536");
  EXPECT_EQ(FormatBinarySI(9984LL * 1024 * 1024), "9984Mi");
}

TEST(Quantity, BinarySIBelow1024UsesDecimalForm) {
  EXPECT_EQ(FormatBinarySI(0), "0");
  EXPECT_EQ(FormatBinarySI(1), "1");
  EXPECT_EQ(FormatBinarySI(132), "132");
  EXPECT_EQ(FormatBinarySI(1000), "1k");
  EXPECT_EQ(FormatBinarySI(-5), "-5");
}

TEST(Quantity, DecimalSI) {
  EXPECT_EQ(FormatDecimalSI(5000000), "5M");
  EXPECT_EQ(FormatDecimalSI(1500), "1500");
  EXPECT_EQ(FormatDecimalSI(-2000), "-2k");
}

}  // namespace
}  // namespace nvdra::k8s
