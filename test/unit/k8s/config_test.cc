// Kubeconfig parsing (every field, merging, errors naming file and field),
// in-cluster config, and the rotating token file.

#include "k8s/config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "k8s/workqueue/clock.h"
#include "k8s/internal/base64.h"
#include "k8s/token_source.h"

namespace nvdra::k8s {
namespace {

namespace fs = std::filesystem;
using common::StatusCode;

class TempDir {
 public:
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "k8s-config-test-XXXXXX").string();
    path_ = ::mkdtemp(templ.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  fs::path Write(const std::string& name, const std::string& content) const {
    fs::path p = path_ / name;
    std::ofstream(p) << content;
    return p;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// "CA-PEM", "CERT-PEM", "KEY-PEM" in base64.
constexpr char kCaB64[] = "Q0EtUEVN";
constexpr char kCertB64[] = "Q0VSVC1QRU0=";
constexpr char kKeyB64[] = "S0VZLVBFTQ==";

TEST(Base64, DecodesPaddedWrappedAndRejectsJunk) {
  EXPECT_EQ(internal::Base64Decode(kCaB64), "CA-PEM");
  EXPECT_EQ(internal::Base64Decode("Q0VS\nVC1Q\r\nRU0="), "CERT-PEM");
  EXPECT_EQ(internal::Base64Decode(""), "");
  EXPECT_FALSE(internal::Base64Decode("Q0E*").has_value());
  EXPECT_FALSE(internal::Base64Decode("Q0E=A").has_value());
  EXPECT_FALSE(internal::Base64Decode("Q").has_value());
}

TEST(Kubeconfig, ReadsEveryFieldOfDataForm) {
  TempDir dir;
  auto file = dir.Write("config", std::string(R"(
apiVersion: v1
kind: Config
current-context: ctx
clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority-data: )") + kCaB64 + R"(
    tls-server-name: kubernetes.default
users:
- name: u1
  user:
    client-certificate-data: )" + kCertB64 + R"(
    client-key-data: )" + kKeyB64 + R"(
contexts:
- name: ctx
  context: {cluster: c1, user: u1, namespace: team-a}
)");
  auto config = LoadKubeconfig({file});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://10.0.0.1:6443");  // trailing slash dropped
  EXPECT_EQ(config->ca_pem, "CA-PEM");
  EXPECT_EQ(config->tls_server_name, "kubernetes.default");
  EXPECT_FALSE(config->insecure_skip_tls_verify);
  EXPECT_EQ(config->client_cert_pem, "CERT-PEM");
  EXPECT_EQ(config->client_key_pem, "KEY-PEM");
  EXPECT_EQ(config->default_namespace, "team-a");
  EXPECT_TRUE(config->bearer_token.empty());
}

TEST(Kubeconfig, ReadsFileFormsRelativeToTheKubeconfig) {
  TempDir dir;
  dir.Write("ca.crt", "CA-FILE");
  dir.Write("client.crt", "CERT-FILE");
  dir.Write("client.key", "KEY-FILE");
  dir.Write("token", "  tok-from-file\n");
  auto file = dir.Write("config", R"(
current-context: a
clusters:
- name: c
  cluster: {server: "https://h:1", certificate-authority: ca.crt, insecure-skip-tls-verify: true}
users:
- name: certs
  user: {client-certificate: client.crt, client-key: client.key}
- name: tf
  user: {tokenFile: token}
- name: tok
  user: {token: static-token}
contexts:
- {name: a, context: {cluster: c, user: certs}}
- {name: b, context: {cluster: c, user: tf}}
- {name: t, context: {cluster: c, user: tok}}
)");
  auto a = LoadKubeconfig({file});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->ca_pem, "CA-FILE");
  EXPECT_TRUE(a->insecure_skip_tls_verify);
  EXPECT_EQ(a->client_cert_pem, "CERT-FILE");
  EXPECT_EQ(a->client_key_pem, "KEY-FILE");
  EXPECT_EQ(a->default_namespace, "default");

  auto b = LoadKubeconfig({file}, "b");  // explicit context beats current-context
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_NE(b->token_source, nullptr);
  EXPECT_EQ(b->token_source->Token().value(), "tok-from-file");

  auto t = LoadKubeconfig({file}, "t");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->bearer_token, "static-token");
}

TEST(Kubeconfig, MergesListFirstWinsAndSkipsMissingFiles) {
  TempDir dir;
  auto first = dir.Write("one", R"(
current-context: from-one
clusters: [{name: shared, cluster: {server: "https://one:1"}}]
contexts: [{name: from-one, context: {cluster: shared, user: u}}]
)");
  auto second = dir.Write("two", R"(
current-context: from-two
clusters:
- {name: shared, cluster: {server: "https://two:2"}}
- {name: only-two, cluster: {server: "https://two-only:2"}}
users: [{name: u, user: {token: from-two}}]
contexts:
- {name: from-two, context: {cluster: only-two, user: u}}
)");
  const std::string list = first.string() + ":" + (dir.path() / "missing").string() + ":" + second.string();
  auto paths = SplitKubeconfigList(list);
  ASSERT_EQ(paths.size(), 3u);
  auto config = LoadKubeconfig(paths);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://one:1");     // first file's cluster and current-context win
  EXPECT_EQ(config->bearer_token, "from-two");    // a user only the second file defines
  auto other = LoadKubeconfig(paths, "from-two");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->server, "https://two-only:2");
}

TEST(Kubeconfig, ErrorsNameTheFileAndField) {
  TempDir dir;
  auto missing = LoadKubeconfig({dir.path() / "nope"});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);

