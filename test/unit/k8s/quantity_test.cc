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

TEST(Quantity, ParsesValuesRoundedUp) {
  EXPECT_EQ(*ParseQuantityValue("10Gi"), 10LL << 30);
  EXPECT_EQ(*ParseQuantityValue("512Mi"), 512LL << 20);
  EXPECT_EQ(*ParseQuantityValue("1.5G"), 1500000000);
  EXPECT_EQ(*ParseQuantityValue("1e3"), 1000);
  EXPECT_EQ(*ParseQuantityValue("5E-1"), 1);  // 0.5 rounds up
  EXPECT_EQ(*ParseQuantityValue("100m"), 1);
  EXPECT_EQ(*ParseQuantityValue("0.5Ki"), 512);
  EXPECT_EQ(*ParseQuantityValue("2E"), 2000000000000000000);
  EXPECT_EQ(*ParseQuantityValue("-1.5"), -1);
  EXPECT_EQ(*ParseQuantityValue("+7"), 7);
  EXPECT_EQ(*ParseQuantityValue("0"), 0);
}

TEST(Quantity, RefusesWhatIsNoQuantity) {
  for (const char* text : {"", "Gi", "10GB", "1..5", "abc", "1e", "10 Gi", "1e9999", "9Ei", "99999999999999999999"}) {
    auto value = ParseQuantityValue(text);
    EXPECT_FALSE(value.ok()) << text;
    if (!value.ok()) {
      EXPECT_NE(value.status().message().find("such as 10Gi"), std::string::npos) << text;
    }
  }
}

}  // namespace
}  // namespace nvdra::k8s
