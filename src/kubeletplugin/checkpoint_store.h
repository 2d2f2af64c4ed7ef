#pragma once

// CheckpointStore: checkpoint.json on disk (the codec is checkpoint.h).
// Reads and replaces the whole file; writes are atomic (a crash leaves the old
// file or the new one, never a mix) and durable once Store returns.
//
// Ownership: holds only the path. Thread-safety: thread-compatible, and not
// safe across processes by itself: callers serialise read-modify-write cycles
// with the node's cp.lock (node_lock.h), as upstream does, because another
// plugin instance on the node may share the file.

#include <filesystem>
#include <string_view>

#include "common/status.h"
#include "kubeletplugin/checkpoint.h"

namespace nvdra::kubeletplugin {

inline constexpr const char* kCheckpointFileName = "checkpoint.json";

class CheckpointStore {
 public:
  // `path` is the checkpoint file, normally <plugins>/<driver>/checkpoint.json.
  explicit CheckpointStore(std::filesystem::path path);

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

  // The stored checkpoint. A missing file is an empty checkpoint (no claims,
  // no boot ID), not an error. Errors: kDataLoss when the file is unreadable
  // or a checksum fails (DecodeCheckpoint); errno mappings for I/O.
  [[nodiscard]] common::StatusOr<Checkpoint> Load() const;

  // Replaces the file with EncodeCheckpoint(checkpoint): a temporary file in
  // the same directory (created, with the directory, when missing), written,
  // fsynced, renamed over the old one. The directory is not fsynced: a power
  // loss that undoes the rename is a reboot, and LoadForBoot discards the
  // previous boot's checkpoint anyway. On error the temporary file is removed and
  // the old file is untouched. Errors: errno mappings naming the path.
  [[nodiscard]] common::Status Store(const Checkpoint& checkpoint) const;

  // Start-up: Load, then reconcile with the node's current boot ID:
  //  - no file: store and return an empty checkpoint with `current_boot_id`;
  //  - no stored ID (a file from before boot IDs): store `current_boot_id`,
  //    keep the claims;
  //  - the same ID: keep as is (nothing written);
  //  - another ID (the node rebooted, so nothing recorded is prepared any
  //    more): log it, store and return an empty checkpoint with the new ID.
  // `rebooted` (optional) says whether the last case happened. Errors: those
  // of Load and Store; kInvalidArgument for an empty ID.
  [[nodiscard]] common::StatusOr<Checkpoint> LoadForBoot(std::string_view current_boot_id,
                                                         bool* rebooted = nullptr) const;

 private:
  std::filesystem::path path_;
};

// CheckpointStore(path).LoadForBoot(current_boot_id).
common::StatusOr<Checkpoint> LoadForBoot(const std::filesystem::path& path,
                                         std::string_view current_boot_id, bool* rebooted = nullptr);

}  // namespace nvdra::kubeletplugin
