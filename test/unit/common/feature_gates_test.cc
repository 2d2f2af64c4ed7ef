#include "common/feature_gates.h"

#include <array>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace nvdra::common {
namespace {

using ::testing::HasSubstr;

FeatureGates MustParse(std::string_view text) {
  StatusOr<FeatureGates> gates = FeatureGates::Parse(text);
  EXPECT_TRUE(gates.ok()) << gates.status();
  return gates.ok() ? *std::move(gates) : FeatureGates::Defaults();
}

Status ParseError(std::string_view text) {
  StatusOr<FeatureGates> gates = FeatureGates::Parse(text);
  EXPECT_FALSE(gates.ok()) << "parsed: " << text;
  return gates.status();
}

TEST(FeatureGatesTest, RegistryHasEveryUpstreamGateWithDefaultAndStage) {
  struct Expected {
    std::string_view name;
    bool default_value;
    Maturity maturity;
    std::string_view since;
  };
  constexpr std::array kExpected = {
      Expected{"TimeSlicingSettings", false, Maturity::kAlpha, "0.2"},
      Expected{"MPSSupport", false, Maturity::kAlpha, "0.2"},
      Expected{"IMEXDaemonsWithDNSNames", true, Maturity::kBeta, "0.2"},
      Expected{"PassthroughSupport", false, Maturity::kAlpha, "0.3"},
      Expected{"DynamicMIG", false, Maturity::kAlpha, "0.3"},
      Expected{"NVMLDeviceHealthCheck", false, Maturity::kAlpha, "0.3"},
      Expected{"ComputeDomainCliques", true, Maturity::kBeta, "0.3"},
      Expected{"CrashOnNVLinkFabricErrors", true, Maturity::kBeta, "0.3"},
      Expected{"DeviceMetadata", false, Maturity::kAlpha, "0.4"},
      Expected{"DRAListTypeAttributes", false, Maturity::kAlpha, "0.4"},
      Expected{"FabricManagerPartitioning", false, Maturity::kAlpha, "0.5"},
      Expected{"HostManagedIMEXDaemon", false, Maturity::kAlpha, "0.5"},
      Expected{"ConsumableShares", false, Maturity::kAlpha, "0.5"},
  };
  for (const Expected& expected : kExpected) {
    SCOPED_TRACE(expected.name);
    const FeatureSpec* found = nullptr;
    for (const FeatureSpec& spec : DriverFeatureSpecs()) {
      if (spec.name == expected.name) found = &spec;
    }
    ASSERT_NE(found, nullptr);
    EXPECT_EQ(found->default_value, expected.default_value);
    EXPECT_EQ(found->maturity, expected.maturity);
    EXPECT_EQ(found->since, expected.since);
    EXPECT_FALSE(found->locked_to_default);
  }
}

TEST(FeatureGatesTest, EmptyTextGivesDefaults) {
  const FeatureGates gates = MustParse("");
  EXPECT_TRUE(gates.Enabled(kIMEXDaemonsWithDNSNames));
  EXPECT_TRUE(gates.Enabled(kComputeDomainCliques));
  EXPECT_TRUE(gates.Enabled(kCrashOnNVLinkFabricErrors));
  EXPECT_TRUE(gates.Enabled(kContextualLogging));
  EXPECT_FALSE(gates.Enabled(kDynamicMIG));
  EXPECT_FALSE(gates.Enabled(kMPSSupport));
  EXPECT_EQ(gates.values(), FeatureGates::Defaults().values());
}

TEST(FeatureGatesTest, ParsesPairsWithSpacesAndGoBoolSpellings) {
  const FeatureGates gates =
      MustParse(" TimeSlicingSettings = true , MPSSupport=1,CrashOnNVLinkFabricErrors=F,,");
  EXPECT_TRUE(gates.Enabled(kTimeSlicingSettings));
  EXPECT_TRUE(gates.Enabled(kMPSSupport));
  EXPECT_FALSE(gates.Enabled(kCrashOnNVLinkFabricErrors));
}

TEST(FeatureGatesTest, LaterEntryForSameGateWins) {
  EXPECT_FALSE(MustParse("MPSSupport=true,MPSSupport=false").Enabled(kMPSSupport));
}

TEST(FeatureGatesTest, AcceptsComponentBaseLoggingGates) {
  const FeatureGates gates = MustParse("ContextualLogging=true,LoggingBetaOptions=false");
  EXPECT_FALSE(gates.Enabled(kLoggingBetaOptions));
}

TEST(FeatureGatesTest, AllAlphaSetsAlphaGatesNotNamedExplicitly) {
  // The explicit entries keep the alpha set within the dependency rules.
  const FeatureGates gates =
      MustParse("AllAlpha=true,DynamicMIG=false,NVMLDeviceHealthCheck=false");
  EXPECT_TRUE(gates.Enabled(kTimeSlicingSettings));
  EXPECT_TRUE(gates.Enabled(kMPSSupport));
  EXPECT_TRUE(gates.Enabled(kConsumableShares));
  EXPECT_TRUE(gates.Enabled(kPassthroughSupport));
  EXPECT_TRUE(gates.Enabled(kDeviceMetadata));
  EXPECT_FALSE(gates.Enabled(kDynamicMIG));
  EXPECT_FALSE(gates.Enabled(kNVMLDeviceHealthCheck));
  EXPECT_TRUE(gates.Enabled(kComputeDomainCliques));  // beta: untouched
}

TEST(FeatureGatesTest, AllBetaFalseTurnsBetaGatesOff) {
  const FeatureGates gates = MustParse("AllBeta=false");
  EXPECT_FALSE(gates.Enabled(kIMEXDaemonsWithDNSNames));
  EXPECT_FALSE(gates.Enabled(kComputeDomainCliques));
  EXPECT_FALSE(gates.Enabled(kCrashOnNVLinkFabricErrors));
}

TEST(FeatureGatesTest, UnknownGateIsRejectedListingKnownGates) {
  const Status status = ParseError("DynamicMig=true");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("unknown feature gate \"DynamicMig\""));
  EXPECT_THAT(status.message(), HasSubstr("DynamicMIG"));
  EXPECT_THAT(status.message(), HasSubstr("ConsumableShares"));
}

