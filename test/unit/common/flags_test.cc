#include "common/flags.h"

#include <cstdlib>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "env_for_test.h"

namespace nvdra::common {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

using nvdra::testing::ScopedEnv;

std::optional<int> Parse(CLI::App& app, const std::vector<std::string>& args) {
  return nvdra::testing::ParseArgs(app, args);
}

// A fresh app with the common and kube-client flags, for each case. The env
// is read when flags are added, so set ScopedEnvs before constructing it.
struct CommonApp {
  CommonApp() {
    AddCommonFlags(app, common, "test-binary");
    AddKubeClientFlags(app, kube);
  }
  CLI::App app{"test", "test-binary"};
  CommonFlags common;
  KubeClientFlags kube;
};

TEST(CommonFlagsTest, DefaultsApplyWithoutFlagsOrEnv) {
  ScopedEnv v("V", nullptr), format("LOGGING_FORMAT", nullptr), gates("FEATURE_GATES", nullptr),
      kubeconfig("KUBECONFIG", nullptr), qps("KUBE_API_QPS", nullptr);
  CommonApp c;
  EXPECT_EQ(Parse(c.app, {}), std::nullopt);
  EXPECT_EQ(c.common.verbosity, 2);
  EXPECT_EQ(c.common.logging_format, "text");
  EXPECT_EQ(c.common.feature_gates, "");
  EXPECT_EQ(c.kube.kubeconfig, "");
  EXPECT_EQ(c.kube.qps, 5);
  EXPECT_EQ(c.kube.burst, 10);
}

TEST(CommonFlagsTest, EnvironmentFillsFlagsNotGiven) {
  ScopedEnv v("V", "5"), format("LOGGING_FORMAT", "json"),
      gates("FEATURE_GATES", "MPSSupport=true"), kubeconfig("KUBECONFIG", "/k/config"),
      qps("KUBE_API_QPS", "20.5"), burst("KUBE_API_BURST", "40");
  CommonApp c;
  EXPECT_EQ(Parse(c.app, {}), std::nullopt);
  EXPECT_EQ(c.common.verbosity, 5);
  EXPECT_EQ(c.common.logging_format, "json");
  EXPECT_EQ(c.common.feature_gates, "MPSSupport=true");
  EXPECT_EQ(c.kube.kubeconfig, "/k/config");
  EXPECT_EQ(c.kube.qps, 20.5);
  EXPECT_EQ(c.kube.burst, 40);
}

TEST(CommonFlagsTest, FlagBeatsEnvironment) {
  ScopedEnv v("V", "5"), gates("FEATURE_GATES", "MPSSupport=true"),
      kubeconfig("KUBECONFIG", "/from/env");
  CommonApp c;
  EXPECT_EQ(Parse(c.app, {"-v", "3", "--feature-gates=DynamicMIG=true", "--kubeconfig",
                          "/from/flag"}),
            std::nullopt);
  EXPECT_EQ(c.common.verbosity, 3);
  EXPECT_EQ(c.common.feature_gates, "DynamicMIG=true");
  EXPECT_EQ(c.kube.kubeconfig, "/from/flag");
}

TEST(CommonFlagsTest, VerbosityAcceptsKlogSpellings) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"-v", "4"}, {"-v4"}, {"--v=4"}, {"--v", "4"}, {"-v=4"}}) {
    CommonApp c;
    EXPECT_EQ(Parse(c.app, args), std::nullopt) << args[0];
    EXPECT_EQ(c.common.verbosity, 4) << args[0];
  }
}

TEST(CommonFlagsTest, GoStyleSingleDashLongFlagsAreAccepted) {
  CommonApp c;
  EXPECT_EQ(Parse(c.app, {"-feature-gates=MPSSupport=true", "-kubeconfig", "/x"}), std::nullopt);
  EXPECT_EQ(c.common.feature_gates, "MPSSupport=true");
  EXPECT_EQ(c.kube.kubeconfig, "/x");
}

TEST(CommonFlagsTest, LogFormatHasUpstreamAndShortName) {
  CommonApp a;
  EXPECT_EQ(Parse(a.app, {"--logging-format=json"}), std::nullopt);
  EXPECT_EQ(a.common.logging_format, "json");
  CommonApp b;
  EXPECT_EQ(Parse(b.app, {"--log-format", "json"}), std::nullopt);
  EXPECT_EQ(b.common.logging_format, "json");
}

TEST(ParseFlagsTest, HelpAndVersionExitZero) {
  CommonApp a;
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(Parse(a.app, {"--help"}), 0);
  EXPECT_THAT(::testing::internal::GetCapturedStdout(), HasSubstr("--feature-gates"));
  CommonApp b;
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(Parse(b.app, {"--version"}), 0);
  EXPECT_THAT(::testing::internal::GetCapturedStdout(), HasSubstr("test-binary version"));
}

