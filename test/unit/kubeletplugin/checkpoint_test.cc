#include "kubeletplugin/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "kubeletplugin/go_json.h"

namespace nvdra::kubeletplugin {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

const std::filesystem::path kDataDir = std::filesystem::path(NVDRA_TEST_DATA_DIR) / "checkpoint";
constexpr const char* kBootId = "8a3f1c52-6a1e-4c1b-9a52-0d1f3c7e9b21";

std::string ReadFixture(const std::string& name) {
  std::ifstream in(kDataDir / name, std::ios::binary);
  EXPECT_TRUE(in) << "missing fixture " << (kDataDir / name);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Checkpoint DecodeOk(const std::string& bytes) {
  auto decoded = DecodeCheckpoint(bytes);
  EXPECT_TRUE(decoded.ok()) << decoded.status();
  return decoded.ok() ? *decoded : Checkpoint{};
}

// ---- Go's encoding/json spelling

TEST(GoJsonTest, EscapesStringsAsGoDoes) {
  EXPECT_EQ(GoJson(Json("a<b>&c")), R"("a\u003cb\u003e\u0026c")");
  EXPECT_EQ(GoJson(Json("q\"b\\s/")), R"("q\"b\\s/")");
  EXPECT_EQ(GoJson(Json("\b\f\n\r\t\x01\x1f\x7f")), "\"\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\"");
  EXPECT_EQ(GoJson(Json("\u2028\u2029")), R"("\u2028\u2029")");
  EXPECT_EQ(GoJson(Json("é日本😀")), "\"é日本😀\"");
}

TEST(GoJsonTest, InvalidUtf8BecomesReplacementEscapePerByte) {
  std::string out;
  AppendGoJsonString(out, "a\xff" "b\xc3");
  EXPECT_EQ(out, R"("a\ufffdb\ufffd")");
  out.clear();
  AppendGoJsonString(out, "\xed\xa0\x80");  // an encoded surrogate: three bad bytes to Go
  EXPECT_EQ(out, R"("\ufffd\ufffd\ufffd")");
  out.clear();
  AppendGoJsonString(out, "\xc0\xaf");  // overlong '/'
  EXPECT_EQ(out, R"("\ufffd\ufffd")");
}

TEST(GoJsonTest, NumbersAsGoWritesThem) {
  EXPECT_EQ(GoJson(Json::parse("[0,-1,9007199254740993,18446744073709551615,-9223372036854775808]")),
            "[0,-1,9007199254740993,18446744073709551615,-9223372036854775808]");
  EXPECT_EQ(GoJson(Json::parse("[0.5,1e-7,1.5e+300,123456.789,1e21,1e20,1.0,1E2,0.000001]")),
            "[0.5,1e-7,1.5e+300,123456.789,1e+21,100000000000000000000,1,100,0.000001]");
}

TEST(GoJsonTest, KeepsMemberOrderAndIsCompact) {
  EXPECT_EQ(GoJson(Json::parse(R"({ "z": 1, "a": [ true, null ], "m": {} })")),
            R"({"z":1,"a":[true,null],"m":{}})");
}

// ---- The kubelet checksum

TEST(KubeletChecksumTest, MatchesTheKubeletChecksumPackage) {
  // Both values from test/data/checkpoint/gpu-v2-empty.json, which the Go
  // generator wrote with k8s.io/kubernetes/pkg/kubelet/checkpointmanager/checksum.
  EXPECT_EQ(KubeletChecksum(R"({"checksum":0,"v1":{}})"), 1083090442u);
  EXPECT_EQ(KubeletChecksum(std::string(R"({"checksum":0,"nodeBootID":")") + kBootId + "\"}"),
            3843071935u);
}

// ---- Upstream fixtures: decode, then re-encode byte for byte

class FixtureRoundTripTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureRoundTripTest, DecodesAndReencodesByteIdentically) {
  const std::string bytes = ReadFixture(GetParam());
  const Checkpoint decoded = DecodeOk(bytes);
  EXPECT_EQ(EncodeCheckpoint(decoded), bytes);
}

INSTANTIATE_TEST_SUITE_P(Upstream, FixtureRoundTripTest,
                         ::testing::Values("gpu-v2-completed.json", "gpu-v2-prepare-started.json",
                                           "gpu-v2-no-boot-id.json", "gpu-v2-empty.json",
                                           "gpu-v2-html-escaping.json", "cd-v2-aborted.json"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           const std::string& file = param_info.param;
                           std::string name = file.substr(0, file.find('.'));
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

TEST(CheckpointFixtureTest, CompletedClaimsKeepStatusDevicesNameAndNamespace) {
  const Checkpoint cp = DecodeOk(ReadFixture("gpu-v2-completed.json"));
  EXPECT_EQ(cp.node_boot_id, kBootId);
  ASSERT_EQ(cp.claims.size(), 3u);
  const CheckpointedClaim& mig = cp.claims.at("a1b2c3d4-0000-4000-8000-000000000002");
  EXPECT_EQ(mig.state, ClaimCheckpointState::kPrepareCompleted);
  EXPECT_EQ(mig.name, "claim-mig");
  EXPECT_EQ(mig.ns, "team-b");
  EXPECT_TRUE(mig.aborted_at.empty());
  EXPECT_EQ(mig.status["allocation"]["devices"]["results"][0]["device"], "gpu-1-mig-1g10gb-0-0");
  ASSERT_EQ(mig.prepared_devices.size(), 1u);
  ASSERT_EQ(mig.prepared_devices[0].devices.size(), 1u);
  const auto* slice = std::get_if<PreparedMig>(&mig.prepared_devices[0].devices[0].kind);
  ASSERT_NE(slice, nullptr);
  EXPECT_EQ(slice->gi_id, 13);
  EXPECT_EQ(slice->parent_pci_bus_id, "0000:1b:00.0");
  EXPECT_EQ(mig.prepared_devices[0].devices[0].device.device.device_name, "gpu-1-mig-1g10gb-0-0");
  EXPECT_EQ(std::get<GpuConfigState>(mig.prepared_devices[0].config_state).time_slice_applied, true);
  const CheckpointedClaim& vfio = cp.claims.at("a1b2c3d4-0000-4000-8000-000000000003");
  ASSERT_EQ(vfio.prepared_devices.size(), 1u);
  const PreparedDeviceEntry& passthrough = vfio.prepared_devices[0].devices.at(0);
  EXPECT_TRUE(std::holds_alternative<PreparedVfio>(passthrough.kind));
  EXPECT_TRUE(passthrough.device.share_id.has_value());
  EXPECT_TRUE(passthrough.device.metadata.is_object());
  // Status keys stay in the API's (Go struct) order, not sorted.
  EXPECT_EQ(mig.status["allocation"].begin().key(), "devices");
}

TEST(CheckpointFixtureTest, V1OnlyFileUpgradesToPrepareCompleted) {
  const std::string bytes = ReadFixture("gpu-v1-only.json");
  const Checkpoint cp = DecodeOk(bytes);
  EXPECT_TRUE(cp.node_boot_id.empty());
  ASSERT_EQ(cp.claims.size(), 1u);
  const CheckpointedClaim& claim = cp.claims.begin()->second;
  EXPECT_EQ(claim.state, ClaimCheckpointState::kPrepareCompleted);
  EXPECT_TRUE(claim.name.empty());
  EXPECT_TRUE(claim.ns.empty());
  EXPECT_FALSE(claim.prepared_devices.empty());
  // Written back, the file gains "v2" but keeps "checksum" and "v1" byte for
  // byte, so the old driver still reads it after a downgrade.
  const std::string encoded = EncodeCheckpoint(cp);
  const std::string head = bytes.substr(0, bytes.size() - 1);  // without the closing brace
  EXPECT_EQ(encoded.substr(0, head.size()), head);
  EXPECT_THAT(encoded.substr(head.size()), ::testing::StartsWith(",\"v2\":{\"checksum\":"));
  EXPECT_EQ(DecodeOk(encoded), cp);
}

TEST(CheckpointFixtureTest, PrepareStartedIsInV2Only) {
  const Checkpoint cp = DecodeOk(ReadFixture("gpu-v2-prepare-started.json"));
  ASSERT_EQ(cp.claims.size(), 2u);
  const CheckpointedClaim& started = cp.claims.at("a1b2c3d4-0000-4000-8000-000000000004");
  EXPECT_EQ(started.state, ClaimCheckpointState::kPrepareStarted);
  EXPECT_TRUE(started.prepared_devices.empty());
  EXPECT_EQ(started.name, "claim-started");
  const Json file = Json::parse(ReadFixture("gpu-v2-prepare-started.json"));
  EXPECT_EQ(file["v1"]["preparedClaims"].size(), 1u);
  EXPECT_FALSE(file["v1"]["preparedClaims"].contains("a1b2c3d4-0000-4000-8000-000000000004"));
}

TEST(CheckpointFixtureTest, ComputeDomainAbortedClaimCarriesAbortedAt) {
  const Checkpoint cp = DecodeOk(ReadFixture("cd-v2-aborted.json"));
  const CheckpointedClaim& aborted = cp.claims.at("c1000000-0000-4000-8000-0000000000ab");
  EXPECT_EQ(aborted.state, ClaimCheckpointState::kPrepareAborted);
  EXPECT_EQ(aborted.aborted_at, "2026-03-14T15:09:26Z");
  auto when = ParseGoTime(aborted.aborted_at);
  ASSERT_TRUE(when.ok()) << when.status();
  EXPECT_EQ(FormatGoTime(*when), aborted.aborted_at);
  const CheckpointedClaim& channel = cp.claims.at("c1000000-0000-4000-8000-000000000001");
  ASSERT_EQ(channel.prepared_devices.size(), 1u);
  const auto& state = std::get<CdConfigState>(channel.prepared_devices[0].config_state);
  EXPECT_EQ(state.type, "ComputeDomainChannelConfig");  // as the fixture has it
  EXPECT_FALSE(state.compute_domain.empty());
  EXPECT_TRUE(std::holds_alternative<PreparedChannel>(channel.prepared_devices[0].devices.at(0).kind));
}

TEST(CheckpointFixtureTest, EscapedStringsDecodeToTheirText) {
  const Checkpoint cp = DecodeOk(ReadFixture("gpu-v2-html-escaping.json"));
  const CheckpointedClaim& claim = cp.claims.begin()->second;
  const std::string note =
      claim.status["allocation"]["devices"]["config"][0]["opaque"]["parameters"]["note"];
  EXPECT_THAT(note, ::testing::StartsWith("a<b>&c \"q\" back\\slash \u2028ls \u2029ps \x01"));
  EXPECT_EQ(claim.status["devices"][0]["data"]["html"], "<&>");
}

TEST(CheckpointFixtureTest, RawExtensionLiteralsVerifyAgainstTheFileBytes) {
  // Go copies raw-extension literals (1e21, 1.0, \u0041) as written; we
  // normalise them on re-encoding, so the file verifies by its own bytes.
  const std::string bytes = ReadFixture("gpu-v2-raw-literals.json");
  const Checkpoint cp = DecodeOk(bytes);
  const std::string encoded = EncodeCheckpoint(cp);
  EXPECT_NE(encoded, bytes);
  EXPECT_THAT(encoded, HasSubstr(R"("a":1e+21,"b":1,"c":"A/","d":[100,-0,2.5])"));
  EXPECT_EQ(DecodeOk(encoded), cp);
}

// ---- Rejections

TEST(CheckpointDecodeTest, RejectsCorruptedContentNamingTheDifference) {
  const auto decoded = DecodeCheckpoint(ReadFixture("corrupted-content.json"));
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), common::StatusCode::kDataLoss);
  EXPECT_THAT(decoded.status().message(),
              HasSubstr("v1 checksum mismatch: stored 168390733, content gives 1003824439"));
  EXPECT_THAT(decoded.status().message(), HasSubstr("changed in place"));
}

TEST(CheckpointDecodeTest, MismatchInAReformattedFilePointsAtTheFirstDifference) {
  std::string pretty = Json::parse(ReadFixture("gpu-v2-empty.json")).dump(1);
  pretty.replace(pretty.find("8a3f"), 4, "9a3f");
  const auto decoded = DecodeCheckpoint(pretty);
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(), HasSubstr("v2 checksum mismatch"));
  EXPECT_THAT(decoded.status().message(), HasSubstr("first difference at byte 1 of the part"));
}

