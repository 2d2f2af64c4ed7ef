// The webhook binary behind a real kube-apiserver: a serving certificate from
// a test CA made with openssl, a ValidatingWebhookConfiguration carrying that
// CA (clientConfig.url on loopback, since no Service proxy runs here), then
// claims and templates created with kubectl: valid configs admitted, each
// kind of invalid config rejected with its field path, configs of other
// drivers untouched, v1beta1 and v1beta2 objects judged too; the serving
// certificate rotated on disk and still accepted by the API server without a
// restart; SIGTERM ends the process with exit 0.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/child_process.h"
#include "test_cluster.h"

namespace nvdra::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

constexpr char kNs[] = "webhook-test";
constexpr char kWebhookName[] = "gpu.nvidia.com";
constexpr char kConfigName[] = "nvdra-webhook-test";
// How long to wait for something outside our control (the API server picking
// up a new webhook configuration, a certificate reload) before failing.
constexpr auto kDeadline = 60s;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string Base64(const std::string& text) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < text.size(); i += 3) {
    const unsigned n = (static_cast<unsigned char>(text[i]) << 16) | (static_cast<unsigned char>(text[i + 1]) << 8) |
                       static_cast<unsigned char>(text[i + 2]);
    for (int shift : {18, 12, 6, 0}) out += kAlphabet[(n >> shift) & 63];
  }
  if (i < text.size()) {
    unsigned n = static_cast<unsigned>(static_cast<unsigned char>(text[i])) << 16;
    if (i + 1 < text.size()) n |= static_cast<unsigned>(static_cast<unsigned char>(text[i + 1])) << 8;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < text.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// A CA named `name` in dir/<name>/ca.crt and a serving certificate it signed
// for 127.0.0.1 in dir/<name>/tls.{crt,key}, made with the openssl CLI.
// Returns "" or what failed.
std::string MakePki(const fs::path& dir, const std::string& name) {
  const fs::path out = dir / name;
  fs::create_directories(out);
  const std::string script =
      "set -e; cd '" + out.string() +
      "'\n"
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.crt "
      "-days 2 -subj /CN=" + name +
      "\n"
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout tls.key -out tls.csr "
      "-subj /CN=nvdra-webhook\n"
      "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > ext.cnf\n"
      "openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out tls.crt -days 2 "
      "-extfile ext.cnf\n";
  CommandResult result = RunCommand({"sh", "-c", script});
  return result.ok() ? "" : "openssl: " + result.err + result.out;
}

json Params(const std::string& kind, json extra = json::object()) {
  json config = {{"apiVersion", "resource.nvidia.com/v1beta1"}, {"kind", kind}};
  config.update(extra);
  return config;
}

json Opaque(const std::string& driver, json parameters) {
  return {{"requests", json::array({"gpu"})}, {"opaque", {{"driver", driver}, {"parameters", std::move(parameters)}}}};
}

// A claim spec in the shape of `version`: v1beta1 names the class on the
// request, v1 and v1beta2 under `exactly`.
json ClaimSpec(const std::string& version, json configs) {
  json request = version == "v1beta1"
                     ? json{{"name", "gpu"}, {"deviceClassName", "gpu.nvidia.com"}}
                     : json{{"name", "gpu"}, {"exactly", {{"deviceClassName", "gpu.nvidia.com"}}}};
  return {{"devices", {{"requests", json::array({request})}, {"config", std::move(configs)}}}};
}

class WebhookClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string error;
    cluster_ = TestCluster::Start(&error).release();
    ASSERT_NE(cluster_, nullptr) << error;
    ASSERT_TRUE(cluster_->Kubectl({"create", "namespace", kNs}).ok());
    dir_ = new fs::path(cluster_->dir() / "webhook");
    fs::create_directories(*dir_ / "serving");
    ASSERT_EQ(MakePki(*dir_, "ca-a"), "");
    fs::copy_file(*dir_ / "ca-a" / "tls.crt", *dir_ / "serving" / "tls.crt");
    fs::copy_file(*dir_ / "ca-a" / "tls.key", *dir_ / "serving" / "tls.key");

    port_ = FreeLocalPort();
    metrics_port_ = FreeLocalPort();
    ASSERT_GT(port_, 0);
    common::SpawnOptions options;
    options.argv = {WEBHOOK_BINARY,
                    "--tls-cert-file=" + (*dir_ / "serving" / "tls.crt").string(),
                    "--tls-private-key-file=" + (*dir_ / "serving" / "tls.key").string(),
                    "--port=" + std::to_string(port_),
                    "--bind-address=127.0.0.1",
                    "--http-endpoint=127.0.0.1:" + std::to_string(metrics_port_),
                    // Seed 002's switch for FabricTopologySupport.
                    "--fabric-topology-support=true",
                    "-v=2"};
    auto child = common::ChildProcess::Spawn(options);
    ASSERT_TRUE(child.ok()) << child.status();
    webhook_ = new common::ChildProcess(*std::move(child));
    ASSERT_TRUE(WaitForReadyz(*dir_ / "ca-a" / "ca.crt")) << "webhook did not answer /readyz";
    ASSERT_TRUE(ApplyWebhookConfiguration(ReadFile(*dir_ / "ca-a" / "ca.crt")).ok());
    // The API server loads webhook configurations through an informer, with
    // no event a client can wait for: retry a dry run until it is denied.
    ASSERT_TRUE(WaitUntilDenied()) << "the API server never called the webhook";
  }

  static void TearDownTestSuite() {
    if (cluster_ != nullptr) cluster_->Kubectl({"delete", "validatingwebhookconfiguration", kConfigName});
    if (webhook_ != nullptr && webhook_->running()) webhook_->Terminate(10s);
    delete webhook_;
    delete dir_;
    delete cluster_;
  }

  static bool WaitForReadyz(const fs::path& ca_file) {
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!webhook_->running() || webhook_->TryWait()) return false;
      httplib::SSLClient client("127.0.0.1", port_);
      client.set_ca_cert_path(ca_file.c_str());
      client.enable_server_certificate_verification(true);
      client.set_connection_timeout(2s);
      if (auto response = client.Get("/readyz"); response && response->status == 200) return true;
      std::this_thread::sleep_for(50ms);  // the process is starting; nothing to wait on but its port
    }
    return false;
  }

  static CommandResult ApplyWebhookConfiguration(const std::string& ca_bundle_pem) {
    const json config = {
        {"apiVersion", "admissionregistration.k8s.io/v1"},
        {"kind", "ValidatingWebhookConfiguration"},
        {"metadata", {{"name", kConfigName}}},
        {"webhooks",
         json::array({{{"name", kWebhookName},
                       {"rules", json::array({{{"apiGroups", {"resource.k8s.io"}},
                                               {"apiVersions", {"v1beta1", "v1beta2", "v1"}},
                                               {"operations", {"CREATE", "UPDATE"}},
                                               {"resources", {"resourceclaims", "resourceclaimtemplates"}},
                                               {"scope", "Namespaced"}}})},
                       {"clientConfig",
                        {{"url", "https://127.0.0.1:" + std::to_string(port_) + "/validate-resource-claim-parameters"},
                         {"caBundle", Base64(ca_bundle_pem)}}},
                       {"failurePolicy", "Fail"},
                       {"admissionReviewVersions", {"v1"}},
                       {"sideEffects", "None"},
                       {"namespaceSelector", {{"matchLabels", {{"kubernetes.io/metadata.name", kNs}}}}}}})}};
    CommandResult result = cluster_->Apply(config);
    EXPECT_TRUE(result.ok()) << result.err;
    return result;
  }

  static json Claim(const std::string& name, const std::string& version, json configs) {
    return {{"apiVersion", "resource.k8s.io/" + version},
            {"kind", "ResourceClaim"},
            {"metadata", {{"name", name}, {"namespace", kNs}}},
            {"spec", ClaimSpec(version, std::move(configs))}};
  }
  static json Template(const std::string& name, const std::string& version, json configs) {
    return {{"apiVersion", "resource.k8s.io/" + version},
            {"kind", "ResourceClaimTemplate"},
            {"metadata", {{"name", name}, {"namespace", kNs}}},
            {"spec", {{"spec", ClaimSpec(version, std::move(configs))}}}};
  }

  static CommandResult Create(const json& object, bool dry_run = false) {
    std::vector<std::string> args = {"create", "-f", "-"};
    if (dry_run) args.push_back("--dry-run=server");
    return cluster_->Kubectl(args, object.dump());
  }

  static json InvalidGpuConfigs() {
    return json::array({Opaque("gpu.nvidia.com", Params("GpuConfig", {{"sharing", {{"strategy", "Sometimes"}}}}))});
  }

  static bool WaitUntilDenied() {
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (std::chrono::steady_clock::now() < deadline) {
      CommandResult result = Create(Claim("probe", "v1", InvalidGpuConfigs()), /*dry_run=*/true);
      if (!result.ok() && result.err.find("denied the request") != std::string::npos) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }

  // Expects `object` to be rejected by our webhook with `field` in the message.
  static void ExpectDenied(const json& object, const std::string& field) {
    CommandResult result = Create(object);
    ASSERT_FALSE(result.ok()) << object.dump();
    EXPECT_NE(result.err.find(std::string("admission webhook \"") + kWebhookName + "\" denied the request"),
              std::string::npos)
        << result.err;
    EXPECT_NE(result.err.find(field), std::string::npos) << "want " << field << " in: " << result.err;
  }

  static void ExpectAdmitted(const json& object) {
    CommandResult result = Create(object);
    EXPECT_TRUE(result.ok()) << object.dump() << "\n" << result.err;
  }

  static std::string Metrics() {
    httplib::Client client("127.0.0.1", metrics_port_);
    auto response = client.Get("/metrics");
    return response ? response->body : "";
  }

  static inline TestCluster* cluster_ = nullptr;
  static inline fs::path* dir_ = nullptr;
  static inline common::ChildProcess* webhook_ = nullptr;
  static inline int port_ = 0;
  static inline int metrics_port_ = 0;
};

