#pragma once

// Test PKI for the webhook tests: a self-signed CA and a serving certificate
// it signed (EC P-256, SANs localhost and 127.0.0.1), made with OpenSSL's
// API in process. Thread-safety: pure functions.

#include <filesystem>
#include <string>

namespace nvdra::webhook::testing {

struct TestPki {
  std::string ca_pem;    // the CA certificate (what a caBundle holds)
  std::string cert_pem;  // the serving certificate, signed by the CA
  std::string key_pem;   // the serving certificate's private key
};

// A fresh CA (subject CN=`ca_name`) and serving certificate (CN=localhost).
// Aborts on an OpenSSL failure (a broken test environment).
TestPki MakeTestPki(const std::string& ca_name);

// Writes `content` to `path` (replacing it) through a temporary file and a
// rename, as tools that rotate certificates do.
void WriteFileAtomically(const std::filesystem::path& path, const std::string& content);

}  // namespace nvdra::webhook::testing
