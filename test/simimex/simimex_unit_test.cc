// Unit tests of the simulated IMEX's parsing and formatting (no processes).

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "imex_config.h"
#include "net.h"
#include "protocol.h"

namespace nvdra::simimex {
namespace {

using ::testing::HasSubstr;

// The keys as upstream's compute-domain-daemon-config.tmpl.cfg renders them.
constexpr std::string_view kRenderedTemplate = R"(# NVIDIA IMEX configuration file.
LOG_LEVEL=4
LOG_FILE_NAME=
STATS_FILE_NAME=/var/log/nvidia-imex-stats.log
DAEMONIZE=0
BIND_INTERFACE_IP=
SERVER_PORT=50000
IMEX_NODE_CONFIG_FILE=/imexd/nodes.cfg
NETWORK_INTERFACE=
IMEX_WAIT_FOR_QUORUM=RECOVERY
IMEX_ENABLE_AUTH_ENCRYPTION=0
IMEX_AUTH_ENCRYPTION_MODE=SSL_TLS
IMEX_GSS_TIMEOUT_SEC=30
IMEX_CMD_ENABLED=1
IMEX_CMD_BIND_INTERFACE_IP=10.1.2.3
IMEX_CMD_PORT=50005
IMEX_CMD_UNIX_DOMAIN_PATH=
IMEX_NODE_DISCONNECTED_GRACE_TIME=-1
)";

TEST(SimImexUnitConfig, ParsesTheDriversRenderedTemplate) {
  auto config = ParseImexConfig(kRenderedTemplate);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->daemonize);
  EXPECT_EQ(config->server_port, 50000);
  EXPECT_EQ(config->node_config_file, "/imexd/nodes.cfg");
  EXPECT_EQ(config->wait_for_quorum, QuorumMode::kRecovery);
  EXPECT_TRUE(config->cmd_enabled);
  EXPECT_EQ(config->cmd_bind_interface_ip, "10.1.2.3");
  EXPECT_EQ(config->cmd_port, 50005);
  EXPECT_EQ(config->cmd_unix_domain_path, "");
  EXPECT_EQ(config->node_disconnected_grace_time, -1);
  EXPECT_EQ(config->bind_interface_ip, "");
}

TEST(SimImexUnitConfig, EmptyFileGivesVendorDefaults) {
  auto config = ParseImexConfig("");
  ASSERT_TRUE(config.ok());
  EXPECT_TRUE(config->daemonize);
  EXPECT_EQ(config->server_port, 50000);
  EXPECT_EQ(config->node_config_file, "/etc/nvidia-imex/nodes_config.cfg");
  EXPECT_EQ(config->wait_for_quorum, QuorumMode::kRecovery);
  EXPECT_FALSE(config->cmd_enabled);
}

TEST(SimImexUnitConfig, QuorumModesAndSpacesAroundValues) {
  EXPECT_EQ(ParseImexConfig("IMEX_WAIT_FOR_QUORUM = NONE\n")->wait_for_quorum, QuorumMode::kNone);
  EXPECT_EQ(ParseImexConfig("IMEX_WAIT_FOR_QUORUM=FULL")->wait_for_quorum, QuorumMode::kFull);
}

TEST(SimImexUnitConfig, BadLinesAreInvalidArgumentNamingTheLine) {
  auto no_equals = ParseImexConfig("LOG_LEVEL=4\nSERVER_PORT\n");
  ASSERT_FALSE(no_equals.ok());
  EXPECT_EQ(no_equals.status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_equals.status().message(), HasSubstr("line 2"));
  auto port = ParseImexConfig("SERVER_PORT=70000\n");
  ASSERT_FALSE(port.ok());
  EXPECT_THAT(port.status().message(), HasSubstr("SERVER_PORT"));
  EXPECT_FALSE(ParseImexConfig("IMEX_WAIT_FOR_QUORUM=SOME").ok());
}