TEST(CheckpointDecodeTest, RejectsAWrongV2ChecksumAlone) {
  std::string bytes = ReadFixture("gpu-v2-empty.json");
  const auto at = bytes.find("3843071935");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 10, "3843071936");
  const auto decoded = DecodeCheckpoint(bytes);
  ASSERT_FALSE(decoded.ok());
  EXPECT_EQ(decoded.status().code(), common::StatusCode::kDataLoss);
  EXPECT_THAT(decoded.status().message(), HasSubstr("v2 checksum mismatch: stored 3843071936"));
  EXPECT_THAT(decoded.status().message(), HasSubstr("changed in place"));
}

TEST(CheckpointDecodeTest, RejectsMalformedInputWithDataLoss) {
  const std::string good = ReadFixture("gpu-v2-completed.json");
  const std::pair<std::string, std::string> cases[] = {
      {good.substr(0, good.size() / 2), "not valid JSON"},
      {"", "not valid JSON"},
      {"[]", "want a JSON object"},
      {R"({"checksum":-1})", "checksum: want an unsigned integer"},
      {R"({"checksum":0,"v2":[]})", "v2: want an object"},
      {R"({"checksum":0,"v1":{"preparedClaims":{"u":[{"devices":[]}]}}})", "25.3-rc2"},
  };
  for (const auto& [bytes, want] : cases) {
    const auto decoded = DecodeCheckpoint(bytes);
    ASSERT_FALSE(decoded.ok()) << bytes;
    EXPECT_EQ(decoded.status().code(), common::StatusCode::kDataLoss) << bytes;
    EXPECT_THAT(decoded.status().message(), HasSubstr(want)) << bytes;
  }
}