TEST(ParseFlagsTest, BadInputExitsTwoNamingTheFlag) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--no-such-flag"}, {"-v", "-1"}, {"-v", "x"},
        {"--logging-format=xml"}, {"--kube-api-burst=many"}, {"positional"}}) {
    CommonApp c;
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(Parse(c.app, args), 2) << args[0];
    EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("test-binary --help"));
  }
}

// As klog: -v takes any level from 0 up (the chart's logVerbosity 9 or 10
// must not crash-loop the pods).
TEST(ParseFlagsTest, VerbosityAboveTheHighestUsedIsAccepted) {
  CommonApp c;
  EXPECT_EQ(Parse(c.app, {"-v", "10"}), std::nullopt);
}

TEST(ParseFlagsTest, BadEnvironmentValueExitsTwo) {
  ScopedEnv burst("KUBE_API_BURST", "lots");
  CommonApp c;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(Parse(c.app, {}), 2);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("kube-api-burst"));
}

TEST(WithEnvTest, FirstSetVariableOfSeveralWins) {
  ScopedEnv primary("NVDRA_TEST_PRIMARY", nullptr), secondary("NVDRA_TEST_SECONDARY", "/second");
  CLI::App app;
  std::string value = "default";
  WithEnv(app.add_option("--root", value), {"NVDRA_TEST_PRIMARY", "NVDRA_TEST_SECONDARY"});
  EXPECT_EQ(Parse(app, {}), std::nullopt);
  EXPECT_EQ(value, "/second");
}

TEST(WithEnvTest, EarlierVariableBeatsLaterOne) {
  ScopedEnv primary("NVDRA_TEST_PRIMARY", "/first"), secondary("NVDRA_TEST_SECONDARY", "/second");
  CLI::App app;
  std::string value = "default";
  WithEnv(app.add_option("--root", value), {"NVDRA_TEST_PRIMARY", "NVDRA_TEST_SECONDARY"});
  EXPECT_EQ(Parse(app, {}), std::nullopt);
  EXPECT_EQ(value, "/first");
}

TEST(ApplyCommonFlagsTest, ParsesFeatureGates) {
  CommonFlags flags;
  flags.feature_gates = "MPSSupport=true";
  StatusOr<FeatureGates> gates = ApplyCommonFlags(flags);
  ASSERT_TRUE(gates.ok()) << gates.status();
  EXPECT_TRUE(gates->Enabled(kMPSSupport));
}

// Seed 002: FABRIC_TOPOLOGY_SUPPORT=true turns the gate on, as
// --feature-gates would; the two may not disagree.
TEST(ApplyCommonFlagsTest, FabricTopologySupportFromTheEnvironment) {
  ScopedEnv env("FABRIC_TOPOLOGY_SUPPORT", "true");
  CLI::App app;
  CommonFlags flags;
  AddCommonFlags(app, flags, "test");
  ASSERT_EQ(Parse(app, {}), std::nullopt);
  StatusOr<FeatureGates> gates = ApplyCommonFlags(flags);
  ASSERT_TRUE(gates.ok()) << gates.status();
  EXPECT_TRUE(gates->Enabled(kFabricTopologySupport));
  EXPECT_FALSE(FeatureGates::Defaults().Enabled(kFabricTopologySupport)) << "alpha: off by default";

  flags.feature_gates = "FabricTopologySupport=true,MPSSupport=true";
  ASSERT_TRUE(ApplyCommonFlags(flags).ok());
  flags.feature_gates = "FabricTopologySupport=false";
  EXPECT_THAT(ApplyCommonFlags(flags).status().message(),
              HasSubstr("FABRIC_TOPOLOGY_SUPPORT=true and --feature-gates FabricTopologySupport=false disagree"));
  flags.feature_gates.clear();
  flags.fabric_topology_support = "yes";
  EXPECT_THAT(ApplyCommonFlags(flags).status().message(), HasSubstr("FABRIC_TOPOLOGY_SUPPORT): invalid boolean"));
  flags.fabric_topology_support = "false";
  EXPECT_FALSE(ApplyCommonFlags(flags)->Enabled(kFabricTopologySupport));
}

TEST(ApplyCommonFlagsTest, RejectsBadGatesAndFormat) {
  CommonFlags gates;
  gates.feature_gates = "NoSuchGate=true";
  EXPECT_THAT(ApplyCommonFlags(gates).status().message(), HasSubstr("NoSuchGate"));
  CommonFlags format;
  format.logging_format = "xml";
  EXPECT_THAT(ApplyCommonFlags(format).status().message(), HasSubstr("--logging-format"));
  CommonFlags vmodule;
  vmodule.vmodule = "claim_preparer";
  EXPECT_THAT(ApplyCommonFlags(vmodule).status().message(), HasSubstr("--vmodule: \"claim_preparer\" is not pattern=N"));
  vmodule.vmodule = "claim_preparer=6";
  EXPECT_TRUE(ApplyCommonFlags(vmodule).ok());
  vmodule.vmodule.clear();
  EXPECT_TRUE(ApplyCommonFlags(vmodule).ok());
}

