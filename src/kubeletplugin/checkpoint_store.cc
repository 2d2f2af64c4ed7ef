#include "kubeletplugin/checkpoint_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/file_io.h"
#include "common/log.h"
#include "common/unique_fd.h"

namespace nvdra::kubeletplugin {
namespace {

using common::ErrnoToStatus;
using common::Status;
using common::StatusOr;
using common::UniqueFd;

// Removes the temporary file unless the rename committed it.
class TempFileGuard {
 public:
  explicit TempFileGuard(std::filesystem::path path) : path_(std::move(path)) {}
  ~TempFileGuard() {
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  void Commit() { committed_ = true; }

 private:
  std::filesystem::path path_;
  bool committed_ = false;
};

}  // namespace

CheckpointStore::CheckpointStore(std::filesystem::path path) : path_(std::move(path)) {}

StatusOr<Checkpoint> CheckpointStore::Load() const {
  auto data = common::ReadWholeFile(path_);
  if (!data.ok()) {
    if (data.status().code() == common::StatusCode::kNotFound) return Checkpoint{};
    return data.status();
  }
  auto checkpoint = DecodeCheckpoint(*data);
  if (!checkpoint.ok()) {
    return common::Status(
        checkpoint.status().code(),
        fmt::format("{}: {}; to recover, move the file aside (mv {} {}.bad) and restart the plugin: it starts with "
                    "no prepared claims, running pods keep their devices, and their claims are cleaned up when the "
                    "kubelet unprepares them (docs/troubleshooting.md)",
                    path_.string(), checkpoint.status().message(), path_.string(), path_.filename().string()));
  }
  return checkpoint;
}

Status CheckpointStore::Store(const Checkpoint& checkpoint) const {
  const std::string data = EncodeCheckpoint(checkpoint);
  const std::filesystem::path dir = path_.has_parent_path() ? path_.parent_path() : ".";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ErrnoToStatus(ec.value(), "create directory " + dir.string());

  // A leading dot, as the kubelet's file store names its temporary files, so
  // listings of checkpoint keys (upstream's ListCheckpoints) skip leftovers.
  std::string tmp_name = (dir / ("." + path_.filename().string() + ".tmp-XXXXXX")).string();
  std::vector<char> tmp_buf(tmp_name.begin(), tmp_name.end());
  tmp_buf.push_back('\0');
  UniqueFd fd(::mkostemp(tmp_buf.data(), O_CLOEXEC));
  if (!fd) return ErrnoToStatus(errno, "create temporary file in " + dir.string());
  const std::filesystem::path tmp_path(tmp_buf.data());
  TempFileGuard guard(tmp_path);

  RETURN_IF_ERROR(common::WriteAll(fd.get(), data, tmp_path.string()));
  // fsync before rename: otherwise a crash can leave the new name pointing at
  // a file whose data never reached the disk.
  if (::fsync(fd.get()) != 0) return ErrnoToStatus(errno, "fsync " + tmp_path.string());
  if (::close(fd.Release()) != 0) return ErrnoToStatus(errno, "close " + tmp_path.string());
  if (::rename(tmp_path.c_str(), path_.c_str()) != 0) {
    return ErrnoToStatus(errno, "rename " + tmp_path.string() + " to " + path_.string());
  }
  guard.Commit();
  // No fsync of the directory: a power loss may bring back the previous
  // file, but every way to lose the rename (power loss, kernel crash) also
  // reboots the node, and a checkpoint of another boot is discarded at start
  // (LoadForBoot). The file's own fsync above stays: whichever version
  // survives must be whole, so that its boot id can be read. This halves the
  // fsyncs of a prepare, which dominate its latency.
  return common::OkStatus();
}

StatusOr<Checkpoint> CheckpointStore::LoadForBoot(std::string_view current_boot_id, bool* rebooted) const {
  if (rebooted != nullptr) *rebooted = false;
  if (current_boot_id.empty()) {
    return common::InvalidArgumentError("LoadForBoot: empty current boot id");
  }
  std::error_code ec;
  const bool existed = std::filesystem::exists(path_, ec);
  ASSIGN_OR_RETURN(Checkpoint checkpoint, Load());
  if (existed && checkpoint.node_boot_id == current_boot_id) return checkpoint;

  if (existed && checkpoint.node_boot_id.empty()) {
    LOG_INFO(2, "checkpoint has no boot id; recording the current one",
             {{"path", path_}, {"bootID", current_boot_id}, {"claims", checkpoint.claims.size()}});
    checkpoint.node_boot_id = std::string(current_boot_id);
  } else {
    if (existed) {
      if (rebooted != nullptr) *rebooted = true;
      LOG_INFO(0, "node rebooted since the checkpoint was written; discarding its claims",
               {{"path", path_},
                {"storedBootID", checkpoint.node_boot_id},
                {"bootID", current_boot_id},
                {"claims", checkpoint.claims.size()}});
    } else {
      LOG_INFO(2, "no checkpoint; creating an empty one", {{"path", path_}});
    }
    checkpoint = Checkpoint{};
    checkpoint.node_boot_id = std::string(current_boot_id);
  }
  RETURN_IF_ERROR(Store(checkpoint));
  return checkpoint;
}

StatusOr<Checkpoint> LoadForBoot(const std::filesystem::path& path,
                                 std::string_view current_boot_id, bool* rebooted) {
  return CheckpointStore(path).LoadForBoot(current_boot_id, rebooted);
}

}  // namespace nvdra::kubeletplugin
