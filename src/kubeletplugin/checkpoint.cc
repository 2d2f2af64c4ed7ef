#include "kubeletplugin/checkpoint.h"

#include <time.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "kubeletplugin/go_json.h"

namespace nvdra::kubeletplugin {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kStarted = "PrepareStarted";
constexpr std::string_view kCompleted = "PrepareCompleted";
constexpr std::string_view kAborted = "PrepareAborted";

// ---- Encoding

// What a V1 claim holds: borrowed from a CheckpointedClaim or a parsed file.
struct V1ClaimRef {
  const Json* status;
  const Json* prepared_devices;
};

bool HasDevices(const Json& prepared_devices) {
  // Go's PreparedDevices is a slice: omitempty drops nil and empty alike.
  return !prepared_devices.is_null() && !(prepared_devices.is_array() && prepared_devices.empty());
}

void AppendDevices(std::string& out, const std::vector<PreparedDeviceGroup>& groups) {
  if (groups.empty()) return;
  out += ",\"preparedDevices\":";
  AppendGoJson(out, EncodePreparedGroups(groups));
}

void AppendStatus(std::string& out, const Json& status) {
  // A Go struct is never "empty" for omitempty: a missing status is {}.
  if (status.is_null()) {
    out += "{}";
  } else {
    AppendGoJson(out, status);
  }
}

void AppendKey(std::string& out, std::string_view key) {
  AppendGoJsonString(out, key);
  out += ':';
}

// CheckpointV1: {"preparedClaims":{...}} or {} when there are none.
std::string EncodeV1(const std::map<std::string, V1ClaimRef>& claims) {
  std::string out = "{";
  if (!claims.empty()) {
    out += "\"preparedClaims\":{";
    bool first = true;
    for (const auto& [uid, claim] : claims) {
      if (!first) out += ',';
      first = false;
      AppendKey(out, uid);
      out += "{\"status\":";
      AppendStatus(out, *claim.status);
      if (HasDevices(*claim.prepared_devices)) {
        out += ",\"preparedDevices\":";
        AppendGoJson(out, *claim.prepared_devices);
      }
      out += '}';
    }
    out += '}';
  }
  out += '}';
  return out;
}

// The bytes checksummed for V1: the Checkpoint without V2, checksum 0.
std::string V1ChecksumInput(std::string_view v1) {
  return fmt::format("{{\"checksum\":0,\"v1\":{}}}", v1);
}

std::string EncodeV2(const Checkpoint& checkpoint, std::uint64_t checksum) {
  std::string out = fmt::format("{{\"checksum\":{}", checksum);
  if (!checkpoint.claims.empty()) {
    out += ",\"preparedClaims\":{";
    bool first = true;
    for (const auto& [uid, claim] : checkpoint.claims) {
      if (!first) out += ',';
      first = false;
      AppendKey(out, uid);
      out += "{\"checkpointState\":";
      AppendGoJsonString(out, ClaimCheckpointStateName(claim.state));
      out += ",\"status\":";
      AppendStatus(out, claim.status);
      AppendDevices(out, claim.prepared_devices);
      if (!claim.name.empty()) {
        out += ",\"name\":";
        AppendGoJsonString(out, claim.name);
      }
      if (!claim.ns.empty()) {
        out += ",\"namespace\":";
        AppendGoJsonString(out, claim.ns);
      }
      if (!claim.aborted_at.empty()) {
        out += ",\"abortedAt\":";
        AppendGoJsonString(out, claim.aborted_at);
      }
      out += '}';
    }
    out += '}';
  }
  if (!checkpoint.node_boot_id.empty()) {
    out += ",\"nodeBootID\":";
    AppendGoJsonString(out, checkpoint.node_boot_id);
  }
  out += '}';
  return out;
}

// ---- Raw member extents, for checksums over the file's own bytes

std::size_t SkipSpace(std::string_view s, std::size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return i;
}

// End of the JSON value starting at s[i]. `s` has parsed as JSON already, so
// only strings (which may hold brackets) need care.
std::size_t SkipValue(std::string_view s, std::size_t i) {
  int depth = 0;
  do {
    if (i >= s.size()) return s.size();
    const char c = s[i];
    if (c == '"') {
      for (++i; i < s.size() && s[i] != '"'; ++i) {
        if (s[i] == '\\') ++i;
      }
      ++i;
    } else if (c == '{' || c == '[') {
      ++depth;
      ++i;
    } else if (c == '}' || c == ']') {
      --depth;
      ++i;
    } else if (depth == 0) {
      while (i < s.size() && std::string_view(",}] \t\r\n").find(s[i]) == std::string_view::npos) {
        ++i;
      }
    } else {
      ++i;
    }
  } while (depth > 0);
  return i;
}

// The raw bytes of top-level member `key` (spelled without escapes), if any.
std::optional<std::string_view> RawMember(std::string_view s, std::string_view key) {
  std::size_t i = SkipSpace(s, 0);
  if (i >= s.size() || s[i] != '{') return std::nullopt;
  i = SkipSpace(s, i + 1);
  while (i < s.size() && s[i] == '"') {
    const std::size_t key_end = SkipValue(s, i);
    const std::string_view raw_key = s.substr(i + 1, key_end - i - 2);
    i = SkipSpace(s, key_end);
    if (i >= s.size() || s[i] != ':') return std::nullopt;
    i = SkipSpace(s, i + 1);
    const std::size_t value_end = SkipValue(s, i);
    if (raw_key == key) return s.substr(i, value_end - i);
    i = SkipSpace(s, value_end);
    if (i < s.size() && s[i] == ',') i = SkipSpace(s, i + 1);
  }
  return std::nullopt;
}

// `raw_v2` with its leading checksum value replaced by 0, when it starts the
// way Go writes it.
std::optional<std::string> ZeroRawV2Checksum(std::string_view raw_v2) {
  constexpr std::string_view kPrefix = "{\"checksum\":";
  if (!raw_v2.starts_with(kPrefix)) return std::nullopt;
  std::size_t end = kPrefix.size();
  while (end < raw_v2.size() && raw_v2[end] >= '0' && raw_v2[end] <= '9') ++end;
  if (end == kPrefix.size()) return std::nullopt;
  return std::string(kPrefix) + "0" + std::string(raw_v2.substr(end));
}

// A short pointer to the first difference between the file and what the
// checksum was computed over, so a corrupted or hand-edited file can be found.
std::string DiffHint(std::string_view file, std::string_view reencoded) {
  const auto [file_it, re_it] = std::mismatch(file.begin(), file.end(), reencoded.begin(),
                                               reencoded.end());
  const auto at = static_cast<std::size_t>(file_it - file.begin());
  if (file_it == file.end() && re_it == reencoded.end()) {
    // Without the original bytes nothing more can be said: either a value
    // or the checksum was changed in place.
    return "the part is in the form the driver writes, so a value or the checksum itself was "
           "changed in place";
  }
  constexpr std::size_t kContext = 40;
  const std::size_t from = at > kContext ? at - kContext : 0;
  auto excerpt = [&](std::string_view s) {
    return std::string(s.substr(std::min(from, s.size()), 2 * kContext));
  };
  return fmt::format("first difference at byte {} of the part: file has ...{}... where the "
                     "re-encoding has ...{}...",
                     at, excerpt(file), excerpt(reencoded));
}

// ---- Decoding

using common::DataLossError;
using common::Status;
using common::StatusOr;

std::string Quoted(std::string_view s) { return GoJson(Json(std::string(s))); }

StatusOr<std::uint64_t> ReadChecksum(const Json& object, std::string_view where) {
  const auto it = object.find("checksum");
  if (it == object.end() || it->is_null()) return std::uint64_t{0};
  if (it->is_number_unsigned()) return it->get<std::uint64_t>();
  if (it->is_number_integer() && it->get<std::int64_t>() >= 0) {
    return static_cast<std::uint64_t>(it->get<std::int64_t>());
  }
  return DataLossError(fmt::format("{}.checksum: want an unsigned integer, have {}", where,
                                   it->dump()));
}

// A string member; absent and null read as "", as Go leaves the field unset.
StatusOr<std::string> ReadString(const Json& object, std::string_view key, std::string_view where) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::string();
  if (!it->is_string()) {
    return DataLossError(fmt::format("{}.{}: want a string, have {}", where, key, it->dump()));
  }
  return it->get<std::string>();
}