TEST(FeatureGatesTest, BadBoolIsRejectedNamingGateAndValue) {
  const Status status = ParseError("MPSSupport=yes");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("MPSSupport"));
  EXPECT_THAT(status.message(), HasSubstr("\"yes\""));
  EXPECT_THAT(status.message(), HasSubstr("want true or false"));
}

TEST(FeatureGatesTest, MissingValueIsRejectedShowingTheFix) {
  const Status status = ParseError("MPSSupport");
  EXPECT_THAT(status.message(), HasSubstr("MPSSupport=true or MPSSupport=false"));
}

TEST(FeatureGatesTest, ToStringIsSortedAndRoundTrips) {
  const FeatureGates gates = MustParse("MPSSupport=true");
  const std::string text = gates.ToString();
  EXPECT_THAT(text, HasSubstr("MPSSupport=true"));
  EXPECT_LT(text.find("ComputeDomainCliques="), text.find("MPSSupport="));
  EXPECT_EQ(MustParse(text).values(), gates.values());
}

// Every upstream ValidateFeatureGates rule, one test each.
TEST(FeatureGateDependenciesTest, ComputeDomainCliquesRequiresIMEXDaemonsWithDNSNames) {
  const Status status = ParseError("IMEXDaemonsWithDNSNames=false");
  EXPECT_THAT(status.message(),
              HasSubstr("feature gate ComputeDomainCliques requires feature gate "
                        "IMEXDaemonsWithDNSNames"));
  EXPECT_THAT(status.message(),
              HasSubstr("set IMEXDaemonsWithDNSNames=true or ComputeDomainCliques=false"));
  EXPECT_TRUE(FeatureGates::Parse("IMEXDaemonsWithDNSNames=false,ComputeDomainCliques=false").ok());
}

TEST(FeatureGateDependenciesTest, DynamicMIGExcludesPassthroughSupport) {
  const Status status = ParseError("DynamicMIG=true,PassthroughSupport=true");
  EXPECT_THAT(status.message(),
              HasSubstr("feature gates DynamicMIG and PassthroughSupport cannot both be enabled"));
}

TEST(FeatureGateDependenciesTest, DynamicMIGExcludesMPSSupport) {
  const Status status = ParseError("DynamicMIG=true,MPSSupport=true");
  EXPECT_THAT(status.message(),
              HasSubstr("feature gates DynamicMIG and MPSSupport cannot both be enabled"));
}