TEST(SimImexUnitNodes, OneEntryPerLineInOrder) {
  EXPECT_THAT(ParseNodesConfig("10.0.0.2\n  10.0.0.1 \n\ncompute-domain-daemon-0000\n"),
              ::testing::ElementsAre("10.0.0.2", "10.0.0.1", "compute-domain-daemon-0000"));
  EXPECT_TRUE(ParseNodesConfig("").empty());
}

TEST(SimImexUnitNodes, KeyDependsOnEntriesAndOrder) {
  EXPECT_EQ(NodesConfigKey({"a", "b"}), NodesConfigKey({"a", "b"}));
  EXPECT_NE(NodesConfigKey({"a", "b"}), NodesConfigKey({"b", "a"}));
  EXPECT_NE(NodesConfigKey({"a", "b"}), NodesConfigKey({"a", "b", "c"}));
}

// The lines the compute-domain daemon writes into /etc/hosts (DNS-names mode).
constexpr std::string_view kHosts =
    "127.0.0.1\tlocalhost\n"
    "::1 localhost ip6-localhost\n"
    "# Compute Domain Daemon mappings\n"
    "127.30.0.2\tcompute-domain-daemon-0000\n"
    "127.30.0.3\tcompute-domain-daemon-0001  # trailing comment\n"
    "127.30.0.9\tcompute-domain-daemon-0000\n"
    "not-an-ip\tcompute-domain-daemon-0002\n";

TEST(SimImexUnitHosts, FindsNamesFirstLineWinsIgnoresCommentsAndBadLines) {
  EXPECT_EQ(LookupHostsFile(kHosts, "compute-domain-daemon-0000"), "127.30.0.2");
  EXPECT_EQ(LookupHostsFile(kHosts, "COMPUTE-DOMAIN-DAEMON-0001"), "127.30.0.3");
  EXPECT_EQ(LookupHostsFile(kHosts, "ip6-localhost"), "::1");
  EXPECT_EQ(LookupHostsFile(kHosts, "compute-domain-daemon-0002"), std::nullopt);
  EXPECT_EQ(LookupHostsFile(kHosts, "comment"), std::nullopt);
}

TEST(SimImexUnitHosts, ResolverReadsItsHostsFileAtEveryLookup) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("simimex-hosts-" + std::to_string(::getpid()));
  std::ofstream(path) << "127.30.0.2 cdd-0\n";
  const Resolver resolver(path, /*use_system_resolver=*/false);
  EXPECT_EQ(resolver.Resolve("cdd-0"), "127.30.0.2");
  EXPECT_EQ(resolver.Resolve("cdd-1"), std::nullopt);
  std::ofstream(path) << "127.30.0.5 cdd-0\n127.30.0.6 cdd-1\n";
  EXPECT_EQ(resolver.Resolve("cdd-0"), "127.30.0.5");
  EXPECT_EQ(resolver.Resolve("cdd-1"), "127.30.0.6");
  EXPECT_EQ(resolver.Resolve("127.30.0.1"), "127.30.0.1");
  EXPECT_EQ(resolver.Resolve("fe80:0:0::1"), "fe80::1");
  std::filesystem::remove(path);
}

TEST(SimImexUnitProtocol, NodeStatusRoundTrips) {
  NodeStatus status{DaemonState::kWaitingForPeers, 2, "127.0.0.3", "570.172.08",
                    {ConnState::kConnected, ConnState::kMapMismatch, ConnState::kNeverConnected}};
  auto decoded = DecodeNodeStatus(EncodeNodeStatus(status));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, status);
  EXPECT_FALSE(DecodeNodeStatus("state READY\n").ok());  // no "end": truncated
  EXPECT_FALSE(DecodeNodeStatus("state HAPPY\nend\n").ok());
}