// status (an object; absent or null is {}) and preparedDevices (an array or null).
Status ReadClaimBody(const Json& claim, std::string_view where, Json& status, Json& devices) {
  const auto s = claim.find("status");
  if (s != claim.end() && !s->is_null()) {
    if (!s->is_object()) {
      return DataLossError(fmt::format("{}.status: want an object, have {}", where, s->dump()));
    }
    status = *s;
  } else {
    status = Json::object();
  }
  const auto d = claim.find("preparedDevices");
  if (d != claim.end() && !d->is_null()) {
    if (!d->is_array()) {
      return DataLossError(
          fmt::format("{}.preparedDevices: want an array, have {}", where, d->dump()));
    }
    devices = *d;
  } else {
    devices = nullptr;
  }
  return common::OkStatus();
}

// The object member `key` of `parent`, or nullptr when absent or null.
StatusOr<const Json*> ObjectMember(const Json& parent, std::string_view key, std::string_view where) {
  const auto it = parent.find(key);
  if (it == parent.end() || it->is_null()) return static_cast<const Json*>(nullptr);
  if (!it->is_object()) {
    return DataLossError(fmt::format("{}{}: want an object, have {}", where, key,
                                     it->dump().substr(0, 80)));
  }
  return &*it;
}

StatusOr<ClaimCheckpointState> ParseState(std::string_view text, std::string_view where) {
  if (text == kStarted) return ClaimCheckpointState::kPrepareStarted;
  if (text == kCompleted) return ClaimCheckpointState::kPrepareCompleted;
  if (text == kAborted) return ClaimCheckpointState::kPrepareAborted;
  return DataLossError(fmt::format("{}.checkpointState: unknown state {} (want {}, {} or {})",
                                   where, Quoted(text), kStarted, kCompleted, kAborted));
}