TEST_F(WebhookClusterTest, AdmitsValidConfigsOfBothDriversAndLeavesOtherDriversAlone) {
  ExpectAdmitted(Claim("valid-gpu", "v1", json::array({Opaque("gpu.nvidia.com", Params("GpuConfig")),
                                                       Opaque("gpu.nvidia.com", Params("MigDeviceConfig"))})));
  ExpectAdmitted(Template("valid-channel", "v1",
                          json::array({Opaque("compute-domain.nvidia.com",
                                              Params("ComputeDomainChannelConfig",
                                                     {{"domainID", "1f0c2a4e-3b5d-4c6e-8f70-9a1b2c3d4e5f"}, {"allocationMode", "Single"}}))})));
  // Another driver's parameters are its business, however odd they look to us.
  ExpectAdmitted(Claim("other-driver", "v1",
                       json::array({Opaque("gpu.example.com", json{{"kind", "GpuConfig"}, {"sharing", 42}})})));
  ExpectAdmitted(Claim("no-config", "v1", json::array()));
}

TEST_F(WebhookClusterTest, RejectsEachKindOfInvalidConfigNamingTheField) {
  struct Case {
    std::string name;
    json config;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"unknown-field", Opaque("gpu.nvidia.com", Params("GpuConfig", {{"sharng", json::object()}})),
       "spec.devices.config[0].opaque.parameters.sharng: unknown field"},
      {"wrong-type", Opaque("gpu.nvidia.com", Params("GpuConfig", {{"sharing", {{"strategy", 1}}}})),
       "spec.devices.config[0].opaque.parameters.sharing.strategy: must be a string"},
      {"api-version",
       Opaque("gpu.nvidia.com", json{{"apiVersion", "resource.nvidia.com/v1"}, {"kind", "GpuConfig"}}),
       "spec.devices.config[0].opaque.parameters.apiVersion: \"resource.nvidia.com/v1\" is not supported"},
      {"unknown-kind", Opaque("gpu.nvidia.com", Params("TpuConfig")),
       "spec.devices.config[0].opaque.parameters.kind: unknown kind"},
      {"unknown-strategy", Opaque("gpu.nvidia.com", Params("GpuConfig", {{"sharing", {{"strategy", "Often"}}}})),
       "spec.devices.config[0].opaque.parameters.sharing.strategy: unknown strategy"},
      {"gated-sharing", Opaque("gpu.nvidia.com", Params("MigDeviceConfig", {{"sharing", {{"strategy", "MPS"}}}})),
       "spec.devices.config[0].opaque.parameters.sharing.strategy: MPS needs the feature gate MPSSupport"},
      {"domain-id-not-a-uid",
       Opaque("compute-domain.nvidia.com", Params("ComputeDomainChannelConfig", {{"domainID", "../../etc"}})),
       "spec.devices.config[0].opaque.parameters.domainID: \"../../etc\" is not a UID"},
      {"passthrough", Opaque("gpu.nvidia.com", Params("VfioDeviceConfig")),
       "spec.devices.config[0].opaque.parameters: VfioDeviceConfig needs the feature gate PassthroughSupport"},
      {"channel-without-domain", Opaque("compute-domain.nvidia.com", Params("ComputeDomainChannelConfig")),
       "spec.devices.config[0].opaque.parameters.domainID: must be set"},
      {"channel-bad-mode",
       Opaque("compute-domain.nvidia.com",
              Params("ComputeDomainChannelConfig", {{"domainID", "1f0c2a4e-3b5d-4c6e-8f70-9a1b2c3d4e5f"}, {"allocationMode", "Some"}})),
       "spec.devices.config[0].opaque.parameters.allocationMode: \"Some\" is not one of Single, All"},
      {"kind-for-other-driver", Opaque("compute-domain.nvidia.com", Params("GpuConfig")),
       "spec.devices.config[0].opaque.parameters.kind: GpuConfig is not a configuration of driver "
       "compute-domain.nvidia.com"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ExpectDenied(Claim("invalid-" + c.name, "v1", json::array({c.config})), c.field);
    EXPECT_FALSE(cluster_->Get({"resourceclaim", "-n", kNs, "invalid-" + c.name}).has_value());
  }
  ExpectDenied(Template("invalid-template", "v1",
                        json::array({Opaque("gpu.nvidia.com", Params("GpuConfig")),
                                     Opaque("gpu.nvidia.com", Params("GpuConfig", {{"bogus", true}}))})),
               "1 configs failed to validate: spec.spec.devices.config[1].opaque.parameters.bogus: unknown field");
}

