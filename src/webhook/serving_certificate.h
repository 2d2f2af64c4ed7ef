#pragma once

// ServingCertificate: the webhook's TLS certificate chain and private key,
// read from PEM files and re-read when those files change, so a rotated
// certificate (cert-manager renewal, a Secret update, which the kubelet
// applies by swapping the volume's `..data` symlink) is served without a
// restart.
//
// Changes are noticed through inotify on the files' directories, not by
// polling. A reload takes effect only when both files parse and the key
// matches the certificate; a half-written pair (certificate replaced, key not
// yet) keeps the previous pair in service until the next change completes it.
// Each TLS handshake takes the pair current at that moment (OpenSSL's
// certificate callback), so connections in progress are not disturbed.
//
// Ownership: owns the loaded pair (shared with handshakes in flight), the
// inotify descriptor and the watcher thread, joined on destruction. Borrows
// the metrics registry, which must outlive it. Must outlive every SSL_CTX it
// was attached to. Thread-safety: thread-safe.

#include <openssl/ssl.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "common/metrics.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/unique_fd.h"

namespace nvdra::webhook {

class ServingCertificate {
 public:
  // Reads `cert_file` (PEM: the serving certificate first, then any
  // intermediates) and `key_file` (PEM private key) and starts watching them.
  // kInvalidArgument naming the file and the problem (unreadable, no
  // certificate, key does not match); errno-mapped codes if the watch cannot
  // be set up.
  static common::StatusOr<std::unique_ptr<ServingCertificate>> Start(std::filesystem::path cert_file,
                                                                      std::filesystem::path key_file,
                                                                      common::MetricsRegistry& registry);
  ~ServingCertificate();
  ServingCertificate(const ServingCertificate&) = delete;
  ServingCertificate& operator=(const ServingCertificate&) = delete;

  // Makes every handshake on `ctx` serve the current pair, and sets the
  // context's policy (TLS 1.2 minimum). `ctx` must not outlive this object.
  void Attach(SSL_CTX& ctx);

  // Re-reads both files now. Files with the same bytes as the pair in
  // service change nothing (OK). On error the previous pair stays in service
  // and the error is returned (the watcher logs it and waits for the next
  // change).
  common::Status Reload() EXCLUDES(mu_);

  // How many pairs have been loaded (1 after Start); grows on each reload
  // that found new contents.
  std::uint64_t generation() const EXCLUDES(mu_);
  // Blocks until generation() > `seen` or `timeout` passes; returns
  // generation(). For tests and for logs.
  std::uint64_t WaitForGenerationAfter(std::uint64_t seen, std::chrono::milliseconds timeout) const EXCLUDES(mu_);
  // Subject and notAfter of the served certificate, for logs.
  std::string Describe() const EXCLUDES(mu_);

  struct Pair;  // the parsed chain and key (serving_certificate.cc)

 private:
  ServingCertificate(std::filesystem::path cert_file, std::filesystem::path key_file,
                     common::MetricsRegistry& registry);
  void Watch(const std::stop_token& stop);
  static int OnHandshake(SSL* ssl, void* self);

  // Constant after construction.
  const std::filesystem::path cert_file_;
  const std::filesystem::path key_file_;
  common::Counter reloads_ok_;
  common::Counter reloads_failed_;
  common::Gauge not_after_;
  common::UniqueFd inotify_fd_;
  common::UniqueFd wake_fd_;  // written by the destructor to stop the watcher

  mutable common::Mutex mu_;  // guards pair_ and generation_
  mutable std::condition_variable changed_;
  std::shared_ptr<const Pair> pair_ GUARDED_BY(mu_);
  std::uint64_t generation_ GUARDED_BY(mu_) = 0;

  // Last: joined before the members it uses are destroyed.
  std::jthread watcher_;
};

}  // namespace nvdra::webhook