TEST(LeaderElectionFlagsTest, DefaultsMatchUpstreamAndEnvOverrides) {
  ScopedEnv lease("LEADER_ELECTION_LEASE_DURATION", "1m"),
      enabled("LEADER_ELECTION_ENABLED", "true");
  CLI::App app;
  LeaderElectionFlags flags;
  AddLeaderElectionFlags(app, flags);
  EXPECT_EQ(Parse(app, {"--leader-election-retry-period=500ms"}), std::nullopt);
  EXPECT_TRUE(flags.enabled);
  EXPECT_EQ(flags.lease_duration, 60s);
  EXPECT_EQ(flags.renew_deadline, 10s);
  EXPECT_EQ(flags.retry_period, 500ms);
  EXPECT_EQ(flags.lease_lock_name, "nvidia-compute-domain-controller");
  EXPECT_TRUE(flags.Validate().ok());
}

TEST(LeaderElectionFlagsTest, RejectsRenewDeadlineNotShorterThanLease) {
  LeaderElectionFlags flags;
  flags.renew_deadline = 20s;
  EXPECT_THAT(flags.Validate().message(), HasSubstr("--leader-election-lease-duration"));
}

TEST(LeaderElectionFlagsTest, BadDurationExitsTwo) {
  CLI::App app;
  LeaderElectionFlags flags;
  AddLeaderElectionFlags(app, flags);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(Parse(app, {"--leader-election-lease-duration=15"}), 2);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("invalid duration \"15\""));
}

TEST(KubeClientFlagsTest, RejectsNonPositiveQpsAndBurst) {
  KubeClientFlags flags;
  flags.qps = 0;
  EXPECT_THAT(flags.Validate().message(), HasSubstr("--kube-api-qps"));
  flags.qps = 1;
  flags.burst = 0;
  EXPECT_THAT(flags.Validate().message(), HasSubstr("--kube-api-burst"));
}

TEST(MetricsFlagsTest, MetricsPathMustBeAbsolute) {
  MetricsFlags flags;
  EXPECT_TRUE(flags.Validate().ok());
  flags.metrics_path = "metrics";
  EXPECT_THAT(flags.Validate().message(), HasSubstr("--metrics-path"));
}

TEST(ParseGoDurationTest, AcceptsGoSyntax) {
  EXPECT_EQ(*ParseGoDuration("15s"), 15s);
  EXPECT_EQ(*ParseGoDuration("1m30s"), 90s);
  EXPECT_EQ(*ParseGoDuration("1.5h"), 90min);
  EXPECT_EQ(*ParseGoDuration("250ms"), 250ms);
  EXPECT_EQ(*ParseGoDuration("10us"), 10us);
  EXPECT_EQ(*ParseGoDuration("7ns"), 7ns);
  EXPECT_EQ(*ParseGoDuration("0"), 0s);
  EXPECT_EQ(*ParseGoDuration("-2s"), -2s);
}

TEST(ParseGoDurationTest, RejectsMissingUnitsAndGarbage) {
  for (const char* bad : {"", "15", "s", "1x", "1..5s", "abc", "-"}) {
    EXPECT_FALSE(ParseGoDuration(bad).ok()) << bad;
  }
}

// Found by fuzz.duration (test/fuzz): a fraction of a second below 1e-4 was
// written through a double in exponent form ("702h1m3e-06s"), which
// ParseGoDuration (and Go) cannot read back.
TEST(FormatDurationTest, WritesFractionsAsDigitsThatParseBack) {
  using std::chrono::nanoseconds;
  for (const nanoseconds d : {nanoseconds(3h + 1min + 3us), nanoseconds(1s + 1ns), nanoseconds(59s + 999999999ns),
                              nanoseconds(1min + 500ms), -nanoseconds(2s + 30us)}) {
    const std::string text = FormatDuration(d);
    EXPECT_EQ(text.find('e'), std::string::npos) << text;
    auto parsed = ParseGoDuration(text);
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status();
    EXPECT_LE(std::chrono::abs(*parsed - d), 1ns) << text;
  }
  EXPECT_EQ(FormatDuration(3h + 1min + 3us), "3h1m0.000003s");
  EXPECT_EQ(FormatDuration(1min + 500ms), "1m0.5s");
}

TEST(FormatDurationTest, WritesGoStyle) {
  EXPECT_EQ(FormatDuration(15s), "15s");
  EXPECT_EQ(FormatDuration(90s), "1m30s");
  EXPECT_EQ(FormatDuration(2h), "2h0m0s");
  EXPECT_EQ(FormatDuration(250ms), "250ms");
  EXPECT_EQ(FormatDuration(0s), "0s");
}

}  // namespace
}  // namespace nvdra::common
