#include "common/metrics_server.h"

#include <ctime>
#include <string>

#include <gtest/gtest.h>
#include <httplib.h>

namespace nvdra::common {
namespace {

class MetricsServerTest : public ::testing::Test {
 protected:
  MetricsServerTest() {
    registry_.AddCounter("nvidia_dra_requests_total", "Total.", {"driver", "operation"})
        .WithLabels({"gpu.nvidia.com", "prepare"})
        .Inc();
  }
  MetricsRegistry registry_;
};

TEST_F(MetricsServerTest, ServesRegistryOnPathOverARealSocket) {
  auto server = MetricsServer::Start(registry_, "127.0.0.1:0", "/metrics");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  EXPECT_EQ((*server)->address(), "127.0.0.1:" + std::to_string((*server)->port()));
  EXPECT_EQ((*server)->path(), "/metrics");

  httplib::Client client("127.0.0.1", (*server)->port());
  auto response = client.Get("/metrics");
  ASSERT_TRUE(response) << httplib::to_string(response.error());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->get_header_value("Content-Type"), std::string(kMetricsContentType));
  EXPECT_EQ(response->body, registry_.Render());
  EXPECT_NE(response->body.find("nvidia_dra_requests_total{driver=\"gpu.nvidia.com\",operation=\"prepare\"} 1\n"),
            std::string::npos);

  // A query string does not change the path.
  auto with_query = client.Get("/metrics?x=1");
  ASSERT_TRUE(with_query);
  EXPECT_EQ(with_query->status, 200);
}

TEST_F(MetricsServerTest, ScrapeSeesUpdatesMadeAfterStart) {
  auto server = MetricsServer::Start(registry_, "127.0.0.1:0", "/metrics");
  ASSERT_TRUE(server.ok()) << server.status();
  registry_.AddGauge("late_gauge", "Late.", {}).WithLabels({}).Set(7);
  httplib::Client client("127.0.0.1", (*server)->port());
  auto response = client.Get("/metrics");
  ASSERT_TRUE(response);
  EXPECT_NE(response->body.find("late_gauge 7\n"), std::string::npos) << response->body;
}

TEST_F(MetricsServerTest, OtherPathsAre404) {
  auto server = MetricsServer::Start(registry_, "127.0.0.1:0", "/custom.path");
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  for (const char* path : {"/", "/metrics", "/custom.path/", "/customXpath", "/custom.path/x"}) {
    auto response = client.Get(path);
    ASSERT_TRUE(response) << path;
    EXPECT_EQ(response->status, 404) << path;
  }
  auto ok = client.Get("/custom.path");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST_F(MetricsServerTest, EmptyHostListensOnEveryInterface) {
  auto server = MetricsServer::Start(registry_, ":0", "/metrics");
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  auto response = client.Get("/metrics");
  ASSERT_TRUE(response) << httplib::to_string(response.error());
  EXPECT_EQ(response->status, 200);
}

TEST_F(MetricsServerTest, PortInUseIsUnavailable) {
  auto first = MetricsServer::Start(registry_, "127.0.0.1:0", "/metrics");
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = MetricsServer::Start(registry_, "127.0.0.1:" + std::to_string((*first)->port()), "/metrics");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status();
}

TEST_F(MetricsServerTest, MalformedEndpointOrPathIsInvalidArgument) {
  for (const char* endpoint : {"8080", "::1:8080", "[::1:8080", "127.0.0.1:http", "127.0.0.1:70000"}) {
    auto server = MetricsServer::Start(registry_, endpoint, "/metrics");
    ASSERT_FALSE(server.ok()) << endpoint;
    EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument) << endpoint << ": " << server.status();
  }
  auto server = MetricsServer::Start(registry_, "127.0.0.1:0", "metrics");
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument);
}

TEST(MetricsEndpointPortTest, ThePortOfAnEndpointAsStartReadsIt) {
  EXPECT_EQ(MetricsEndpointPort(":8082").value_or(-1), 8082);
  EXPECT_EQ(MetricsEndpointPort("127.0.0.1:0").value_or(-1), 0);
  EXPECT_EQ(MetricsEndpointPort("[::1]:9090").value_or(-1), 9090);
  EXPECT_EQ(MetricsEndpointPort("localhost:").value_or(-1), 0);
  for (const char* bad : {"8082", ":http", "[::1:8082", "::1:8082", ":70000"}) {
    EXPECT_EQ(MetricsEndpointPort(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST_F(MetricsServerTest, DestructionStopsServing) {
  int port = 0;
  {
    auto server = MetricsServer::Start(registry_, "127.0.0.1:0", "/metrics");
    ASSERT_TRUE(server.ok()) << server.status();
    port = (*server)->port();
    httplib::Client client("127.0.0.1", port);
    ASSERT_TRUE(client.Get("/metrics"));
  }
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(1);
  EXPECT_FALSE(client.Get("/metrics"));
  // The port is free again.
  auto again = MetricsServer::Start(registry_, "127.0.0.1:" + std::to_string(port), "/metrics");
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST_F(MetricsServerTest, DestroyRightAfterStartDoesNotHang) {
  // Races the stop against the serving thread's start (a lost stop would
  // hang here until the test times out).
  for (int i = 0; i < 50; ++i) {
    auto server = MetricsServer::Start(registry_, "127.0.0.1:0", "/metrics");
    ASSERT_TRUE(server.ok()) << server.status();
  }
}

// Every binary's metrics endpoint (StartMetricsServerFromFlags) serves the
// process_* series of Prometheus' client libraries, read per scrape.
TEST_F(MetricsServerTest, FlagsServerServesProcessSeries) {
  MetricsFlags flags;
  flags.http_endpoint = "127.0.0.1:0";
  auto server = StartMetricsServerFromFlags(registry_, flags);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  auto response = client.Get(flags.metrics_path);
  ASSERT_TRUE(response) << httplib::to_string(response.error());
  const std::string& body = response->body;
  auto value = [&body](const std::string& name) {
    const std::size_t at = body.find("\n" + name + " ");
    EXPECT_NE(at, std::string::npos) << name << " missing in:\n" << body;
    return at == std::string::npos ? -1.0 : std::stod(body.substr(at + name.size() + 2));
  };
  EXPECT_GT(value("process_resident_memory_bytes"), 1024.0 * 1024);
  EXPECT_GT(value("process_virtual_memory_bytes"), value("process_resident_memory_bytes"));
  EXPECT_GE(value("process_cpu_seconds_total"), 0.0);
  EXPECT_GT(value("process_open_fds"), 2.0);  // stdio and the listening socket at least
  EXPECT_GT(value("process_max_fds"), value("process_open_fds"));
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_GT(value("process_start_time_seconds"), now - 3600);
  EXPECT_LE(value("process_start_time_seconds"), now + 1);
  EXPECT_NE(body.find("# TYPE process_cpu_seconds_total counter"), std::string::npos);
}

}  // namespace
}  // namespace nvdra::common