// Checks `stored` against the checksum input re-encoded from what was read
// and, failing that, against the same input taken from the file's own bytes
// (when they have the expected shape). On mismatch, the message points at the
// first difference between the file's bytes of the part (`raw_part`) and
// their re-encoding (`reencoded_part`).
struct ChecksumCheck {
  std::string_view which;  // "v1" or "v2"
  std::uint64_t stored;
  std::string canonical_input;
  std::optional<std::string> raw_input;
  std::optional<std::string_view> raw_part;
  std::string reencoded_part;
};

Status VerifyChecksum(const ChecksumCheck& check) {
  const std::uint64_t computed = KubeletChecksum(check.canonical_input);
  if (computed == check.stored) return common::OkStatus();
  if (check.raw_input && KubeletChecksum(*check.raw_input) == check.stored) {
    return common::OkStatus();
  }
  return DataLossError(fmt::format(
      "{} checksum mismatch: stored {}, content gives {} (file corrupted or edited); {}",
      check.which, check.stored, computed,
      check.raw_part ? DiffHint(*check.raw_part, check.reencoded_part)
                     : std::string("the part was not found in the file's bytes")));
}

StatusOr<Checkpoint> Decode(std::string_view bytes) {
  Json root;
  try {
    root = Json::parse(bytes.begin(), bytes.end());
  } catch (const nlohmann::json::exception& e) {
    return DataLossError(fmt::format("not valid JSON: {}", e.what()));
  }
  if (!root.is_object()) {
    return DataLossError(fmt::format("want a JSON object at the top, have {}", root.type_name()));
  }
  ASSIGN_OR_RETURN(const std::uint64_t checksum_v1, ReadChecksum(root, "checkpoint"));
  ASSIGN_OR_RETURN(const Json* v1, ObjectMember(root, "v1", ""));
  ASSIGN_OR_RETURN(const Json* v2, ObjectMember(root, "v2", ""));

  // V1, as written in the file (not re-derived from V2): that is what C1 covers.
  std::map<std::string, std::pair<Json, Json>> v1_claims;
  if (v1 != nullptr) {
    ASSIGN_OR_RETURN(const Json* claims, ObjectMember(*v1, "preparedClaims", "v1."));
    if (claims != nullptr) {
      for (auto it = claims->begin(); it != claims->end(); ++it) {
        const std::string where = fmt::format("v1.preparedClaims[{}]", Quoted(it.key()));
        if (it.value().is_array()) {
          return DataLossError(where + ": a bare array of groups: the compute-domain plugin's "
                                       "25.3-rc2 layout, which is not supported");
        }
        if (!it.value().is_object()) {
          return DataLossError(where + ": want an object, have " + it.value().dump());
        }
        auto& [status, devices] = v1_claims[it.key()];
        RETURN_IF_ERROR(ReadClaimBody(it.value(), where, status, devices));
      }
    }
  }
  std::map<std::string, V1ClaimRef> v1_refs;
  for (const auto& [uid, body] : v1_claims) v1_refs[uid] = {&body.first, &body.second};
  const std::string v1_text = v1 != nullptr ? EncodeV1(v1_refs) : std::string();
  const std::string v1_input = v1 != nullptr ? V1ChecksumInput(v1_text) : "{\"checksum\":0}";
  const std::optional<std::string_view> v1_raw =
      v1 != nullptr ? RawMember(bytes, "v1") : std::optional<std::string_view>();
  RETURN_IF_ERROR(VerifyChecksum(
      {.which = "v1",
       .stored = checksum_v1,
       .canonical_input = v1_input,
       .raw_input = v1_raw ? std::optional<std::string>(V1ChecksumInput(*v1_raw)) : std::nullopt,
       .raw_part = v1_raw ? v1_raw : std::optional<std::string_view>(bytes),
       .reencoded_part = v1 != nullptr ? v1_text : v1_input}));

  Checkpoint checkpoint;
  if (v2 == nullptr) {
    for (auto& [uid, body] : v1_claims) {
      CheckpointedClaim claim;
      claim.state = ClaimCheckpointState::kPrepareCompleted;
      claim.status = std::move(body.first);
      ASSIGN_OR_RETURN(claim.prepared_devices,
                       DecodePreparedGroups(body.second, fmt::format("v1.preparedClaims[{}].preparedDevices",
                                                                     Quoted(uid))));
      checkpoint.claims.emplace(uid, std::move(claim));
    }
    return checkpoint;
  }

  ASSIGN_OR_RETURN(const std::uint64_t checksum_v2, ReadChecksum(*v2, "v2"));
  ASSIGN_OR_RETURN(checkpoint.node_boot_id, ReadString(*v2, "nodeBootID", "v2"));
  ASSIGN_OR_RETURN(const Json* claims, ObjectMember(*v2, "preparedClaims", "v2."));
  if (claims != nullptr) {
    for (auto it = claims->begin(); it != claims->end(); ++it) {
      const std::string where = fmt::format("v2.preparedClaims[{}]", Quoted(it.key()));
      const Json& body = it.value();
      if (!body.is_object()) return DataLossError(where + ": want an object, have " + body.dump());
      CheckpointedClaim claim;
      ASSIGN_OR_RETURN(const std::string state, ReadString(body, "checkpointState", where));
      ASSIGN_OR_RETURN(claim.state, ParseState(state, where));
      Json devices;
      RETURN_IF_ERROR(ReadClaimBody(body, where, claim.status, devices));
      ASSIGN_OR_RETURN(claim.prepared_devices, DecodePreparedGroups(devices, where + ".preparedDevices"));
      ASSIGN_OR_RETURN(claim.name, ReadString(body, "name", where));
      ASSIGN_OR_RETURN(claim.ns, ReadString(body, "namespace", where));
      ASSIGN_OR_RETURN(claim.aborted_at, ReadString(body, "abortedAt", where));
      checkpoint.claims.insert_or_assign(it.key(), std::move(claim));
    }
  }
  const std::optional<std::string_view> v2_raw = RawMember(bytes, "v2");
  RETURN_IF_ERROR(VerifyChecksum(
      {.which = "v2",
       .stored = checksum_v2,
       .canonical_input = EncodeV2(checkpoint, 0),
       .raw_input = v2_raw ? ZeroRawV2Checksum(*v2_raw) : std::nullopt,
       .raw_part = v2_raw,
       .reencoded_part = EncodeV2(checkpoint, checksum_v2)}));
  return checkpoint;
}

}  // namespace