TEST(CheckpointDecodeTest, RejectsAnUnknownStateNamingTheClaim) {
  Checkpoint cp;
  cp.claims["uid-1"].state = ClaimCheckpointState::kPrepareStarted;
  std::string bytes = EncodeCheckpoint(cp);
  const auto at = bytes.find("PrepareStarted");
  bytes.replace(at, 14, "PrepareStartex");
  const auto decoded = DecodeCheckpoint(bytes);
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(),
              HasSubstr(R"(v2.preparedClaims["uid-1"].checkpointState: unknown state "PrepareStartex")"));
}

TEST(CheckpointDecodeTest, NeitherV1NorV2IsAnEmptyCheckpointWhenItsChecksumHolds) {
  // As upstream: the checksum covers {"checksum":0}, so 0 itself is wrong.
  const std::uint64_t sum = KubeletChecksum(R"({"checksum":0})");
  EXPECT_EQ(DecodeOk("{\"checksum\":" + std::to_string(sum) + "}"), Checkpoint{});
  EXPECT_EQ(DecodeCheckpoint(R"({"checksum":0})").status().code(), common::StatusCode::kDataLoss);
}

TEST(CheckpointDecodeTest, ReformattedFileStillVerifiesAsGoWouldByReencoding) {
  // Upstream verifies by re-marshalling what it read, so whitespace does not
  // matter; neither may it here.
  const std::string bytes = ReadFixture("gpu-v2-prepare-started.json");
  const std::string pretty = Json::parse(bytes).dump(2);
  EXPECT_EQ(EncodeCheckpoint(DecodeOk(pretty)), bytes);
}