// Seed 002's example claim parameters, as written, through the API server:
// admitted, and kubectl shows the webhook's warning that its partitionIDs do
// nothing under Auto; a bad partitionSize is denied naming the field.
TEST_F(WebhookClusterTest, AdmitsTheSeedsFabricTopologyExampleWithAWarning) {
  const json example = Params("GpuConfig", json::parse(R"({"sharing": {"strategy": "TimeSlicing"},
      "fabricTopologyConfig": {"strategy": "Auto", "partitionSize": 4, "virtualizationModel": "BareMetal",
                               "minBandwidth": 600.0, "maxLatency": 0.1, "partitionIDs": ["partition-1"]}})"));
  // TimeSlicing is gated separately (off here): the fabric part alone.
  json fabric_only = example;
  fabric_only.erase("sharing");
  CommandResult result = Create(Claim("seed-fabric", "v1", json::array({Opaque("gpu.nvidia.com", fabric_only)})));
  ASSERT_TRUE(result.ok()) << result.err;
  EXPECT_NE(result.err.find("Warning: spec.devices.config[0].opaque.parameters.fabricTopologyConfig.partitionIDs: "
                            "ignored with strategy Auto"),
            std::string::npos)
      << result.err;
  ExpectDenied(Claim("seed-sharing", "v1", json::array({Opaque("gpu.nvidia.com", example)})),
               "sharing.strategy: TimeSlicing needs the feature gate TimeSlicingSettings");
  json three = fabric_only;
  three["fabricTopologyConfig"]["partitionSize"] = 3;
  ExpectDenied(Claim("fabric-three", "v1", json::array({Opaque("gpu.nvidia.com", three)})),
               "spec.devices.config[0].opaque.parameters.fabricTopologyConfig.partitionSize: 3 GPUs is not a "
               "partition size; use 2, 4 or 8");
}