TEST(FeatureGateDependenciesTest, DynamicMIGExcludesNVMLDeviceHealthCheck) {
  const Status status = ParseError("DynamicMIG=true,NVMLDeviceHealthCheck=true");
  EXPECT_THAT(status.message(), HasSubstr("feature gates DynamicMIG and NVMLDeviceHealthCheck "
                                          "cannot both be enabled"));
}

TEST(FeatureGateDependenciesTest, PassthroughSupportExcludesNVMLDeviceHealthCheck) {
  const Status status = ParseError("PassthroughSupport=true,NVMLDeviceHealthCheck=true");
  EXPECT_THAT(status.message(), HasSubstr("feature gates PassthroughSupport and "
                                          "NVMLDeviceHealthCheck cannot both be enabled"));
}

TEST(FeatureGateDependenciesTest, DeviceMetadataRequiresPassthroughSupport) {
  const Status status = ParseError("DeviceMetadata=true");
  EXPECT_THAT(status.message(),
              HasSubstr("feature gate DeviceMetadata requires feature gate PassthroughSupport"));
  EXPECT_TRUE(FeatureGates::Parse("DeviceMetadata=true,PassthroughSupport=true").ok());
}

TEST(FeatureGateDependenciesTest, EveryUpstreamRuleIsRegistered) {
  EXPECT_EQ(DriverFeatureDependencies().size(), 6u);
}

TEST(FeatureGateDependenciesTest, WithOverridesRechecksDependencies) {
  const FeatureGates gates = FeatureGates::Defaults();
  EXPECT_FALSE(gates.WithOverrides({{"IMEXDaemonsWithDNSNames", false}}).ok());
  StatusOr<FeatureGates> host_managed =
      gates.WithOverrides({{"IMEXDaemonsWithDNSNames", false}, {"ComputeDomainCliques", false}});
  ASSERT_TRUE(host_managed.ok()) << host_managed.status();
  EXPECT_FALSE(host_managed->Enabled(kComputeDomainCliques));
  EXPECT_TRUE(gates.Enabled(kComputeDomainCliques));  // the original is immutable
}

// A registry of our own exercises locking, which no upstream gate uses today.
constexpr std::array kTestSpecs = {
    FeatureSpec{"Graduated", true, Maturity::kGA, "1.0", true, ""},
    FeatureSpec{"Fresh", false, Maturity::kAlpha, "1.1", false, ""},
};
constexpr std::array<FeatureDependency, 0> kNoDependencies = {};

TEST(FeatureGatesTest, LockedGateAcceptsOnlyItsDefault) {
  EXPECT_TRUE(FeatureGates::Parse("Graduated=true", kTestSpecs, kNoDependencies).ok());
  StatusOr<FeatureGates> gates = FeatureGates::Parse("Graduated=false", kTestSpecs, kNoDependencies);
  ASSERT_FALSE(gates.ok());
  EXPECT_THAT(gates.status().message(), HasSubstr("Graduated is locked to true"));
}

TEST(FeatureGatesTest, AllAlphaDoesNotTouchLockedGates) {
  StatusOr<FeatureGates> gates = FeatureGates::Parse("AllAlpha=true", kTestSpecs, kNoDependencies);
  ASSERT_TRUE(gates.ok()) << gates.status();
  EXPECT_TRUE(gates->Enabled("Graduated"));
  EXPECT_TRUE(gates->Enabled("Fresh"));
}

TEST(FeatureGatesDeathTest, EnabledOnUnknownNameAborts) {
  EXPECT_DEATH((void)FeatureGates::Defaults().Enabled("NoSuchGate"), "no such feature gate");
}

TEST(ParseGoBoolTest, AcceptsGoSpellingsOnly) {
  for (const char* yes : {"1", "t", "T", "true", "TRUE", "True"}) EXPECT_TRUE(*ParseGoBool(yes));
  for (const char* no : {"0", "f", "F", "false", "FALSE", "False"}) EXPECT_FALSE(*ParseGoBool(no));
  for (const char* bad : {"", "yes", "on", "tRuE"}) EXPECT_FALSE(ParseGoBool(bad).ok()) << bad;
}

}  // namespace
}  // namespace nvdra::common