// ---- Our own writes

Checkpoint SampleCheckpoint() {
  Checkpoint cp;
  cp.node_boot_id = "boot-1";
  CheckpointedClaim& done = cp.claims["uid-b"];
  done.state = ClaimCheckpointState::kPrepareCompleted;
  done.status = Json::parse(R"({"allocation":{"devices":{"results":[{"request":"r","driver":"gpu.nvidia.com","pool":"n","device":"gpu-0"}]}},"reservedFor":[{"resource":"pods","name":"p<1>","uid":"u"}]})");
  done.prepared_devices = {PreparedDeviceGroup{
      .devices = {{.kind = PreparedGpu{.uuid = "GPU-1"},
                   .device = {.device = {.requests = {"r"},
                                         .pool_name = "n",
                                         .device_name = "gpu-0",
                                         .cdi_device_ids = {"k8s.gpu.nvidia.com/claim=uid-b-gpu-0"}},
                              .share_id = std::nullopt,
                              .metadata = nullptr}}},
      .config_state = GpuConfigState{}}};
  done.name = "claim-b";
  done.ns = "ns\u2028";
  CheckpointedClaim& started = cp.claims["uid-a"];
  started.state = ClaimCheckpointState::kPrepareStarted;
  started.status = Json::object();
  started.name = "claim-a";
  CheckpointedClaim& aborted = cp.claims["uid-c"];
  aborted.state = ClaimCheckpointState::kPrepareAborted;
  aborted.status = Json::object();
  aborted.aborted_at = FormatGoTime(std::chrono::system_clock::time_point(
      std::chrono::seconds(1'773'500'966) + std::chrono::milliseconds(250)));
  return cp;
}

TEST(CheckpointEncodeTest, OwnWritesRoundTrip) {
  const Checkpoint cp = SampleCheckpoint();
  const std::string bytes = EncodeCheckpoint(cp);
  EXPECT_EQ(DecodeOk(bytes), cp);
  EXPECT_EQ(EncodeCheckpoint(DecodeOk(bytes)), bytes);
  EXPECT_EQ(cp.claims.at("uid-c").aborted_at, "2026-03-14T15:09:26Z");
}

TEST(CheckpointEncodeTest, LayoutFollowsGoFieldOrderAndOmitempty) {
  const std::string bytes = EncodeCheckpoint(SampleCheckpoint());
  const Json file = Json::parse(bytes);
  std::vector<std::string> top;
  for (auto it = file.begin(); it != file.end(); ++it) top.push_back(it.key());
  EXPECT_THAT(top, ::testing::ElementsAre("checksum", "v1", "v2"));
  // v1 lists only the completed claim; claims are sorted by UID in v2.
  EXPECT_EQ(file["v1"]["preparedClaims"].size(), 1u);
  EXPECT_EQ(file["v2"]["preparedClaims"].begin().key(), "uid-a");
  // PrepareStarted with no devices and no namespace: those keys are omitted,
  // status is still written.
  EXPECT_THAT(bytes, HasSubstr(R"("uid-a":{"checkpointState":"PrepareStarted","status":{},"name":"claim-a"})"));
  EXPECT_THAT(bytes, HasSubstr(R"("name":"p\u003c1\u003e")"));
  EXPECT_THAT(bytes, HasSubstr(R"("namespace":"ns\u2028")"));
  EXPECT_THAT(bytes, HasSubstr(R"("abortedAt":"2026-03-14T15:09:26Z"})"));
}

TEST(CheckpointEncodeTest, NoDevicesAndNullStatusAreWrittenAsGoWould) {
  Checkpoint cp;
  cp.claims["u"].state = ClaimCheckpointState::kPrepareCompleted;
  const std::string bytes = EncodeCheckpoint(cp);
  EXPECT_THAT(bytes, HasSubstr(R"("v1":{"preparedClaims":{"u":{"status":{}}}})"));
  EXPECT_THAT(bytes, HasSubstr(R"("u":{"checkpointState":"PrepareCompleted","status":{}})"));
}

TEST(CheckpointEncodeTest, EmptyCheckpointWithBootIdMatchesTheGoDriverBytes) {
  Checkpoint cp;
  cp.node_boot_id = kBootId;
  EXPECT_EQ(EncodeCheckpoint(cp), ReadFixture("gpu-v2-empty.json"));
}

TEST(GoTimeTest, ParsesOffsetsAndFractions) {
  auto base = ParseGoTime("2026-03-14T15:09:26Z");
  ASSERT_TRUE(base.ok());
  auto shifted = ParseGoTime("2026-03-14T16:09:26.5+01:00");
  ASSERT_TRUE(shifted.ok());
  EXPECT_EQ(*shifted - *base, std::chrono::milliseconds(500));
  for (const char* bad : {"", "2026-03-14", "2026-03-14T15:09:26", "2026-13-14T15:09:26Z",
                          "2026-03-14T15:09:26Zx", "2026-03-14T15:09:26.Z"}) {
    EXPECT_EQ(ParseGoTime(bad).status().code(), common::StatusCode::kInvalidArgument) << bad;
  }
}

// Found by fuzz.duration (test/fuzz): a year outside 1678..2262 overflowed
// system_clock's nanoseconds (undefined behaviour) instead of failing, and a
// checkpoint's abortedAt may hold any year, Go's zero time included.
TEST(GoTimeTest, TimesTheClockCannotHoldAreRefusedNotOverflowed) {
  for (const char* far : {"0001-01-01T00:00:00Z", "0026-03-14T15:09:26Z", "1677-09-21T00:12:43Z",
                          "2262-04-11T23:47:17Z", "6026-03-14T15:09:26Z", "9999-12-31T23:59:59.999+00:00"}) {
    auto parsed = ParseGoTime(far);
    EXPECT_EQ(parsed.status().code(), common::StatusCode::kInvalidArgument) << far;
    EXPECT_THAT(parsed.status().message(), HasSubstr("out of the range")) << far;
  }
  for (const char* near_edge : {"1678-01-01T00:00:00Z", "2262-01-01T00:00:00.5Z", "1970-01-01T00:00:00Z"}) {
    auto parsed = ParseGoTime(near_edge);
    ASSERT_TRUE(parsed.ok()) << near_edge << ": " << parsed.status();
    EXPECT_EQ(FormatGoTime(*parsed), std::string(near_edge).substr(0, 19) + "Z");
  }
}

// Found by fuzz.duration: from_chars took a sign inside a fixed-width field,
// so an hour of "-1" or an offset of "+-1:00" was read as a time.
TEST(GoTimeTest, FieldsAreDigitsOnlyAndOffsetsAreInRange) {
  for (const char* bad : {"2026-03-14T-1:09:26Z", "2026-03-14T15:09:-6Z", "-026-03-14T15:09:26Z",
                          "2026-03-14T15:09:26+-1:00", "2026-03-14T15:09:26+24:00", "2026-03-14T15:09:26-01:60",
                          "+026-03-14T15:09:26Z"}) {
    EXPECT_EQ(ParseGoTime(bad).status().code(), common::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace nvdra::kubeletplugin