std::string_view ClaimCheckpointStateName(ClaimCheckpointState state) {
  switch (state) {
    case ClaimCheckpointState::kPrepareStarted: return kStarted;
    case ClaimCheckpointState::kPrepareCompleted: return kCompleted;
    case ClaimCheckpointState::kPrepareAborted: return kAborted;
  }
  std::abort();  // not a ClaimCheckpointState: a programmer error
}

std::uint64_t KubeletChecksum(std::string_view json_bytes) {
  std::uint32_t hash = 2166136261u;  // FNV-1a 32 offset basis
  const auto feed = [&hash](std::string_view text) {
    for (const char c : text) {
      hash ^= static_cast<unsigned char>(c);
      hash *= 16777619u;  // FNV-1a 32 prime
    }
  };
  feed("([]uint8)[");
  char digits[4];
  for (std::size_t i = 0; i < json_bytes.size(); ++i) {
    if (i > 0) feed(" ");
    const auto r = std::to_chars(digits, digits + sizeof(digits),
                                 static_cast<unsigned>(static_cast<unsigned char>(json_bytes[i])));
    feed(std::string_view(digits, static_cast<std::size_t>(r.ptr - digits)));
  }
  feed("]");
  return hash;
}

common::StatusOr<Checkpoint> DecodeCheckpoint(std::string_view bytes) {
  auto result = Decode(bytes);
  if (!result.ok()) return std::move(result).status().WithContext("checkpoint");
  return result;
}