TEST_F(WebhookClusterTest, JudgesOlderApiVersionsToo) {
  for (const std::string version : {"v1beta1", "v1beta2"}) {
    SCOPED_TRACE(version);
    ExpectDenied(Claim("old-invalid-" + version, version, InvalidGpuConfigs()),
                 "spec.devices.config[0].opaque.parameters.sharing.strategy: unknown strategy");
    ExpectDenied(Template("old-invalid-template-" + version, version, InvalidGpuConfigs()),
                 "spec.spec.devices.config[0].opaque.parameters.sharing.strategy");
    ExpectAdmitted(Claim("old-valid-" + version, version,
                         json::array({Opaque("gpu.nvidia.com", Params("GpuConfig"))})));
  }
}

TEST_F(WebhookClusterTest, UpdatesOfAnAdmittedClaimAreAllowed) {
  ExpectAdmitted(Claim("labelled", "v1", json::array({Opaque("gpu.nvidia.com", Params("GpuConfig"))})));
  CommandResult label = cluster_->Kubectl({"label", "resourceclaim", "-n", kNs, "labelled", "team=a"});
  EXPECT_TRUE(label.ok()) << label.err;
}

TEST_F(WebhookClusterTest, ServesARotatedCertificateWithoutRestart) {
  const pid_t pid = webhook_->pid();
  ASSERT_EQ(MakePki(*dir_, "ca-b"), "");
  // Rotation as an operator does it: first trust both CAs, then swap the
  // serving files (a rename each, as a Secret update or cert-manager does),
  // then drop the old CA.
  ASSERT_TRUE(ApplyWebhookConfiguration(ReadFile(*dir_ / "ca-a" / "ca.crt") + ReadFile(*dir_ / "ca-b" / "ca.crt"))
                  .ok());
  for (const char* file : {"tls.key", "tls.crt"}) {
    fs::copy_file(*dir_ / "ca-b" / file, *dir_ / "serving" / (std::string(file) + ".new"));
    fs::rename(*dir_ / "serving" / (std::string(file) + ".new"), *dir_ / "serving" / file);
  }
  ASSERT_TRUE(WaitForReadyz(*dir_ / "ca-b" / "ca.crt")) << "the new certificate is not served";
  EXPECT_NE(Metrics().find("nvdra_webhook_certificate_reloads_total{result=\"success\"} 1"), std::string::npos)
      << Metrics();
  ASSERT_TRUE(ApplyWebhookConfiguration(ReadFile(*dir_ / "ca-b" / "ca.crt")).ok());

  ExpectDenied(Claim("after-rotation-invalid", "v1", InvalidGpuConfigs()),
               "spec.devices.config[0].opaque.parameters.sharing.strategy");
  ExpectAdmitted(Claim("after-rotation-valid", "v1", json::array({Opaque("gpu.nvidia.com", Params("GpuConfig"))})));
  EXPECT_EQ(webhook_->pid(), pid);
  EXPECT_FALSE(webhook_->TryWait().has_value()) << "the webhook exited";
}