  auto bad_yaml = dir.Write("bad", "clusters: [unclosed\n");
  auto r1 = LoadKubeconfig({bad_yaml});
  EXPECT_EQ(r1.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r1.status().message().find(bad_yaml.string()), std::string::npos);

  auto no_ctx = dir.Write("noctx", "clusters: []\n");
  EXPECT_EQ(LoadKubeconfig({no_ctx}).status().code(), StatusCode::kInvalidArgument);

  auto unknown_cluster = dir.Write("uc", "current-context: x\ncontexts: [{name: x, context: {cluster: gone}}]\n");
  auto r2 = LoadKubeconfig({unknown_cluster});
  EXPECT_EQ(r2.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r2.status().message().find("cluster \"gone\" not found"), std::string::npos) << r2.status();

  auto bad_b64 = dir.Write("b64", R"(
current-context: x
clusters: [{name: c, cluster: {server: "https://h", certificate-authority-data: "!!"}}]
contexts: [{name: x, context: {cluster: c}}]
)");
  auto r3 = LoadKubeconfig({bad_b64});
  EXPECT_EQ(r3.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r3.status().message().find("certificate-authority-data"), std::string::npos) << r3.status();

  auto half_cert = dir.Write("half", std::string(R"(
current-context: x
clusters: [{name: c, cluster: {server: "https://h"}}]
users: [{name: u, user: {client-certificate-data: )") + kCertB64 + R"(}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
)");
  EXPECT_EQ(LoadKubeconfig({half_cert}).status().code(), StatusCode::kInvalidArgument);

  auto missing_ca = dir.Write("mca", R"(
current-context: x
clusters: [{name: c, cluster: {server: "https://h", certificate-authority: /no/such/ca.crt}}]
contexts: [{name: x, context: {cluster: c}}]
)");
  auto r4 = LoadKubeconfig({missing_ca});
  EXPECT_EQ(r4.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r4.status().message().find("/no/such/ca.crt"), std::string::npos) << r4.status();

  auto exec = dir.Write("exec", R"(
current-context: x
clusters: [{name: c, cluster: {server: "https://h"}}]
users: [{name: u, user: {exec: {command: aws}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
)");
  EXPECT_EQ(LoadKubeconfig({exec}).status().code(), StatusCode::kUnimplemented);

  auto no_server = dir.Write("ns", "current-context: x\nclusters: [{name: c, cluster: {}}]\n"
                                   "contexts: [{name: x, context: {cluster: c}}]\n");
  auto r5 = LoadKubeconfig({no_server});
  EXPECT_NE(r5.status().message().find("server: missing"), std::string::npos) << r5.status();
}

TEST(InCluster, BuildsServerAndReadsServiceAccountFiles) {
  TempDir dir;
  dir.Write("token", "sa-token\n");
  dir.Write("ca.crt", "SA-CA");
  dir.Write("namespace", "kube-system\n");
  auto config = LoadInClusterConfig("10.96.0.1", "443", dir.path());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://10.96.0.1:443");
  EXPECT_EQ(config->ca_pem, "SA-CA");
  EXPECT_EQ(config->default_namespace, "kube-system");
  EXPECT_EQ(config->token_source->Token().value(), "sa-token");

  auto v6 = LoadInClusterConfig("fd00::1", "6443", dir.path());
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->server, "https://[fd00::1]:6443");
}

TEST(InCluster, EmptyKubeconfigMeansInClusterAndMissingEnvIsFailedPrecondition) {
  ConfigSources sources;  // kubeconfig "" = in-cluster
  EXPECT_EQ(LoadConfig(sources).status().code(), StatusCode::kFailedPrecondition);
  TempDir dir;
  sources.service_host = "127.0.0.1";
  sources.service_port = "6443";
  sources.service_account_dir = dir.path();
  auto no_ca = LoadConfig(sources);
  EXPECT_EQ(no_ca.status().code(), StatusCode::kNotFound);
  EXPECT_NE(no_ca.status().message().find("ca.crt"), std::string::npos) << no_ca.status();
  dir.Write("ca.crt", "c");
  auto no_token = LoadConfig(sources);
  EXPECT_EQ(no_token.status().code(), StatusCode::kNotFound);
  EXPECT_NE(no_token.status().message().find("token"), std::string::npos) << no_token.status();
  dir.Write("token", "t");
  sources.qps = 50;
  sources.burst = 100;
  auto ok = LoadConfig(sources);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->default_namespace, "default");  // no namespace file
  EXPECT_EQ(ok->qps, 50);
  EXPECT_EQ(ok->burst, 100);
}

TEST(FileTokenSource, RereadsWhenMtimeChangesOrAfterAMinute) {
  TempDir dir;
  auto path = dir.Write("token", "one");
  workqueue::FakeClock clock;
  FileTokenSource source(path, clock);
  EXPECT_EQ(source.Token().value(), "one");

  // Same mtime, within a minute: the cached token.
  const auto mtime = fs::last_write_time(path);
  dir.Write("token", "two");
  fs::last_write_time(path, mtime);
  EXPECT_EQ(source.Token().value(), "one");
  clock.Advance(std::chrono::seconds(61));
  EXPECT_EQ(source.Token().value(), "two");

  // A new mtime (what a kubelet rotation produces): read at once.
  dir.Write("token", "three");
  fs::last_write_time(path, mtime + std::chrono::seconds(5));
  EXPECT_EQ(source.Token().value(), "three");

  // A failed re-read keeps the last good token.
  fs::remove(path);
  clock.Advance(std::chrono::seconds(61));
  EXPECT_EQ(source.Token().value(), "three");
}

TEST(FileTokenSource, FollowsAnAtomicSymlinkSwap) {
  // The kubelet's projected volume: token -> ..data/token, ..data swapped.
  TempDir dir;
  fs::create_directory(dir.path() / "v1");
  fs::create_directory(dir.path() / "v2");
  dir.Write("v1/token", "old");
  dir.Write("v2/token", "new");
  fs::create_directory_symlink("v1", dir.path() / "..data");
  fs::create_symlink("..data/token", dir.path() / "token");
  fs::last_write_time(dir.path() / "v2/token", fs::last_write_time(dir.path() / "v1/token") + std::chrono::seconds(1));
  workqueue::FakeClock clock;
  FileTokenSource source(dir.path() / "token", clock);
  EXPECT_EQ(source.Token().value(), "old");
  fs::create_directory_symlink("v2", dir.path() / "..data_tmp");
  fs::rename(dir.path() / "..data_tmp", dir.path() / "..data");
  EXPECT_EQ(source.Token().value(), "new");
}

}  // namespace
}  // namespace nvdra::k8s
