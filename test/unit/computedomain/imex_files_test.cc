#include "computedomain/imex_files.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/file_io.h"

namespace nvdra::computedomain {
namespace {

using ::testing::HasSubstr;

TEST(RenderImexConfigTest, FillsUpstreamVariablesWithOrWithoutSpaces) {
  auto out = RenderImexConfig("A=1\nIMEX_NODE_CONFIG_FILE={{ .IMEXDaemonNodesConfigPath }}\n"
                              "IMEX_CMD_BIND_INTERFACE_IP={{.IMEXCmdBindInterfaceIP}}\n",
                              {.cmd_bind_interface_ip = "10.1.2.3", .nodes_config_path = "/imexd/nodes.cfg"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "A=1\nIMEX_NODE_CONFIG_FILE=/imexd/nodes.cfg\nIMEX_CMD_BIND_INTERFACE_IP=10.1.2.3\n");
}

TEST(RenderImexConfigTest, UnknownVariableAndUnclosedBracesNameTheLine) {
  EXPECT_THAT(RenderImexConfig("A=1\nB={{ .Nope }}\n", {}).status().message(), HasSubstr("line 2"));
  EXPECT_THAT(RenderImexConfig("A={{ .IMEXCmdBindInterfaceIP\n", {}).status().message(), HasSubstr("unclosed"));
}

TEST(RenderImexConfigTest, ShippedTemplateRendersEveryKeyTheDriverSets) {
  auto text =
      common::ReadWholeFile(std::filesystem::path(NVDRA_SOURCE_DIR) / "templates/compute-domain-daemon-config.tmpl.cfg");
  ASSERT_TRUE(text.ok()) << text.status();
  auto out = RenderImexConfig(*text, {.cmd_bind_interface_ip = "10.0.0.9", .nodes_config_path = "/imexd/nodes.cfg"});
  ASSERT_TRUE(out.ok()) << out.status();
  for (const char* line : {"DAEMONIZE=0\n", "SERVER_PORT=50000\n", "IMEX_NODE_CONFIG_FILE=/imexd/nodes.cfg\n",
                           "IMEX_WAIT_FOR_QUORUM=RECOVERY\n", "IMEX_ENABLE_AUTH_ENCRYPTION=0\n", "IMEX_CMD_ENABLED=1\n",
                           "IMEX_CMD_BIND_INTERFACE_IP=10.0.0.9\n", "IMEX_CMD_PORT=50005\n", "LOG_FILE_NAME=\n",
                           "IMEX_NODE_DISCONNECTED_GRACE_TIME=-1\n"}) {
    EXPECT_THAT(*out, HasSubstr(std::string("\n") + line)) << line;
  }
}

TEST(NodesConfigTest, StaticNamesAreZeroPaddedAndCountMaxNodes) {
  EXPECT_EQ(StaticNodesConfig(3),
            "compute-domain-daemon-0000\ncompute-domain-daemon-0001\ncompute-domain-daemon-0002\n");
  EXPECT_EQ(StaticNodesConfig(18).size(), 18u * 27u);
  EXPECT_EQ(IpNodesConfig({"10.0.0.2", "10.0.0.1"}), "10.0.0.2\n10.0.0.1\n");
}

// A peer's ipAddress goes into the nodes file and /etc/hosts verbatim: only
// address literals may, never text that adds lines or names.
TEST(IsIpAddressLiteralTest, TakesAddressesOnly) {
  for (const char* ip : {"10.0.0.1", "192.168.255.254", "fd00::1", "::1", "2001:db8::8a2e:370:7334"}) {
    EXPECT_TRUE(IsIpAddressLiteral(ip)) << ip;
  }
  for (const char* text : {"", "10.0.0.1\n10.0.0.2", "10.0.0.1 evil.example", "10.0.0", "host.example", " 10.0.0.1",
                           "10.0.0.256", "fd00::1%eth0"}) {
    EXPECT_FALSE(IsIpAddressLiteral(text)) << text;
  }
}

TEST(RewriteHostsFileTest, ReplacesOnlyOurLinesAndWritesTheMarkerOnce) {
  const std::string before = "127.0.0.1\tlocalhost\n10.0.0.5\tpod-x\n";
  std::string once = RewriteHostsFile(before, {{1, "10.0.0.2"}, {0, "10.0.0.1"}});
  EXPECT_EQ(once, before + "# Compute Domain Daemon mappings\n10.0.0.1\tcompute-domain-daemon-0000\n"
                           "10.0.0.2\tcompute-domain-daemon-0001\n");
  std::string twice = RewriteHostsFile(once, {{0, "10.0.0.1"}});
  EXPECT_EQ(twice, before + "# Compute Domain Daemon mappings\n10.0.0.1\tcompute-domain-daemon-0000\n");
}

TEST(WriteFileTest, AtomicWriteReplacesAndLeavesNoTemporaryFile) {
  char dir_template[] = "/tmp/imex-files-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::filesystem::path dir(dir_template);
  ASSERT_TRUE(WriteFileAtomically(dir / "a.cfg", "one\n").ok());
  ASSERT_TRUE(WriteFileAtomically(dir / "a.cfg", "two\n").ok());
  EXPECT_EQ(*common::ReadWholeFile(dir / "a.cfg"), "two\n");
  ASSERT_TRUE(WriteFileInPlace(dir / "hosts", "h\n").ok());
  EXPECT_EQ(*common::ReadWholeFile(dir / "hosts"), "h\n");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 2);
  EXPECT_EQ(WriteFileAtomically(dir / "missing" / "x", "y").code(), common::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

TEST(WriteFileTest, InPlaceWriteGrowsAndShrinksExactly) {
  char dir_template[] = "/tmp/imex-files-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::filesystem::path hosts = std::filesystem::path(dir_template) / "hosts";
  ASSERT_TRUE(WriteFileInPlace(hosts, "127.0.0.1\tlocalhost\n10.0.0.1\tpeer-0\n10.0.0.2\tpeer-1\n").ok());
  ASSERT_TRUE(WriteFileInPlace(hosts, "127.0.0.1\tlocalhost\n").ok());
  EXPECT_EQ(*common::ReadWholeFile(hosts), "127.0.0.1\tlocalhost\n");
  ASSERT_TRUE(WriteFileInPlace(hosts, "127.0.0.1\tlocalhost\n10.0.0.9\tpeer-9\n").ok());
  EXPECT_EQ(*common::ReadWholeFile(hosts), "127.0.0.1\tlocalhost\n10.0.0.9\tpeer-9\n");
  std::filesystem::remove_all(dir_template);
}

// nvidia-imex resolves its own name through the hosts file when it starts,
// while the daemon may be rewriting it for a peer that just joined: a reader
// must never find the file empty or without the mappings both versions
// share (a truncate-then-write gave it an empty file for a moment, and the
// simulated nvidia-imex exited: "no entry of nodes.cfg is this node's
// address").
TEST(WriteFileTest, InPlaceRewritesNeverShowAReaderAnEmptyFile) {
  char dir_template[] = "/tmp/imex-files-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::filesystem::path hosts = std::filesystem::path(dir_template) / "hosts";
  const std::string shared = "127.0.0.1\tlocalhost\n10.0.0.1\tcompute-domain-daemon-0000\n";
  const std::string longer = shared + "10.0.0.2\tcompute-domain-daemon-0001\n";
  ASSERT_TRUE(WriteFileInPlace(hosts, longer).ok());
  std::atomic<bool> done{false};
  std::atomic<int> reads{0};
  std::atomic<int> bad{0};
  std::string first_bad;
  std::thread reader([&] {
    while (!done.load()) {
      auto text = common::ReadWholeFile(hosts);
      reads.fetch_add(1);
      if (!text.ok() || !text->starts_with(shared)) {
        if (bad.fetch_add(1) == 0) first_bad = text.ok() ? *text : text.status().ToString();
      }
    }
  });
  for (int i = 0; i < 20000 && bad.load() == 0; ++i) {
    ASSERT_TRUE(WriteFileInPlace(hosts, i % 2 == 0 ? shared : longer).ok());
  }
  done.store(true);
  reader.join();
  EXPECT_EQ(bad.load(), 0) << "after " << reads.load() << " reads, one saw: " << first_bad;
  EXPECT_GT(reads.load(), 0);
  std::filesystem::remove_all(dir_template);
}

}  // namespace
}  // namespace nvdra::computedomain