// /proc/<pid>/status field `key` in KiB (VmRSS, VmHWM); -1 when unreadable.
long ProcStatusKiB(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stol(line.substr(key.size() + 1));
  }
  return -1;
}

// Hostile bodies straight to the webhook's port (any pod can reach it):
// 16 clients at a time, four rounds of a 3.9 MB review of 7,800 bad configs,
// 99,000 tiny values, 300,000 values (refused before parsing) and a body
// over the 4 MiB cap (413). The process's peak stays under the chart's
// memory request (values.yaml webhook...resources.requests.memory, 64Mi),
// its RSS goes back below half of it, and /readyz answers throughout.
TEST_F(WebhookClusterTest, HoldsItsMemoryUnderTheChartRequestUnderLargeHostileBodies) {
  constexpr long kChartRequestKiB = 64 * 1024;
  const std::string head =
      R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"group":"resource.k8s.io","version":"v1","kind":"ResourceClaim"},"resource":{"group":"resource.k8s.io","version":"v1","resource":"resourceclaims"},"operation":"CREATE","object":{"spec":{"devices":{"config":[)";
  const std::string tail = "]}}}}}";
  const auto repeat = [](const std::string& item, std::size_t n) {
    std::string out;
    out.reserve((item.size() + 1) * n);
    for (std::size_t i = 0; i < n; ++i) out += (i == 0 ? "" : ",") + item;
    return out;
  };
  const std::string bad_config =
      R"({"opaque":{"driver":"gpu.nvidia.com","parameters":{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","x":")" +
      std::string(380, 'y') + R"("}}})";
  const std::string tiny = R"({"opaque":{"driver":"gpu.nvidia.com","parameters":{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","x":[)" +
                           repeat("1", 99'000) + "]}}}";
  struct Body {
    std::string text;
    int status;
  };
  const std::vector<Body> bodies = {
      {head + repeat(bad_config, 7'800) + tail, 200},                    // denied in the AdmissionReview
      {head + tiny + tail, 200},                                         // 99,000 values: parsed, denied
      {head + repeat(R"({"opaque":{"x":[1,2,3]}})", 75'000) + tail, 400},  // over 100,000 values
      {head + repeat(bad_config, 11'000) + tail, 413},                   // over the 4 MiB cap
  };
  const pid_t pid = webhook_->pid();
  const long idle_kib = ProcStatusKiB(pid, "VmRSS");
  ASSERT_GT(idle_kib, 0);
  for (int round = 0; round < 4; ++round) {
    for (const Body& body : bodies) {
      std::vector<std::thread> clients;
      std::atomic<int> wrong{0};
      for (int i = 0; i < 16; ++i) {
        clients.emplace_back([&] {
          httplib::SSLClient client("127.0.0.1", port_);
          client.enable_server_certificate_verification(false);
          client.set_read_timeout(60s);
          client.set_write_timeout(60s);
          auto response = client.Post(std::string("/validate-resource-claim-parameters"), body.text, "application/json");
          if (!response || response->status != body.status) ++wrong;
        });
      }
      for (std::thread& client : clients) client.join();
      EXPECT_EQ(wrong.load(), 0) << "answers other than " << body.status << " to a " << body.text.size()
                                 << "-byte body";
    }
    httplib::SSLClient probe("127.0.0.1", port_);
    probe.enable_server_certificate_verification(false);
    auto ready = probe.Get("/readyz");
    EXPECT_TRUE(ready && ready->status == 200) << "round " << round;
  }
  const long peak_kib = ProcStatusKiB(pid, "VmHWM");
  const long after_kib = ProcStatusKiB(pid, "VmRSS");
  std::printf("webhook memory: idle VmRSS %ld KiB, peak VmHWM %ld KiB, after VmRSS %ld KiB\n", idle_kib, peak_kib,
              after_kib);
  EXPECT_LT(peak_kib, kChartRequestKiB) << "the peak must fit the chart's memory request";
  // Freed heap goes back to the kernel; the stack pages the serving threads
  // touched stay (up to ~50 KiB each).
  EXPECT_LT(after_kib, kChartRequestKiB / 2) << "memory freed after the load goes back to the kernel";
}

// A TCP connection to 127.0.0.1:`port` that sends nothing (an idle client),
// or -1.
int IdleConnection(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// 100 idle connections and 50 that send a TLS ClientHello a byte a second
// (any pod can reach the port): /readyz still answers at once, and the API
// server's admission calls still get their answer.
TEST_F(WebhookClusterTest, KeepsServingUnderManyIdleAndSlowConnections) {
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) {
    const int fd = IdleConnection(port_);
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> slow;
  for (int i = 0; i < 50; ++i) {
    slow.emplace_back([&] {
      const int fd = IdleConnection(port_);
      const unsigned char hello[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03};
      for (unsigned char byte : hello) {
        if (fd < 0 || stop.load() || ::send(fd, &byte, 1, MSG_NOSIGNAL) != 1) break;
        std::this_thread::sleep_for(1s);  // the slow client's pace, not a wait for the server
      }
      if (fd >= 0) ::close(fd);
    });
  }
  const auto started = std::chrono::steady_clock::now();
  httplib::SSLClient probe("127.0.0.1", port_);
  probe.enable_server_certificate_verification(false);
  probe.set_connection_timeout(5s);
  probe.set_read_timeout(5s);
  auto ready = probe.Get("/readyz");
  const auto waited = std::chrono::steady_clock::now() - started;
  EXPECT_TRUE(ready && ready->status == 200) << "no /readyz answer within 5 s";
  std::printf("/readyz under 150 idle and slow connections: %.1f ms\n",
              std::chrono::duration<double, std::milli>(waited).count());
  // The admission path: a bad config is still denied.
  CommandResult denied = Create(Claim("under-load", "v1", InvalidGpuConfigs()), /*dry_run=*/true);
  EXPECT_NE(denied.err.find("denied the request"), std::string::npos) << denied.err;
  stop = true;
  for (std::thread& t : slow) t.join();
  for (int fd : idle) ::close(fd);
}

// Last in the file (gtest runs tests in order): stops the webhook.
TEST_F(WebhookClusterTest, ZzzExitsCleanlyOnSigterm) {
  const std::string metrics = Metrics();
  SaveMetricsScrape("webhook", metrics);
  EXPECT_NE(metrics.find("nvdra_webhook_admission_requests_total{resource=\"resourceclaims\",result=\"denied\"}"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("nvdra_webhook_admission_requests_total{resource=\"resourceclaims\",result=\"allowed\"}"),
            std::string::npos);
  ASSERT_TRUE(webhook_->Signal(SIGTERM).ok());
  std::optional<common::ExitInfo> exit = webhook_->WaitUntil(std::chrono::steady_clock::now() + 30s);
  ASSERT_TRUE(exit.has_value()) << "still running 30 s after SIGTERM";
  EXPECT_TRUE(exit->success()) << exit->ToString();
}

}  // namespace
}  // namespace nvdra::testing
