#include "webhook/serving_certificate.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "test_certs.h"

namespace nvdra::webhook {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::MakeTestPki;
using testing::TestPki;
using testing::WriteFileAtomically;

// How long a test waits for an inotify event before failing (not a timing
// assertion: the event normally arrives in microseconds).
constexpr auto kEventDeadline = 30s;

class ServingCertificateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("webhook-cert-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void WritePair(const TestPki& pki) {
    WriteFileAtomically(cert(), pki.cert_pem);
    WriteFileAtomically(key(), pki.key_pem);
  }
  fs::path cert() const { return dir_ / "tls.crt"; }
  fs::path key() const { return dir_ / "tls.key"; }

  fs::path dir_;
  common::MetricsRegistry registry_;
};

TEST_F(ServingCertificateTest, MissingOrMismatchedFilesAreClearErrors) {
  auto missing = ServingCertificate::Start(cert(), key(), registry_);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), common::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("--tls-cert-file " + cert().string() + ": cannot be read"),
            std::string::npos)
      << missing.status().message();

  const TestPki a = MakeTestPki("ca-a");
  const TestPki b = MakeTestPki("ca-b");
  WriteFileAtomically(cert(), a.cert_pem);
  WriteFileAtomically(key(), b.key_pem);
  auto mismatched = ServingCertificate::Start(cert(), key(), registry_);
  ASSERT_FALSE(mismatched.ok());
  EXPECT_NE(mismatched.status().message().find("does not match the certificate"), std::string::npos)
      << mismatched.status().message();

  WriteFileAtomically(cert(), "not a certificate");
  WriteFileAtomically(key(), a.key_pem);
  auto garbage = ServingCertificate::Start(cert(), key(), registry_);
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.status().message().find("no PEM certificate"), std::string::npos) << garbage.status().message();
}

TEST_F(ServingCertificateTest, ReloadsWhenBothFilesChangeAndKeepsTheOldPairMeanwhile) {
  WritePair(MakeTestPki("ca-a"));
  auto certificate = ServingCertificate::Start(cert(), key(), registry_);
  ASSERT_TRUE(certificate.ok()) << certificate.status();
  EXPECT_EQ((*certificate)->generation(), 1u);

  // The certificate alone: its key no longer matches, so nothing changes.
  const TestPki b = MakeTestPki("ca-b");
  WriteFileAtomically(cert(), b.cert_pem);
  common::Status half = (*certificate)->Reload();
  EXPECT_FALSE(half.ok());
  EXPECT_EQ((*certificate)->generation(), 1u);

  // The key completes the pair; the watcher loads it.
  WriteFileAtomically(key(), b.key_pem);
  EXPECT_GE((*certificate)->WaitForGenerationAfter(1, kEventDeadline), 2u);
  EXPECT_NE(registry_.Render().find("nvdra_webhook_certificate_reloads_total{result=\"success\"}"),
            std::string::npos);
}

TEST_F(ServingCertificateTest, FollowsASecretVolumeSymlinkSwap) {
  // The kubelet's layout: tls.crt -> ..data/tls.crt, ..data -> ..<timestamp>.
  const fs::path first = dir_ / "..2026_01_01_00_00_00.1";
  const fs::path second = dir_ / "..2026_01_01_00_10_00.2";
  fs::create_directories(first);
  fs::create_directories(second);
  const TestPki a = MakeTestPki("ca-a");
  const TestPki b = MakeTestPki("ca-b");
  WriteFileAtomically(first / "tls.crt", a.cert_pem);
  WriteFileAtomically(first / "tls.key", a.key_pem);
  WriteFileAtomically(second / "tls.crt", b.cert_pem);
  WriteFileAtomically(second / "tls.key", b.key_pem);
  fs::create_directory_symlink(first.filename(), dir_ / "..data");
  fs::create_symlink("..data/tls.crt", cert());
  fs::create_symlink("..data/tls.key", key());

  auto certificate = ServingCertificate::Start(cert(), key(), registry_);
  ASSERT_TRUE(certificate.ok()) << certificate.status();
  const std::string before = (*certificate)->Describe();

  fs::create_directory_symlink(second.filename(), dir_ / "..data_tmp");
  fs::rename(dir_ / "..data_tmp", dir_ / "..data");
  EXPECT_GE((*certificate)->WaitForGenerationAfter(1, kEventDeadline), 2u);
  EXPECT_EQ((*certificate)->Describe(), before);  // same subject; the serial differs (checked over TLS elsewhere)
}

}  // namespace
}  // namespace nvdra::webhook