TEST(SimImexUnitProtocol, HelloRoundTripsAndRejectsOtherLines) {
  const Hello hello{"570.172.08", "00112233aabbccdd", 3, "127.0.0.4", "deadbeef"};
  auto line = EncodeHello(hello);
  line.pop_back();
  auto decoded = DecodeHello(line);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, hello);
  EXPECT_FALSE(DecodeHello("GET / HTTP/1.1").ok());
}

DomainReport ThreeNodeReport(DaemonState third, ConnState to_third) {
  auto status = [&](int i, DaemonState s) {
    return NodeStatus{s, i, fmt::format("10.0.0.{}", i + 1), "570.172.08",
                      {ConnState::kConnected, ConnState::kConnected, to_third}};
  };
  DomainReport report{"9/4/2026 00:00:00.000", {}};
  for (int i = 0; i < 3; ++i) {
    report.rows.push_back({fmt::format("10.0.0.{}", i + 1), fmt::format("10.0.0.{}", i + 1),
                           status(i, i == 2 ? third : DaemonState::kReady)});
  }
  return report;
}

TEST(SimImexUnitReport, DomainStateUpDegradedDown) {
  EXPECT_EQ(DomainStateName(ThreeNodeReport(DaemonState::kReady, ConnState::kConnected)), "UP");
  EXPECT_EQ(DomainStateName(ThreeNodeReport(DaemonState::kReady, ConnState::kRecovering)),
            "DEGRADED");
  auto down = ThreeNodeReport(DaemonState::kReady, ConnState::kConnected);
  for (auto& row : down.rows) row.status.reset();
  EXPECT_EQ(DomainStateName(down), "DOWN");
  // An unused DNS-name slot does not count against UP.
  auto with_slot = ThreeNodeReport(DaemonState::kReady, ConnState::kConnected);
  with_slot.rows.push_back({"compute-domain-daemon-0003", std::nullopt, std::nullopt});
  EXPECT_EQ(DomainStateName(with_slot), "UP");
}

TEST(SimImexUnitReport, TextHasTheRealToolsLinesAndMatrix) {
  auto report = ThreeNodeReport(DaemonState::kReady, ConnState::kRecovering);
  report.rows[2].status.reset();
  const std::string text = FormatDomainText(report, false);
  EXPECT_THAT(text, HasSubstr("Connectivity Table Legend:\n"));
  EXPECT_THAT(text, HasSubstr("\n9/4/2026 00:00:00.000\nNodes:\n"));
  EXPECT_THAT(text, HasSubstr("Node #0   - 10.0.0.1        - READY                - Version: 570.172.08\n"));
  EXPECT_THAT(text, HasSubstr("Node #2   - 10.0.0.3        - UNAVAILABLE          - Version: N/A\n"));
  EXPECT_THAT(text, HasSubstr(" Nodes From\\To  0   1   2  \n"));
  EXPECT_THAT(text, HasSubstr("       0        C   C   R  \n"));
  EXPECT_THAT(text, HasSubstr("       2        I   I   I  \n"));
  EXPECT_THAT(text, HasSubstr("\nDomain State: DEGRADED\n"));
}

TEST(SimImexUnitReport, JsonHasTheRealToolsShape) {
  auto report = ThreeNodeReport(DaemonState::kReady, ConnState::kConnected);
  const auto json = nlohmann::json::parse(FormatDomainJson(report));
  EXPECT_EQ(json["status"], "UP");
  EXPECT_EQ(json["timestamp"], "9/4/2026 00:00:00.000");
  EXPECT_EQ(json["nodes"]["1"]["status"], "READY");
  EXPECT_EQ(json["nodes"]["1"]["host"], "10.0.0.2");
  EXPECT_EQ(json["nodes"]["1"]["connections"]["2"]["status"], "CONNECTED");
  EXPECT_EQ(json["nodes"]["1"]["connections"]["2"]["host"], "10.0.0.3");
}

}  // namespace
}  // namespace nvdra::simimex
