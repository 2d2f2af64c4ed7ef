#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include <gtest/gtest.h>
#include <httplib.h>

#include "common/unique_fd.h"

namespace nvdra::common {
namespace {

// Connects to 127.0.0.1:port; an invalid descriptor on failure.
UniqueFd Connect(int port) {
  UniqueFd sock(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (!sock || connect(sock.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) return {};
  return sock;
}

// Sends `request` as written and reads the answer until the server closes.
std::string RawExchange(int port, const std::string& request) {
  UniqueFd sock = Connect(port);
  if (!sock) return "connect failed";
  std::size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = send(sock.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may answer (and close) before reading it all
    sent += static_cast<std::size_t>(n);
  }
  std::string answer;
  char buffer[4096];
  for (ssize_t n; (n = recv(sock.get(), buffer, sizeof(buffer), 0)) > 0;) answer.append(buffer, static_cast<std::size_t>(n));
  return answer;
}

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

TEST_F(MetricsServerTest, HeadAnswersWithoutBodyAndOtherMethodsAre405) {
  auto server = MetricsServer::Start(registry_, "127.0.0.1:0", "/metrics");
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  auto head = client.Head("/metrics");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->body, "");
  EXPECT_EQ(head->get_header_value("Content-Length"), std::to_string(registry_.Render().size()));
  auto post = client.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET, HEAD");
}

TEST_F(MetricsServerTest, RawRequestsPercentEncodingHttp10AndGarbage) {
  auto server = MetricsServer::Start(registry_, "127.0.0.1:0", "/metrics");
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  const std::string ok = RawExchange(port, "GET /%6detrics HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(ok.starts_with("HTTP/1.1 200 OK\r\n")) << ok;
  EXPECT_TRUE(ok.ends_with(registry_.Render())) << ok;
  EXPECT_NE(ok.find("\r\nConnection: close\r\n"), std::string::npos) << ok;
  EXPECT_TRUE(RawExchange(port, "GET /metrics%2 HTTP/1.1\r\nHost: x\r\n\r\n").starts_with("HTTP/1.1 404 "));
  EXPECT_TRUE(RawExchange(port, "hello\r\n\r\n").starts_with("HTTP/1.1 400 "));
  EXPECT_TRUE(RawExchange(port, "GET /metrics SPDY/3\r\n\r\n").starts_with("HTTP/1.1 400 "));
  // A request head that never ends is cut off at 16 KiB.
  const std::string huge = "GET /metrics HTTP/1.1\r\nX-Filler: " + std::string(20 * 1024, 'a');
  EXPECT_TRUE(RawExchange(port, huge).starts_with("HTTP/1.1 431 ")) << RawExchange(port, huge).substr(0, 80);
  // And the server still answers afterwards.
  EXPECT_TRUE(RawExchange(port, "GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200 OK\r\n"));
}

TEST_F(MetricsServerTest, DestructionDropsAClientThatSendsNothing) {
  // A connected client that never sends its request holds the one serving
  // thread; destruction must not wait for it (a hang here fails the test by
  // its timeout).
  auto server = MetricsServer::Start(registry_, "127.0.0.1:0", "/metrics");
  ASSERT_TRUE(server.ok()) << server.status();
  UniqueFd idle = Connect((*server)->port());
  ASSERT_TRUE(idle.valid());
  // One byte, so that the server has accepted it and is reading.
  ASSERT_EQ(send(idle.get(), "G", 1, MSG_NOSIGNAL), 1);
  server->reset();
  char byte = 0;
  // Closed by the server without an answer (EOF, or a reset when the
  // connection was still in the listen queue).
  EXPECT_LE(recv(idle.get(), &byte, 1, 0), 0);
}

TEST_F(MetricsServerTest, DestroyRightAfterStartDoesNotHang) {
  // Races the stop against the serving thread's start (a lost stop would
  // hang here until the test times out).
  for (int i = 0; i < 50; ++i) {
    auto server = MetricsServer::Start(registry_, "127.0.0.1:0", "/metrics");
    ASSERT_TRUE(server.ok()) << server.status();
  }
}

}  // namespace
}  // namespace nvdra::common
