#include "webhook/server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "test_certs.h"
#include "webhook/admission.h"

namespace nvdra::webhook {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;
using testing::MakeTestPki;
using testing::TestPki;
using testing::WriteFileAtomically;

constexpr auto kEventDeadline = 30s;

class WebhookServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("webhook-server-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    pki_a_ = MakeTestPki("ca-a");
    WriteFileAtomically(dir_ / "tls.crt", pki_a_.cert_pem);
    WriteFileAtomically(dir_ / "tls.key", pki_a_.key_pem);
    WriteFileAtomically(dir_ / "ca-a.crt", pki_a_.ca_pem);
    auto certificate = ServingCertificate::Start(dir_ / "tls.crt", dir_ / "tls.key", registry_);
    ASSERT_TRUE(certificate.ok()) << certificate.status();
    certificate_ = *std::move(certificate);
    ServerOptions options;
    options.bind_address = "127.0.0.1";
    options.port = 0;
    auto server = WebhookServer::Start(options, *certificate_, registry_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override {
    server_.reset();
    certificate_.reset();
    fs::remove_all(dir_);
  }

  // A client that trusts only the CA in `ca_file`.
  std::unique_ptr<httplib::SSLClient> Client(const fs::path& ca_file) {
    auto client = std::make_unique<httplib::SSLClient>("127.0.0.1", server_->port());
    client->set_ca_cert_path(ca_file.c_str());
    client->enable_server_certificate_verification(true);
    return client;
  }

  fs::path dir_;
  TestPki pki_a_;
  common::MetricsRegistry registry_;
  std::unique_ptr<ServingCertificate> certificate_;
  std::unique_ptr<WebhookServer> server_;
};

json ReviewOf(json config) {
  return {{"apiVersion", "admission.k8s.io/v1"},
          {"kind", "AdmissionReview"},
          {"request",
           {{"uid", "u-1"},
            {"operation", "CREATE"},
            {"resource", {{"group", "resource.k8s.io"}, {"version", "v1"}, {"resource", "resourceclaims"}}},
            {"object", {{"spec", {{"devices", {{"config", json::array({config})}}}}}}}}}};
}

TEST_F(WebhookServerTest, AnswersProbesAndReviewsOverTls) {
  auto client = Client(dir_ / "ca-a.crt");
  for (const char* path : {"/readyz", "/healthz"}) {
    auto probe = client->Get(path);
    ASSERT_TRUE(probe) << path << ": " << httplib::to_string(probe.error());
    EXPECT_EQ(probe->status, 200);
    EXPECT_EQ(probe->body, "ok");
  }
  const json bad = {{"opaque",
                     {{"driver", "gpu.nvidia.com"},
                      {"parameters", {{"apiVersion", "resource.nvidia.com/v1beta1"}, {"kind", "GpuConfig"},
                                      {"sharing", {{"strategy", "Nope"}}}}}}}};
  auto denied = client->Post(std::string(kValidatePath), ReviewOf(bad).dump(), "application/json");
  ASSERT_TRUE(denied) << httplib::to_string(denied.error());
  EXPECT_EQ(denied->status, 200);
  const json response = json::parse(denied->body)["response"];
  EXPECT_EQ(response["allowed"], false);
  EXPECT_NE(response["status"]["message"].get<std::string>().find(
                "spec.devices.config[0].opaque.parameters.sharing.strategy"),
            std::string::npos);

  auto wrong_type = client->Post(std::string(kValidatePath), ReviewOf(bad).dump(), "text/plain");
  ASSERT_TRUE(wrong_type);
  EXPECT_EQ(wrong_type->status, 415);
  auto garbage = client->Post(std::string(kValidatePath), "[]", "application/json");
  ASSERT_TRUE(garbage);
  EXPECT_EQ(garbage->status, 400);

  const std::string metrics = registry_.Render();
  EXPECT_NE(metrics.find("nvdra_webhook_admission_requests_total{resource=\"resourceclaims\",result=\"denied\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("nvdra_webhook_admission_requests_total{resource=\"\",result=\"bad_request\"} 2"),
            std::string::npos)
      << metrics;
}

TEST_F(WebhookServerTest, ServesARotatedCertificateWithoutRestart) {
  const TestPki b = MakeTestPki("ca-b");
  WriteFileAtomically(dir_ / "ca-b.crt", b.ca_pem);
  auto trusts_b = Client(dir_ / "ca-b.crt");
  auto before = trusts_b->Get("/readyz");
  EXPECT_FALSE(before) << "a client trusting only CA b must reject CA a's certificate";

  const std::uint64_t generation = certificate_->generation();
  WriteFileAtomically(dir_ / "tls.key", b.key_pem);
  WriteFileAtomically(dir_ / "tls.crt", b.cert_pem);
  ASSERT_GT(certificate_->WaitForGenerationAfter(generation, kEventDeadline), generation);

  auto after = Client(dir_ / "ca-b.crt")->Get("/readyz");
  ASSERT_TRUE(after) << httplib::to_string(after.error());
  EXPECT_EQ(after->status, 200);
  EXPECT_FALSE(Client(dir_ / "ca-a.crt")->Get("/readyz")) << "the old certificate is still served";
}

TEST_F(WebhookServerTest, SecondServerOnTheSamePortFailsClearly) {
  ServerOptions options;
  options.bind_address = "127.0.0.1";
  options.port = server_->port();
  auto second = WebhookServer::Start(options, *certificate_, registry_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), common::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace nvdra::webhook
