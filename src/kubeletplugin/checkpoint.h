#pragma once

// The plugins' checkpoint.json (<plugins>/<driver>/checkpoint.json): a
// driver-neutral model of it and a codec that reads and writes the file byte
// for byte as the upstream Go driver does, so a node can move from the Go
// driver to ours and back without losing prepared claims.
//
// Defines: ClaimCheckpointState, CheckpointedClaim, Checkpoint,
// DecodeCheckpoint, EncodeCheckpoint, KubeletChecksum, FormatGoTime,
// ParseGoTime.
//
// The file (upstream cmd/*-kubelet-plugin/checkpoint{,v}.go):
//   {"checksum":C1,"v1":{"preparedClaims":{UID:{"status":S,"preparedDevices":P}}},
//    "v2":{"checksum":C2,"preparedClaims":{UID:{"checkpointState":"PrepareCompleted",
//          "status":S,"preparedDevices":P,"name":N,"namespace":NS,"abortedAt":T}},
//          "nodeBootID":B}}
//  - "v1" repeats only the PrepareCompleted claims, so that a driver from
//    before V2 still finds them after a downgrade. "v2" is the truth.
//  - C1 covers {"checksum":0,"v1":...} (the file without "v2"); C2 covers the
//    "v2" object with its own checksum set to 0. Each is the kubelet
//    checkpointmanager checksum (KubeletChecksum).
//  - omitempty: v1/v2 "preparedClaims" (when no claims), "preparedDevices"
//    (null or []), "name", "namespace", "abortedAt", "nodeBootID" (when
//    empty). "status" and "checksum" are always written ("status" as {} when
//    there is none: Go's omitempty has no effect on a struct).
//  - Claims are sorted by UID (Go sorts map keys by bytes).
//
// GPU versus compute-domain plugin: the two Go copies differ only in that the
// CD copy knows the state "PrepareAborted" and the field "abortedAt" (a
// metav1.Time). abortedAt is omitempty, so a checkpoint without aborted claims
// has the same bytes under both types, and one codec serves both plugins; the
// GPU plugin simply never records kPrepareAborted (the Go GPU plugin would drop
// abortedAt when reading and then fail the checksum).
// Not read: the CD plugin's pre-release 25.3-rc2 layout (checkpoint_legacy.go,
// claims as bare arrays of groups); such a file is rejected as kDataLoss.
//
// Byte compatibility of "status" and "preparedDevices": the status is kept as
// the json value it is, key order included, and written back in that order;
// preparedDevices is decoded into the typed groups of prepared_devices.h,
// whose codec writes upstream's struct order.
// The Go driver re-marshals them through its structs when it verifies a
// checksum, so what we write must be what its structs would write: members in
// struct declaration order, Go's omitempty, map keys sorted. A status exactly
// as the API server sent it satisfies this when the server's ResourceClaim
// schema matches the Go driver's vendored one (fields the driver does not
// know would be dropped on its side and fail its check). Files the Go types
// wrote are in test/data/checkpoint/.
//
// Ownership: values. Thread-safety: thread-safe (pure functions).

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "kubeletplugin/prepared_devices.h"

namespace nvdra::kubeletplugin {

enum class ClaimCheckpointState {
  kPrepareStarted,    // "PrepareStarted": work began; may need a rollback
  kPrepareCompleted,  // "PrepareCompleted": devices prepared and recorded
  kPrepareAborted,    // "PrepareAborted": CD plugin only; a stale prepare given up
};

// "PrepareStarted", "PrepareCompleted", "PrepareAborted".
std::string_view ClaimCheckpointStateName(ClaimCheckpointState state);

struct CheckpointedClaim {
  ClaimCheckpointState state = ClaimCheckpointState::kPrepareStarted;
  // The full ResourceClaimStatus as received from the API server (key order
  // kept). null is written as {}.
  nlohmann::ordered_json status;
  // What the plugin prepared (prepared_devices.h); empty when none (then
  // "preparedDevices" is omitted, as Go omits a nil or empty slice).
  std::vector<PreparedDeviceGroup> prepared_devices;
  std::string name;  // JSON "name"; empty for entries written before it existed
  std::string ns;    // JSON "namespace"; likewise
  // JSON "abortedAt": RFC 3339 as Go writes a metav1.Time ("2026-03-14T15:09:26Z",
  // see FormatGoTime); empty unless state is kPrepareAborted.
  std::string aborted_at;

  friend bool operator==(const CheckpointedClaim&, const CheckpointedClaim&) = default;
};

struct Checkpoint {
  std::map<std::string, CheckpointedClaim> claims;  // by claim UID
  std::string node_boot_id;  // JSON "nodeBootID"; empty in files from before it

  friend bool operator==(const Checkpoint&, const Checkpoint&) = default;
};

// Parses and verifies checkpoint.json bytes.
// - Both checksums must match, as upstream checks them: over a re-encoding of
//   what was read. A checksum also counts as matching when it matches the
//   file's own bytes of that part, so that raw-extension spellings Go keeps
//   verbatim but we would normalise (1e21, \u0041) do not fail a file the Go
//   driver accepts.
// - A file with "v1" only (a driver from before V2) yields its claims as
//   kPrepareCompleted, with no name, namespace or boot ID.
// - A file with neither "v1" nor "v2" is an empty checkpoint.
// Errors: kDataLoss for anything unreadable: not JSON, a field of the wrong
// type, an unknown checkpointState, a checksum mismatch (the message names
// which checksum, both values, and the first byte where the file and its
// re-encoding differ). Unknown fields are ignored, as Go ignores them.
common::StatusOr<Checkpoint> DecodeCheckpoint(std::string_view bytes);

// The bytes the Go driver writes for `checkpoint`: "v1" derived from the
// claims, both checksums set. DecodeCheckpoint(EncodeCheckpoint(c)) == c for
// any c whose status is an object.
std::string EncodeCheckpoint(const Checkpoint& checkpoint);

// The kubelet checkpointmanager checksum of `json_bytes`
// (k8s.io/kubernetes/pkg/kubelet/checkpointmanager/checksum.New on a []byte):
// FNV-1a 32 over the text that go-spew writes for the slice with "%#v" under
// k8s.io/utils/dump.ForHash, "([]uint8)[123 34 ...]" (decimal bytes, one
// space apart), widened to uint64.
std::uint64_t KubeletChecksum(std::string_view json_bytes);

// `time` as Go's metav1.Time marshals it: UTC, whole seconds, RFC 3339
// ("2026-03-14T15:09:26Z").
std::string FormatGoTime(std::chrono::system_clock::time_point time);

// Parses RFC 3339 as metav1.Time accepts it ("...Z" or "...+hh:mm", optional
// fractional seconds). kInvalidArgument otherwise, and for times outside what
// system_clock holds (before 1678 or after 2262, Go's zero time included).
common::StatusOr<std::chrono::system_clock::time_point> ParseGoTime(std::string_view text);

}  // namespace nvdra::kubeletplugin
