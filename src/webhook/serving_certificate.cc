#include "webhook/serving_certificate.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>

#include <cerrno>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"

namespace nvdra::webhook {

using common::Status;
using common::StatusOr;
namespace fs = std::filesystem;

namespace {

struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyFree>;
using BioPtr = std::unique_ptr<BIO, BioFree>;

// The oldest OpenSSL error queued, as text; clears the queue.
std::string OpenSslError() {
  const unsigned long code = ERR_get_error();  // NOLINT(runtime/int): OpenSSL's type
  ERR_clear_error();
  if (code == 0) return "no PEM data found";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

StatusOr<std::string> ReadFile(const fs::path& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return common::InvalidArgumentError(fmt::format("{} {}: cannot be read ({})", what, path.string(),
                                                    std::error_code(errno, std::generic_category()).message()));
  }
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

BioPtr MemoryBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string SubjectOf(X509* cert) {
  char* line = X509_NAME_oneline(X509_get_subject_name(cert), nullptr, 0);
  std::string subject = line != nullptr ? line : "";
  OPENSSL_free(line);
  return subject;
}

}  // namespace

struct ServingCertificate::Pair {
  X509Ptr leaf;
  std::vector<X509Ptr> chain;  // intermediates, in file order
  KeyPtr key;
  std::string subject;
  std::time_t not_after = 0;
  std::string cert_pem;  // the files' bytes, to tell a change from a touch
  std::string key_pem;
};

namespace {

StatusOr<std::shared_ptr<const ServingCertificate::Pair>> LoadPair(const fs::path& cert_file,
                                                                    const fs::path& key_file) {
  ASSIGN_OR_RETURN(std::string cert_pem, ReadFile(cert_file, "--tls-cert-file"));
  ASSIGN_OR_RETURN(std::string key_pem, ReadFile(key_file, "--tls-private-key-file"));
  auto pair = std::make_shared<ServingCertificate::Pair>();
  ERR_clear_error();
  BioPtr cert_bio = MemoryBio(cert_pem);
  pair->leaf.reset(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (!pair->leaf) {
    return common::InvalidArgumentError(fmt::format(
        "--tls-cert-file {}: no PEM certificate ({}); it must hold the serving certificate, then any intermediates",
        cert_file.string(), OpenSslError()));
  }
  while (X509* next = PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr)) pair->chain.emplace_back(next);
  ERR_clear_error();  // the loop ends on "no start line", which is not an error
  BioPtr key_bio = MemoryBio(key_pem);
  pair->key.reset(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (!pair->key) {
    return common::InvalidArgumentError(fmt::format("--tls-private-key-file {}: no PEM private key ({})",
                                                    key_file.string(), OpenSslError()));
  }
  if (X509_check_private_key(pair->leaf.get(), pair->key.get()) != 1) {
    ERR_clear_error();
    return common::InvalidArgumentError(fmt::format(
        "--tls-private-key-file {} does not match the certificate in --tls-cert-file {}; give the key the "
        "certificate was issued for",
        key_file.string(), cert_file.string()));
  }
  pair->subject = SubjectOf(pair->leaf.get());
  pair->cert_pem = std::move(cert_pem);
  pair->key_pem = std::move(key_pem);
  std::tm not_after{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(pair->leaf.get()), &not_after) == 1) pair->not_after = timegm(&not_after);
  return std::shared_ptr<const ServingCertificate::Pair>(std::move(pair));
}

}  // namespace

ServingCertificate::ServingCertificate(fs::path cert_file, fs::path key_file, common::MetricsRegistry& registry)
    : cert_file_(std::move(cert_file)),
      key_file_(std::move(key_file)),
      reloads_ok_(registry
                      .AddCounter("nvdra_webhook_certificate_reloads_total",
                                  "Serving certificate loads after start-up, by result.", {"result"})
                      .WithLabels({"success"})),
      reloads_failed_(registry
                          .AddCounter("nvdra_webhook_certificate_reloads_total",
                                      "Serving certificate loads after start-up, by result.", {"result"})
                          .WithLabels({"failure"})),
      not_after_(registry
                     .AddGauge("nvdra_webhook_certificate_not_after_timestamp_seconds",
                               "Expiry (notAfter) of the serving certificate in use, in Unix seconds.", {})
                     .WithLabels({})) {}

StatusOr<std::unique_ptr<ServingCertificate>> ServingCertificate::Start(fs::path cert_file, fs::path key_file,
                                                                         common::MetricsRegistry& registry) {
  std::unique_ptr<ServingCertificate> self(
      new ServingCertificate(std::move(cert_file), std::move(key_file), registry));
  ASSIGN_OR_RETURN(std::shared_ptr<const Pair> first, LoadPair(self->cert_file_, self->key_file_));
  const std::time_t not_after = first->not_after;
  {
    // No other thread sees `self` yet: the lock only states the rule.
    common::MutexLock lock(self->mu_);
    self->pair_ = std::move(first);
    self->generation_ = 1;
  }
  self->not_after_.Set(static_cast<double>(not_after));

  self->inotify_fd_.Reset(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!self->inotify_fd_) return common::ErrnoToStatus(errno, "inotify_init1");
  self->wake_fd_.Reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!self->wake_fd_) return common::ErrnoToStatus(errno, "eventfd");
  // The directories, not the files: a Secret volume replaces its files by
  // renaming a `..data` symlink beside them, and an editor or `mv` replaces
  // the inode a file watch would be on. Symlink targets' directories too.
  std::set<fs::path> dirs;
  for (const fs::path& file : {self->cert_file_, self->key_file_}) {
    dirs.insert(fs::absolute(file).parent_path());
    std::error_code ec;
    const fs::path real = fs::canonical(file, ec);
    if (!ec) dirs.insert(real.parent_path());
  }
  constexpr std::uint32_t kMask =
      IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF;
  for (const fs::path& dir : dirs) {
    if (inotify_add_watch(self->inotify_fd_.get(), dir.c_str(), kMask) < 0) {
      return common::ErrnoToStatus(errno, fmt::format("watching {} for certificate changes", dir.string()));
    }
  }
  ServingCertificate* raw = self.get();
  self->watcher_ = std::jthread([raw](const std::stop_token& stop) { raw->Watch(stop); });
  return self;
}

ServingCertificate::~ServingCertificate() {
  if (watcher_.joinable()) {
    watcher_.request_stop();
    const std::uint64_t one = 1;
    if (::write(wake_fd_.get(), &one, sizeof(one)) < 0) {
      LOG_ERROR("cannot wake the certificate watcher", {{"err", common::ErrnoToStatus(errno, "write")}});
    }
    watcher_.join();
  }
}

void ServingCertificate::Watch(const std::stop_token& stop) {
  alignas(inotify_event) char events[4096];
  while (!stop.stop_requested()) {
    pollfd fds[2] = {{inotify_fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      LOG_ERROR("certificate watch failed; rotated certificates will not be loaded",
                {{"err", common::ErrnoToStatus(errno, "poll")}});
      return;
    }
    if (stop.stop_requested()) return;
    // Drain the whole burst (a Secret update is several events), then load once.
    while (::read(inotify_fd_.get(), events, sizeof(events)) > 0) {
    }
    if (Status status = Reload(); !status.ok()) {
      LOG_WARNING("certificate files changed but cannot be loaded; still serving the previous certificate",
                  {{"err", status}});
    }
  }
}

Status ServingCertificate::Reload() {
  StatusOr<std::shared_ptr<const Pair>> loaded = LoadPair(cert_file_, key_file_);
  if (!loaded.ok()) {
    reloads_failed_.Inc();
    return loaded.status();
  }
  std::string subject = (*loaded)->subject;
  const std::time_t not_after = (*loaded)->not_after;
  std::uint64_t generation = 0;
  {
    common::MutexLock lock(mu_);
    // Events come for files beside ours and for temporary files before the
    // rename that replaces ours: unchanged bytes are not a new certificate.
    if (pair_->cert_pem == (*loaded)->cert_pem && pair_->key_pem == (*loaded)->key_pem) return common::OkStatus();
    pair_ = *std::move(loaded);
    generation = ++generation_;
  }
  changed_.notify_all();
  reloads_ok_.Inc();
  not_after_.Set(static_cast<double>(not_after));
  LOG_INFO(0, "serving certificate reloaded",
           {{"subject", subject}, {"notAfter", static_cast<std::int64_t>(not_after)},
            {"generation", static_cast<std::int64_t>(generation)}});
  return common::OkStatus();
}

std::uint64_t ServingCertificate::generation() const {
  common::MutexLock lock(mu_);
  return generation_;
}

std::uint64_t ServingCertificate::WaitForGenerationAfter(std::uint64_t seen, std::chrono::milliseconds timeout) const {
  common::MutexLock lock(mu_);
  changed_.wait_for(lock.native(), timeout, [&]() REQUIRES(mu_) { return generation_ > seen; });
  return generation_;
}

std::string ServingCertificate::Describe() const {
  std::shared_ptr<const Pair> pair;
  {
    common::MutexLock lock(mu_);
    pair = pair_;
  }
  return fmt::format("{} (notAfter {})", pair->subject, static_cast<std::int64_t>(pair->not_after));
}

void ServingCertificate::Attach(SSL_CTX& ctx) {
  SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(&ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_cert_cb(&ctx, &ServingCertificate::OnHandshake, this);
}

int ServingCertificate::OnHandshake(SSL* ssl, void* self) {
  auto* certificate = static_cast<ServingCertificate*>(self);
  std::shared_ptr<const Pair> pair;
  {
    common::MutexLock lock(certificate->mu_);
    pair = certificate->pair_;
  }
  // Each call takes its own reference, so the pair may be replaced while
  // this connection still uses it.
  if (SSL_use_certificate(ssl, pair->leaf.get()) != 1 || SSL_use_PrivateKey(ssl, pair->key.get()) != 1 ||
      SSL_clear_chain_certs(ssl) != 1) {
    return 0;
  }
  for (const X509Ptr& cert : pair->chain) {
    if (SSL_add1_chain_cert(ssl, cert.get()) != 1) return 0;
  }
  return 1;
}

}  // namespace nvdra::webhook
