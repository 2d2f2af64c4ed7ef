#include "common/log.h"

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

TEST_F(LogTest, SetVerbosityClampsToKubernetesRange) {
  SetVerbosity(42);
  EXPECT_EQ(Verbosity(), kMaxVerbosity);
  SetVerbosity(-3);
  EXPECT_EQ(Verbosity(), kMinVerbosity);
  EXPECT_TRUE(VerbosityEnabled(0));
  EXPECT_FALSE(VerbosityEnabled(1));
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