std::string EncodeCheckpoint(const Checkpoint& checkpoint) {
  // V1 repeats the completed claims; its encoder works on JSON values.
  std::map<std::string, Json> v1_devices;
  std::map<std::string, V1ClaimRef> v1_claims;
  for (const auto& [uid, claim] : checkpoint.claims) {
    if (claim.state != ClaimCheckpointState::kPrepareCompleted) continue;
    const Json& devices = v1_devices.emplace(uid, EncodePreparedGroups(claim.prepared_devices)).first->second;
    v1_claims.emplace(uid, V1ClaimRef{&claim.status, &devices});
  }
  const std::string v1 = EncodeV1(v1_claims);
  const std::uint64_t checksum_v1 = KubeletChecksum(V1ChecksumInput(v1));
  const std::uint64_t checksum_v2 = KubeletChecksum(EncodeV2(checkpoint, 0));
  return fmt::format("{{\"checksum\":{},\"v1\":{},\"v2\":{}}}", checksum_v1, v1,
                     EncodeV2(checkpoint, checksum_v2));
}

std::string FormatGoTime(std::chrono::system_clock::time_point time) {
  const auto seconds = std::chrono::floor<std::chrono::seconds>(time);
  const std::time_t t = std::chrono::system_clock::to_time_t(seconds);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

common::StatusOr<std::chrono::system_clock::time_point> ParseGoTime(std::string_view text) {
  const auto bad = [&] {
    return common::InvalidArgumentError(
        fmt::format("time {}: want RFC 3339 like 2026-03-14T15:09:26Z", Quoted(text)));
  };
  std::size_t pos = 0;
  // Exactly `width` digits: from_chars alone would also take a sign ("-1").
  auto number = [&](std::size_t width, int& out) {
    if (pos + width > text.size()) return false;
    for (std::size_t i = pos; i < pos + width; ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
    }
    std::from_chars(text.data() + pos, text.data() + pos + width, out);
    pos += width;
    return true;
  };
  auto expect = [&](char c) {
    if (pos >= text.size() || (text[pos] != c && !(c == 'T' && text[pos] == 't'))) return false;
    ++pos;
    return true;
  };
  std::tm tm{};
  int year = 0, month = 0;
  if (!number(4, year) || !expect('-') || !number(2, month) || !expect('-') ||
      !number(2, tm.tm_mday) || !expect('T') || !number(2, tm.tm_hour) || !expect(':') ||
      !number(2, tm.tm_min) || !expect(':') || !number(2, tm.tm_sec)) {
    return bad();
  }
  if (month < 1 || month > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
      tm.tm_min > 59 || tm.tm_sec > 59) {
    return bad();
  }
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  std::chrono::nanoseconds fraction{0};
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    std::int64_t scale = 100'000'000;
    const std::size_t start = pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      fraction += std::chrono::nanoseconds((text[pos] - '0') * scale);
      scale /= 10;
      ++pos;
    }
    if (pos == start) return bad();
  }
  std::chrono::seconds offset{0};
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    const int sign = text[pos] == '-' ? -1 : 1;
    ++pos;
    int hours = 0, minutes = 0;
    if (!number(2, hours) || !expect(':') || !number(2, minutes) || hours > 23 || minutes > 59) {
      return bad();
    }
    offset = std::chrono::seconds(sign * (hours * 3600 + minutes * 60));
  } else {
    return bad();
  }
  if (pos != text.size()) return bad();
  // system_clock counts nanoseconds in 64 bits, about 292 years either side
  // of 1970, while RFC 3339 (and Go, whose zero time is 0001-01-01) reaches
  // years 0 to 9999: converting such a time would overflow. Refused instead;
  // the driver only writes times of now.
  using std::chrono::seconds;
  constexpr seconds kEarliest =
      std::chrono::duration_cast<seconds>(std::chrono::system_clock::duration::min()) + seconds(1);
  constexpr seconds kLatest =
      std::chrono::duration_cast<seconds>(std::chrono::system_clock::duration::max()) - seconds(1);
  const seconds since_epoch = seconds(::timegm(&tm)) - offset;
  if (since_epoch < kEarliest || since_epoch > kLatest) {
    return common::InvalidArgumentError(fmt::format(
        "time {}: out of the range this driver's clock holds (years 1678 to 2262)", Quoted(text)));
  }
  return std::chrono::system_clock::time_point(since_epoch) + fraction;
}

}  // namespace nvdra::kubeletplugin
