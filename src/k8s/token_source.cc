#include "k8s/token_source.h"

#include <cerrno>
#include <fstream>
#include <sstream>
#include <system_error>

#include "common/log.h"

namespace nvdra::k8s {
namespace {

using common::StatusOr;

std::string Trim(std::string s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

StatusOr<std::string> ReadToken(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return common::ErrnoToStatus(errno != 0 ? errno : ENOENT, "token file " + path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  std::string token = Trim(ss.str());
  if (token.empty()) return common::FailedPreconditionError("token file " + path.string() + ": empty");
  return token;
}

}  // namespace

FileTokenSource::FileTokenSource(std::filesystem::path path, const workqueue::Clock& clock,
                                 std::chrono::nanoseconds max_age)
    : path_(std::move(path)), clock_(clock), max_age_(max_age) {}

StatusOr<std::string> FileTokenSource::Token() {
  std::error_code ec;
  const auto mtime = std::filesystem::last_write_time(path_, ec);  // follows the ..data symlink
  common::MutexLock lock(mutex_);
  const auto now = clock_.Now();
  const bool fresh = have_token_ && !ec && mtime == mtime_ && now - read_at_ < max_age_;
  if (fresh) return token_;
  auto token = ReadToken(path_);
  if (!token.ok()) {
    if (!have_token_) return token.status();
    // Keep serving the old token: it outlives the rotation by a wide margin.
    LOG_WARNING("token re-read failed, keeping the previous token",
                {{"file", path_}, {"err", token.status()}});
    read_at_ = now;
    return token_;
  }
  if (have_token_ && *token != token_) LOG_INFO(4, "token rotated", {{"file", path_}});
  token_ = *std::move(token);
  mtime_ = ec ? std::filesystem::file_time_type{} : mtime;
  read_at_ = now;
  have_token_ = true;
  return token_;
}

}  // namespace nvdra::k8s
