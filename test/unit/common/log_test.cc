#include "common/log.h"

#include <chrono>
#include <source_location>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace nvdra::common {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class LogTest : public ::testing::Test {
 protected:
  void Init(LogFormat format, int verbosity) {
    out_.str("");
    InitLogging(LogOptions{.verbosity = verbosity, .format = format}, &out_);
  }
  void TearDown() override { InitLogging(LogOptions{}); }

  std::vector<std::string> Lines() const {
    std::vector<std::string> lines;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  std::ostringstream out_;
};

TEST_F(LogTest, TextLineHasKlogHeaderQuotedMessageAndFields) {
  Init(LogFormat::kText, 2);
  LOG_INFO(2, "claim prepared", {{"claim", "ns/name"}, {"devices", 2}, {"shared", false}});
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], StartsWith("I"));
  EXPECT_THAT(lines[0], HasSubstr("log_test.cc:"));
  EXPECT_THAT(lines[0], HasSubstr("] \"claim prepared\" claim=\"ns/name\" devices=2 shared=false"));
}

TEST_F(LogTest, LinesAboveVerbosityAreSkippedWithoutEvaluatingFields) {
  Init(LogFormat::kText, 2);
  int evaluations = 0;
  const auto expensive = [&evaluations] { return ++evaluations; };
  LOG_INFO(3, "hidden", {{"n", expensive()}});
  LOG_INFO(6, "hidden request");
  EXPECT_EQ(out_.str(), "");
  EXPECT_EQ(evaluations, 0);
  LOG_INFO(2, "shown", {{"n", expensive()}});
  EXPECT_EQ(evaluations, 1);
  EXPECT_EQ(Lines().size(), 1u);
}

TEST_F(LogTest, ErrorsAndWarningsAreLoggedAtVerbosityZero) {
  Init(LogFormat::kText, 0);
  LOG_INFO(1, "configuration");
  LOG_WARNING("deprecated flag", {{"flag", "--vmodule"}});
  LOG_ERROR("prepare failed", {{"err", NotFoundError("claim ns/a")}});
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], StartsWith("W"));
  EXPECT_THAT(lines[1], StartsWith("E"));
  EXPECT_THAT(lines[1], HasSubstr("err=\"NOT_FOUND: claim ns/a\""));
}

TEST_F(LogTest, JsonLinesAreValidObjectsWithTypedFields) {
  Init(LogFormat::kJson, 4);
  LOG_INFO(4, "slice \"published\"", {{"node", "n1"}, {"devices", 8u}, {"ratio", 0.5},
                                      {"ok", true}, {"text", "a\nb\\c"}});
  LOG_ERROR("failed", {{"err", UnavailableError("apiserver down")}});
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 2u);
  const nlohmann::json info = nlohmann::json::parse(lines[0]);
  EXPECT_TRUE(info["ts"].is_number());
  EXPECT_EQ(info["msg"], "slice \"published\"");
  EXPECT_EQ(info["v"], 4);
  EXPECT_EQ(info["node"], "n1");
  EXPECT_EQ(info["devices"], 8);
  EXPECT_EQ(info["ratio"], 0.5);
  EXPECT_EQ(info["ok"], true);
  EXPECT_EQ(info["text"], "a\nb\\c");
  EXPECT_THAT(info["caller"].get<std::string>(), StartsWith("log_test.cc:"));
  const nlohmann::json error = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(error["level"], "error");
  EXPECT_FALSE(error.contains("v"));
  EXPECT_EQ(error["err"], "UNAVAILABLE: apiserver down");
}

// As klog: any level from 0 up (above the highest we use, everything is
// logged); a negative one counts as 0.
TEST_F(LogTest, VerbosityTakesAnyLevelFromZeroUp) {
  SetVerbosity(42);
  EXPECT_EQ(Verbosity(), 42);
  EXPECT_TRUE(VerbosityEnabled(kMaxVerbosity));
  SetVerbosity(-3);
  EXPECT_EQ(Verbosity(), kMinVerbosity);
  EXPECT_TRUE(VerbosityEnabled(0));
  EXPECT_FALSE(VerbosityEnabled(1));
}

// --vmodule raises the level of the files its patterns match (by name
// without extension, or by path with a '/'), first match wins; a malformed
// entry is refused, naming it.
TEST_F(LogTest, VmoduleSetsPerFileLevels) {
  SetVerbosity(2);
  ASSERT_TRUE(SetVmodule("log_t*=6,log_test=1").ok());
  EXPECT_TRUE(VerbosityEnabled(6));   // this file matches log_t*
  EXPECT_FALSE(VerbosityEnabled(7));
  ASSERT_TRUE(SetVmodule("*/unit/common/*=5").ok());
  EXPECT_TRUE(VerbosityEnabled(5));
  ASSERT_TRUE(SetVmodule("other_file=9").ok());
  EXPECT_FALSE(VerbosityEnabled(3));
  ASSERT_TRUE(SetVmodule("").ok());
  EXPECT_FALSE(VerbosityEnabled(3));
  for (const char* bad : {"claim_preparer", "=3", "x=-1", "x=high"}) {
    Status status = SetVmodule(bad);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("--vmodule"), std::string::npos);
  }
}

// "ts" is milliseconds since the epoch, as the Go driver's JSON logs write it.
TEST_F(LogTest, JsonTimestampIsEpochMilliseconds) {
  Init(LogFormat::kJson, 2);
  const double before = static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count());
  LOG_INFO(0, "now");
  const nlohmann::json line = nlohmann::json::parse(Lines().at(0));
  ASSERT_TRUE(line["ts"].is_number_float()) << line.dump();
  EXPECT_GE(line["ts"].get<double>(), before);
  EXPECT_LT(line["ts"].get<double>(), before + 60000);
}

TEST_F(LogTest, ConcurrentLinesAreNeverTorn) {
  Init(LogFormat::kJson, 2);
  constexpr int kThreads = 4;
  constexpr int kLines = 200;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([t] {
        for (int i = 0; i < kLines; ++i) LOG_INFO(2, "tick", {{"thread", t}, {"i", i}});
      });
    }
  }
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLines));
  for (const std::string& line : lines) {
    EXPECT_TRUE(nlohmann::json::accept(line)) << line;
  }
}

TEST(ParseLogFormatTest, AcceptsTextAndJsonOnly) {
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_THAT(ParseLogFormat("xml").status().message(), HasSubstr("want text or json"));
  EXPECT_THAT(ParseLogFormat("xml").status().message(), Not(HasSubstr("console")));
}

}  // namespace
}  // namespace nvdra::common
