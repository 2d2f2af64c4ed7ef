// The claim preparer's state machine at unit tier: a fake backend that keeps
// "node state" (which claims hold which devices) in memory, claims served
// from a map instead of the API server, a clock the test moves, and the
// crash points reached by a hook that abandons the operation the way a
// crash does (whatever is on disk stays; the next preparer over the same
// folder is the restarted plugin).
#include "kubeletplugin/claim_preparer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/crash_point.h"
#include "common/metrics.h"
#include "kubeletplugin/checkpoint_store.h"
#include "kubeletplugin/plugin_metrics.h"

namespace nvdra::kubeletplugin {
namespace {

namespace fs = std::filesystem;
using common::Status;
using common::StatusCode;
using common::StatusOr;
using nlohmann::ordered_json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kDriver[] = "gpu.nvidia.com";
constexpr char kBoot[] = "boot-1";

// ---- Test doubles

class FakeClock final : public common::Clock {
 public:
  std::chrono::system_clock::time_point WallNow() const override { return wall_; }
  std::chrono::steady_clock::time_point Now() const override { return steady_; }
  void Advance(std::chrono::seconds by) {
    wall_ += by;
    steady_ += by;
  }

 private:
  std::chrono::system_clock::time_point wall_ =
      std::chrono::system_clock::time_point(std::chrono::seconds(1'773'500'966));
  std::chrono::steady_clock::time_point steady_ = std::chrono::steady_clock::time_point(std::chrono::hours(1));
};

class MapClaimReader final : public ClaimReader {
 public:
  StatusOr<ordered_json> Read(const std::string& ns, const std::string& name) const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
    auto it = claims_.find(ns + "/" + name);
    if (it == claims_.end()) return common::NotFoundError("resourceclaims \"" + name + "\" not found");
    return it->second;
  }
  void Put(const ordered_json& claim) {
    std::lock_guard<std::mutex> lock(mu_);
    claims_[claim["metadata"]["namespace"].get<std::string>() + "/" + claim["metadata"]["name"].get<std::string>()] =
        claim;
  }
  void Erase(const std::string& ns, const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    claims_.erase(ns + "/" + name);
  }
  void FailReads(Status error) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = std::move(error);
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, ordered_json> claims_;
  Status error_ = common::OkStatus();
};

// Devices are "gpu-<n>" (GpuConfig) and "mig-<n>" (MigDeviceConfig).
class FakeBackend final : public ClaimDeviceBackend {
 public:
  std::vector<api::ConfigKind> DefaultConfigKinds() const override {
    return {api::ConfigKind::kGpuConfig, api::ConfigKind::kMigDeviceConfig};
  }
  StatusOr<api::ConfigKind> ConfigKindOf(const std::string& device) const override {
    if (device.starts_with("gpu-")) return api::ConfigKind::kGpuConfig;
    if (device.starts_with("mig-")) return api::ConfigKind::kMigDeviceConfig;
    return common::NotFoundError("device " + device + " is not on this node");
  }

  StatusOr<std::vector<PreparedDeviceGroup>> PrepareDevices(const ClaimView& claim) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++prepare_calls;
    seen_views.push_back(claim);
    if (claim.ref.uid == fail_first_prepare_of) {
      fail_first_prepare_of.clear();
      return common::UnavailableError("not yet");
    }
    if (!next_prepare_failures.empty()) {
      Status failure = next_prepare_failures.front();
      next_prepare_failures.erase(next_prepare_failures.begin());
      return failure;
    }
    // The points where the real backends write their CDI spec (the device
    // side effect this fake stands for).
    common::CrashPoint("prepare-before-cdi-write");
    std::vector<PreparedDeviceGroup> groups;
    for (const api::ConfiguredResults& configured : claim.groups) {
      PreparedDeviceGroup group{.devices = {}, .config_state = GpuConfigState{}};
      for (const api::AllocatedDevice& device : configured.results) {
        node_devices[claim.ref.uid].insert(device.device);
        group.devices.push_back(
            {.kind = PreparedGpu{.uuid = "GPU-" + device.device},
             .device = {.device = {.requests = {device.request},
                                   .pool_name = device.pool,
                                   .device_name = device.device,
                                   .cdi_device_ids = {"k8s.gpu.nvidia.com/claim=" + claim.ref.uid + "-" + device.device}},
                        .share_id = device.share_id,
                        .metadata = nullptr}});
      }
      groups.push_back(std::move(group));
    }
    common::CrashPoint("prepare-after-cdi-write");
    if (prepared_hook) prepared_hook(claim.ref.uid);
    return groups;
  }

  Status UnprepareDevices(const RecordedClaim& claim) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++unprepare_calls;
    unprepared_states.push_back(claim.entry.state);
    held_at_unprepare.push_back(claim.held_by_other_claims);
    node_devices.erase(claim.ref.uid);
    return common::OkStatus();
  }

  Status RollBackLeftover(const RecordedClaim& claim) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++rollbacks;
    }
    return UnprepareDevices(claim);
  }

  bool SharesDevicesWithEqualConfigs() const override { return shares_devices; }

  bool AwaitRetry(const ClaimView& claim, const Status& failure,
                  std::chrono::steady_clock::time_point deadline) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      awaited.push_back({claim.ref.uid, failure.code(), deadline});
    }
    return await_hook ? await_hook(claim) : false;
  }

  struct Await {
    std::string uid;
    StatusCode code;
    std::chrono::steady_clock::time_point deadline;
  };

  std::mutex mu_;
  int prepare_calls = 0;
  int unprepare_calls = 0;
  int rollbacks = 0;
  std::vector<Status> next_prepare_failures;
  std::vector<ClaimView> seen_views;
  std::vector<ClaimCheckpointState> unprepared_states;
  std::vector<std::set<std::string>> held_at_unprepare;
  bool shares_devices = false;
  std::vector<Await> awaited;
  std::map<std::string, std::set<std::string>> node_devices;  // claim UID -> devices held
  std::function<bool(const ClaimView&)> await_hook;
  std::function<void(const std::string& uid)> prepared_hook;  // after a successful PrepareDevices
  std::string fail_first_prepare_of;  // this claim's first PrepareDevices is kUnavailable
};

// ---- Claims

ordered_json Claim(const std::string& uid, const std::string& name, const std::vector<std::string>& devices,
                   ordered_json configs = ordered_json::array(), bool admin = false) {
  ordered_json results = ordered_json::array();
  for (const std::string& device : devices) {
    ordered_json result = {{"request", "req"}, {"driver", kDriver}, {"pool", "node-a"}, {"device", device}};
    if (admin) result["adminAccess"] = true;
    results.push_back(std::move(result));
  }
  return {{"metadata", {{"name", name}, {"namespace", "ns"}, {"uid", uid}}},
          {"status", {{"allocation", {{"devices", {{"results", results}, {"config", configs}}}}}}}};
}

// A claim's config list with one opaque config of this driver for request "req".
ordered_json ClaimConfig(const ordered_json& parameters) {
  return ordered_json::array(
      {{{"source", "FromClaim"}, {"requests", {"req"}}, {"opaque", {{"driver", kDriver}, {"parameters", parameters}}}}});
}

ClaimRef Ref(const ordered_json& claim) {
  return {.uid = claim["metadata"]["uid"], .name = claim["metadata"]["name"], .ns = claim["metadata"]["namespace"]};
}

// Abandons the operation at one named crash point, as a SIGKILL there would.
struct Crash {
  std::string point;
};
std::string armed_point;
void ThrowAtArmedPoint(std::string_view name) {
  if (name == armed_point) throw Crash{std::string(name)};
}

class ClaimPreparerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "claim-preparer-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    common::TEST_SetCrashPointHook(nullptr);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  ClaimPreparerOptions Options(bool record_aborted = false) {
    return {.driver_name = kDriver,
            .plugin_dir = dir_,
            .boot_id = kBoot,
            .lock_timeout = std::chrono::milliseconds(500),
            .record_aborted = record_aborted,
            .aborted_ttl = std::chrono::seconds(90),
            .ready_wait = std::chrono::seconds(40),
            .metrics = nullptr,
            .clock = &clock_,
            .gates = common::FeatureGates::Defaults()};
  }

  // A claim the reader serves from now on.
  ordered_json PutClaim(const std::string& uid, const std::string& name, const std::vector<std::string>& devices,
                        ordered_json configs = ordered_json::array(), bool admin = false) {
    ordered_json claim = Claim(uid, name, devices, std::move(configs), admin);
    claims_.Put(claim);
    return claim;
  }

  std::unique_ptr<ClaimPreparer> NewPreparer(bool record_aborted = false) {
    auto preparer = ClaimPreparer::Create(Options(record_aborted), claims_, backend_);
    EXPECT_TRUE(preparer.ok()) << preparer.status();
    return preparer.ok() ? std::move(*preparer) : nullptr;
  }

  PrepareResult Prepare(ClaimPreparer& preparer, const ordered_json& claim) {
    return preparer.PrepareResourceClaims({Ref(claim)}).at(Ref(claim).uid);
  }
  std::string Unprepare(ClaimPreparer& preparer, const ordered_json& claim) {
    return preparer.UnprepareResourceClaims({Ref(claim)}).at(Ref(claim).uid);
  }

  Checkpoint OnDisk() {
    auto checkpoint = CheckpointStore(dir_ / "checkpoint.json").Load();
    EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
    return checkpoint.ok() ? *checkpoint : Checkpoint{};
  }

  fs::path dir_;
  FakeClock clock_;
  MapClaimReader claims_;
  FakeBackend backend_;
};

// ---- Prepare

TEST_F(ClaimPreparerTest, PrepareRecordsCompletedDevicesAndAnswersTheKubelet) {
  auto preparer = NewPreparer();
  const ordered_json claim = PutClaim("uid-1", "c1", {"gpu-0", "gpu-1"});
  PrepareResult result = Prepare(*preparer, claim);
  ASSERT_EQ(result.error, "");
  ASSERT_EQ(result.devices.size(), 2u);
  EXPECT_EQ(result.devices[0].device_name, "gpu-0");
  EXPECT_EQ(result.devices[0].pool_name, "node-a");
  EXPECT_THAT(result.devices[0].cdi_device_ids, ElementsAre("k8s.gpu.nvidia.com/claim=uid-1-gpu-0"));

  const Checkpoint checkpoint = OnDisk();
  const CheckpointedClaim& entry = checkpoint.claims.at("uid-1");
  EXPECT_EQ(entry.state, ClaimCheckpointState::kPrepareCompleted);
  EXPECT_EQ(entry.name, "c1");
  EXPECT_EQ(entry.ns, "ns");
  EXPECT_EQ(KubeletDevices(entry.prepared_devices), result.devices);
  EXPECT_EQ(entry.status, claim["status"]);
  EXPECT_EQ(checkpoint.node_boot_id, kBoot);

  // The backend got the typed view: identity and one default-config group.
  ASSERT_EQ(backend_.seen_views.size(), 1u);
  const ClaimView& view = backend_.seen_views[0];
  EXPECT_EQ(view.ref, Ref(claim));
  ASSERT_EQ(view.groups.size(), 1u);
  EXPECT_EQ(view.groups[0].source, "default");
  EXPECT_EQ(view.groups[0].config.kind, api::ConfigKind::kGpuConfig);
  ASSERT_EQ(view.groups[0].results.size(), 2u);
  EXPECT_EQ(view.groups[0].results[1].device, "gpu-1");
}

// DeviceMetadata: each request gets a metadata file and a CDI spec that
// mounts it where KEP-5304 says, its CDI id goes with the request's first
// device only, and Unprepare removes both.
TEST_F(ClaimPreparerTest, DeviceMetadataFilesAreWrittenPerRequestAndRemovedAtUnprepare) {
  ClaimPreparerOptions options = Options();
  options.device_metadata = true;
  options.cdi_root = dir_ / "cdi";
  auto preparer = ClaimPreparer::Create(options, claims_, backend_);
  ASSERT_TRUE(preparer.ok()) << preparer.status();
  ordered_json claim = PutClaim("uid-1", "c1", {"gpu-0", "gpu-1"});
  claim["metadata"]["annotations"] = {{"resource.kubernetes.io/pod-claim-name", "gpus"}};
  claims_.Put(claim);
  const PrepareResult result = Prepare(**preparer, claim);
  ASSERT_EQ(result.error, "");
  ASSERT_EQ(result.devices.size(), 2u);
  EXPECT_THAT(result.devices[0].cdi_device_ids,
              ElementsAre("k8s.gpu.nvidia.com/claim=uid-1-gpu-0", std::string(kDriver) + "/metadata=uid-1_req"));
  EXPECT_THAT(result.devices[1].cdi_device_ids, ElementsAre("k8s.gpu.nvidia.com/claim=uid-1-gpu-1"));

  const fs::path file = dir_ / "dra-device-metadata/ns_c1/req/metadata.json";
  std::ifstream in(file);
  const ordered_json metadata = ordered_json::parse(in);
  EXPECT_EQ(metadata["apiVersion"], "metadata.resource.k8s.io/v1alpha1");
  EXPECT_EQ(metadata["kind"], "DeviceMetadata");
  EXPECT_EQ(metadata["metadata"]["uid"], "uid-1");
  EXPECT_EQ(metadata["podClaimName"], "gpus");
  EXPECT_EQ(metadata["requests"][0]["name"], "req");
  EXPECT_EQ(metadata["requests"][0]["devices"][1]["name"], "gpu-1");
  EXPECT_EQ(metadata["requests"][0]["devices"][1]["pool"], "node-a");
  const fs::path spec_path = dir_ / "cdi" / (std::string(kDriver) + "_metadata_uid-1_req.json");
  std::ifstream spec_in(spec_path);
  const ordered_json spec = ordered_json::parse(spec_in);
  EXPECT_EQ(spec["kind"], std::string(kDriver) + "/metadata");
  const ordered_json& mount = spec["devices"][0]["containerEdits"]["mounts"][0];
  EXPECT_EQ(mount["hostPath"], file.string());
  EXPECT_EQ(mount["containerPath"], "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpus/req/" +
                                        std::string(kDriver) + "-metadata.json");

  EXPECT_EQ(Unprepare(**preparer, claim), "");
  EXPECT_FALSE(fs::exists(dir_ / "dra-device-metadata/ns_c1"));
  EXPECT_FALSE(fs::exists(spec_path));
}

TEST_F(ClaimPreparerTest, PrepareTwiceReturnsRecordedDevicesWithoutTheBackend) {
  auto preparer = NewPreparer();
  const ordered_json claim = PutClaim("uid-1", "c1", {"gpu-0"});
  const PrepareResult first = Prepare(*preparer, claim);
  const PrepareResult second = Prepare(*preparer, claim);
  EXPECT_EQ(first, second);
  EXPECT_EQ(backend_.prepare_calls, 1);
}

TEST_F(ClaimPreparerTest, ClaimConfigsAreMatchedPerRequestBeforeTheBackendRuns) {
  auto preparer = NewPreparer();
  const ordered_json configs =
      ClaimConfig({{"apiVersion", "resource.nvidia.com/v1beta1"}, {"kind", "MigDeviceConfig"}});
  const ordered_json claim = PutClaim("uid-1", "c1", {"mig-0"}, configs);
  ASSERT_EQ(Prepare(*preparer, claim).error, "");
  ASSERT_EQ(backend_.seen_views.size(), 1u);
  EXPECT_EQ(backend_.seen_views[0].groups.at(0).source, "claim config[0].opaque.parameters");
  EXPECT_EQ(backend_.seen_views[0].groups.at(0).config.kind, api::ConfigKind::kMigDeviceConfig);
}

TEST_F(ClaimPreparerTest, RefusedConfigFailsWithoutTouchingTheCheckpoint) {
  auto preparer = NewPreparer();
  const ordered_json configs =
      ClaimConfig({{"apiVersion", "resource.nvidia.com/v1beta1"}, {"kind", "GpuConfig"}, {"bogus", 1}});
  const ordered_json claim = PutClaim("uid-1", "c1", {"gpu-0"}, configs);
  const PrepareResult result = Prepare(*preparer, claim);
  EXPECT_THAT(result.error, HasSubstr("bogus"));
  EXPECT_EQ(backend_.prepare_calls, 0);
  EXPECT_TRUE(OnDisk().claims.empty());
}

// A config of this driver that applies to no device is judged all the same,
// as the webhook judges it: another driver's kind is refused, not ignored.
TEST_F(ClaimPreparerTest, ConfigsThatMatchNoDeviceAreJudgedAsTheWebhookJudgesThem) {
  auto preparer = NewPreparer();
  ordered_json configs = ordered_json::array(
      {{{"source", "FromClaim"},
        {"opaque",
         {{"driver", kDriver},
          {"parameters", {{"apiVersion", "resource.nvidia.com/v1beta1"},
                          {"kind", "ComputeDomainChannelConfig"},
                          {"domainID", "d"}}}}}}});
  const ordered_json claim = PutClaim("uid-1", "c1", {"gpu-0"}, configs);
  const PrepareResult result = Prepare(*preparer, claim);
  EXPECT_THAT(result.error, HasSubstr("claim config[0].opaque.parameters.kind: ComputeDomainChannelConfig is not a "
                                      "configuration of driver gpu.nvidia.com"));
  EXPECT_EQ(backend_.prepare_calls, 0);
  EXPECT_TRUE(OnDisk().claims.empty());
}

// With consumable shares a device may serve several claims whose configs
// for it are equal; one that configures it differently is refused. The
// backend learns at unprepare which devices other claims still hold.
TEST_F(ClaimPreparerTest, SharedDevicesNeedEqualConfigsAndUnprepareKnowsWhoElseHoldsThem) {
  backend_.shares_devices = true;
  ClaimPreparerOptions options = Options();
  options.gates = *common::FeatureGates::Parse("TimeSlicingSettings=true");  // the configs' gate
  auto created = ClaimPreparer::Create(options, claims_, backend_);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<ClaimPreparer> preparer = std::move(*created);
  auto time_sliced = [](const char* interval) {
    return ClaimConfig({{"apiVersion", "resource.nvidia.com/v1beta1"},
                        {"kind", "GpuConfig"},
                        {"sharing", {{"strategy", "TimeSlicing"}, {"timeSlicingConfig", {{"interval", interval}}}}}});
  };
  const ordered_json first = PutClaim("uid-1", "c1", {"gpu-0"}, time_sliced("Long"));
  const ordered_json second = PutClaim("uid-2", "c2", {"gpu-0"}, time_sliced("Long"));
  const ordered_json other = PutClaim("uid-3", "c3", {"gpu-0"}, time_sliced("Short"));
  ASSERT_EQ(Prepare(*preparer, first).error, "");
  ASSERT_EQ(Prepare(*preparer, second).error, "");
  EXPECT_THAT(Prepare(*preparer, other).error,
              HasSubstr("device gpu-0 is shared with claim ns/c1 (uid-1), whose config for it differs"));

  ASSERT_EQ(Unprepare(*preparer, first), "");
  ASSERT_EQ(backend_.held_at_unprepare.size(), 1u);
  EXPECT_EQ(backend_.held_at_unprepare[0], std::set<std::string>{"gpu-0"});
  ASSERT_EQ(Unprepare(*preparer, second), "");
  EXPECT_TRUE(backend_.held_at_unprepare.back().empty());
}

TEST_F(ClaimPreparerTest, MetricsCountARefusedConfigAsAPrepareDevicesErrorAndSuccessesOnly) {
  common::MetricsRegistry registry;
  PluginMetrics metrics(registry, kDriver, "node-a", {"gpu", "mig"});
  ClaimPreparerOptions options = Options();
  options.metrics = &metrics;
  auto preparer = ClaimPreparer::Create(options, claims_, backend_);
  ASSERT_TRUE(preparer.ok()) << preparer.status();
  const ordered_json good = PutClaim("uid-1", "c1", {"gpu-0"});
  const ordered_json refused =
      PutClaim("uid-2", "c2", {"gpu-1"},
               ClaimConfig({{"apiVersion", "resource.nvidia.com/v1beta1"},
                            {"kind", "GpuConfig"},
                            {"sharing", {{"stratgy", "MPS"}}}}));
  ASSERT_EQ(Prepare(**preparer, good).error, "");
  ASSERT_NE(Prepare(**preparer, refused).error, "");
  const std::string text = registry.Render();
  EXPECT_THAT(text, HasSubstr("nvidia_dra_requests_total{driver=\"gpu.nvidia.com\",operation=\"prepare\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("nvidia_dra_node_prepare_errors_total{driver=\"gpu.nvidia.com\","
                              "error_type=\"prepare_devices\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("nvidia_dra_prepared_devices{device_type=\"gpu\",driver=\"gpu.nvidia.com\","
                              "node=\"node-a\"} 1\n"));
}

TEST_F(ClaimPreparerTest, UnknownDeviceUidMismatchAndNoAllocationFailClearly) {
  auto preparer = NewPreparer();
  const ordered_json unknown = PutClaim("uid-1", "c1", {"tpu-0"});
  EXPECT_THAT(Prepare(*preparer, unknown).error, HasSubstr("device tpu-0 is not on this node"));

  ordered_json recreated = Claim("uid-2", "c2", {"gpu-0"});
  claims_.Put(recreated);
  recreated["metadata"]["uid"] = "uid-old";
  EXPECT_THAT(Prepare(*preparer, recreated).error, HasSubstr("deleted and re-created"));

  ordered_json pending = Claim("uid-3", "c3", {"gpu-0"});
  pending["status"] = ordered_json::object();
  claims_.Put(pending);
  EXPECT_THAT(Prepare(*preparer, pending).error, HasSubstr("not allocated"));

  const ordered_json missing = Claim("uid-4", "c4", {"gpu-0"});
  EXPECT_THAT(Prepare(*preparer, missing).error, HasSubstr("not found"));
  EXPECT_EQ(backend_.prepare_calls, 0);
  EXPECT_TRUE(OnDisk().claims.empty());
}

TEST_F(ClaimPreparerTest, DeviceOfAnotherCompletedClaimIsRefusedUnlessAdminAccess) {
  auto preparer = NewPreparer();
  const ordered_json first = Claim("uid-1", "c1", {"gpu-0"});
  const ordered_json second = Claim("uid-2", "c2", {"gpu-0"});
  const ordered_json admin = Claim("uid-3", "c3", {"gpu-0"}, ordered_json::array(), /*admin=*/true);
  claims_.Put(first);
  claims_.Put(second);
  claims_.Put(admin);
  ASSERT_EQ(Prepare(*preparer, first).error, "");
  EXPECT_THAT(Prepare(*preparer, second).error, HasSubstr("device gpu-0 is already prepared for claim ns/c1 (uid-1)"));
  EXPECT_EQ(Prepare(*preparer, admin).error, "");
}

TEST_F(ClaimPreparerTest, FailedPrepareLeavesStartedAndTheNextAttemptRollsItBackFirst) {
  auto preparer = NewPreparer();
  const ordered_json claim = PutClaim("uid-1", "c1", {"gpu-0"});
  backend_.next_prepare_failures = {common::InternalError("device busy")};
  EXPECT_THAT(Prepare(*preparer, claim).error, HasSubstr("device busy"));
  EXPECT_EQ(OnDisk().claims.at("uid-1").state, ClaimCheckpointState::kPrepareStarted);

  ASSERT_EQ(Prepare(*preparer, claim).error, "");
  EXPECT_EQ(backend_.rollbacks, 1);
  EXPECT_THAT(backend_.unprepared_states, ElementsAre(ClaimCheckpointState::kPrepareStarted));
  EXPECT_EQ(OnDisk().claims.at("uid-1").state, ClaimCheckpointState::kPrepareCompleted);
}

// ---- Waiting outside the locks

TEST_F(ClaimPreparerTest, UnavailableWaitsWithNoLockHeldThenRetries) {
  auto preparer = NewPreparer();
  const ordered_json waiting = PutClaim("uid-1", "c1", {"gpu-0"});
  const ordered_json other = PutClaim("uid-2", "c2", {"gpu-1"});
  backend_.next_prepare_failures = {common::UnavailableError("domain not ready")};
  std::string other_result = "not run";
  backend_.await_hook = [&](const ClaimView&) {
    // Another claim prepares and unprepares meanwhile: with a node lock held
    // here these would fail after lock_timeout.
    other_result = Prepare(*preparer, other).error + "|" + Unprepare(*preparer, other);
    return true;
  };
  const PrepareResult result = Prepare(*preparer, waiting);
  EXPECT_EQ(result.error, "");
  EXPECT_EQ(other_result, "|");
  ASSERT_EQ(backend_.awaited.size(), 1u);
  EXPECT_EQ(backend_.awaited[0].uid, "uid-1");
  EXPECT_EQ(backend_.awaited[0].code, StatusCode::kUnavailable);
  EXPECT_EQ(backend_.awaited[0].deadline, clock_.Now() + std::chrono::seconds(40));
  // The retry found its own PrepareStarted entry and handed it to the
  // backend's RollBackLeftover first (the CD backend keeps it; this one undoes it).
  EXPECT_EQ(backend_.rollbacks, 1);
  EXPECT_EQ(OnDisk().claims.at("uid-1").state, ClaimCheckpointState::kPrepareCompleted);
}

TEST_F(ClaimPreparerTest, AWaitThatEndsWithoutTheAwaitedStateReportsTheFailure) {
  auto preparer = NewPreparer();
  const ordered_json claim = PutClaim("uid-1", "c1", {"gpu-0"});
  backend_.next_prepare_failures = {common::UnavailableError("daemon not Ready")};
  EXPECT_THAT(Prepare(*preparer, claim).error, HasSubstr("daemon not Ready"));
  EXPECT_EQ(backend_.awaited.size(), 1u);
  EXPECT_EQ(OnDisk().claims.at("uid-1").state, ClaimCheckpointState::kPrepareStarted);
}

TEST_F(ClaimPreparerTest, ClaimsOfOneCallPrepareConcurrently) {
  auto preparer = NewPreparer();
  const ordered_json waiting = PutClaim("uid-1", "c1", {"gpu-0"});
  const ordered_json quick = PutClaim("uid-2", "c2", {"gpu-1"});
  // uid-1 fails first and then waits until uid-2, from the same kubelet
  // call, has been prepared: run one after the other, that never happens.
  std::promise<void> quick_prepared;
  std::future<void> quick_prepared_future = quick_prepared.get_future();
  backend_.prepared_hook = [&](const std::string& uid) {
    if (uid == "uid-2") quick_prepared.set_value();
  };
  backend_.fail_first_prepare_of = "uid-1";
  backend_.await_hook = [&](const ClaimView&) {
    return quick_prepared_future.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  };
  std::map<std::string, PrepareResult> results = preparer->PrepareResourceClaims({Ref(waiting), Ref(quick)});
  EXPECT_EQ(results.at("uid-1").error, "");
  EXPECT_EQ(results.at("uid-2").error, "");
  EXPECT_EQ(backend_.awaited.size(), 1u);
}

// ---- Unprepare and PrepareAborted

TEST_F(ClaimPreparerTest, UnprepareUndoesACompletedClaimAndIgnoresUnknownOnes) {
  auto preparer = NewPreparer();
  const ordered_json claim = PutClaim("uid-1", "c1", {"gpu-0"});
  ASSERT_EQ(Prepare(*preparer, claim).error, "");
  EXPECT_EQ(Unprepare(*preparer, claim), "");
  EXPECT_TRUE(backend_.node_devices.empty());
  EXPECT_TRUE(OnDisk().claims.empty());
  EXPECT_EQ(Unprepare(*preparer, Claim("uid-9", "c9", {"gpu-0"})), "");
  EXPECT_EQ(backend_.unprepare_calls, 1);
}

TEST_F(ClaimPreparerTest, UnprepareOfAPendingClaimRecordsPrepareAbortedAndRefusesItsStalePrepare) {
  auto preparer = NewPreparer(/*record_aborted=*/true);
  ordered_json claim = Claim("uid-1", "c1", {"gpu-0"});
  claims_.Put(claim);
  backend_.next_prepare_failures = {common::InternalError("first attempt fails")};
  ASSERT_NE(Prepare(*preparer, claim).error, "");
  ASSERT_EQ(Unprepare(*preparer, claim), "");
  CheckpointedClaim aborted = OnDisk().claims.at("uid-1");
  EXPECT_EQ(aborted.state, ClaimCheckpointState::kPrepareAborted);
  EXPECT_EQ(aborted.aborted_at, FormatGoTime(clock_.WallNow()));
  EXPECT_TRUE(aborted.prepared_devices.empty());

  // The kubelet's late retry of the same allocation: refused as stale.
  EXPECT_THAT(Prepare(*preparer, claim).error, HasSubstr("stale prepare"));
  // The same status with its keys in another order is still the same status.
  ordered_json reordered = claim;
  reordered["status"] = ordered_json::parse(R"({"allocation":{"devices":{"config":[],"results":[
      {"device":"gpu-0","pool":"node-a","driver":"gpu.nvidia.com","request":"req"}]}}})");
  claims_.Put(reordered);
  EXPECT_THAT(Prepare(*preparer, reordered).error, HasSubstr("stale prepare"));
  // A new allocation of the claim prepares.
  ordered_json reallocated = Claim("uid-1", "c1", {"gpu-1"});
  claims_.Put(reallocated);
  EXPECT_EQ(Prepare(*preparer, reallocated).error, "");
}

// ---- Reconcile

TEST_F(ClaimPreparerTest, ReconcileUnpreparesDeletedAndReplacedClaimsAndKeepsUnreadableOnes) {
  auto preparer = NewPreparer();
  const ordered_json deleted = Claim("uid-1", "c1", {"gpu-0"});
  const ordered_json replaced = Claim("uid-2", "c2", {"gpu-1"});
  const ordered_json live = Claim("uid-3", "c3", {"gpu-2"});
  for (const ordered_json& c : {deleted, replaced, live}) {
    claims_.Put(c);
    ASSERT_EQ(Prepare(*preparer, c).error, "");
  }
  claims_.FailReads(common::UnavailableError("API server down"));
  EXPECT_EQ(*preparer->Reconcile(), 0);
  EXPECT_EQ(OnDisk().claims.size(), 3u);

  claims_.FailReads(common::OkStatus());
  claims_.Erase("ns", "c1");
  claims_.Put(Claim("uid-2-new", "c2", {"gpu-1"}));
  StatusOr<int> removed = preparer->Reconcile();
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 2);
  const Checkpoint checkpoint = OnDisk();
  EXPECT_EQ(checkpoint.claims.size(), 1u);
  EXPECT_TRUE(checkpoint.claims.contains("uid-3"));
  EXPECT_EQ(backend_.node_devices.size(), 1u);
}

// An abortedAt centuries ago (a hand-edited or hostile checkpoint; found
// while fuzzing ParseGoTime, test/fuzz) is expired: `now - abortedAt` used to
// overflow 64-bit nanoseconds and wrap negative, keeping the entry forever.
TEST_F(ClaimPreparerTest, ReconcileDropsAPrepareAbortedEntryFromCenturiesAgo) {
  auto preparer = NewPreparer(/*record_aborted=*/true);
  const ordered_json claim = PutClaim("uid-1", "c1", {"gpu-0"});
  backend_.next_prepare_failures = {common::InternalError("fails")};
  ASSERT_NE(Prepare(*preparer, claim).error, "");
  ASSERT_EQ(Unprepare(*preparer, claim), "");
  Checkpoint checkpoint = OnDisk();
  checkpoint.claims.at("uid-1").aborted_at = "1700-01-01T00:00:00Z";
  ASSERT_TRUE(CheckpointStore(dir_ / "checkpoint.json").Store(checkpoint).ok());
  EXPECT_EQ(*preparer->Reconcile(), 1);
  EXPECT_TRUE(OnDisk().claims.empty());
}

TEST_F(ClaimPreparerTest, ReconcileDropsPrepareAbortedEntriesOnceTheirTimeToLiveHasPassed) {
  auto preparer = NewPreparer(/*record_aborted=*/true);
  const ordered_json claim = PutClaim("uid-1", "c1", {"gpu-0"});
  backend_.next_prepare_failures = {common::InternalError("fails")};
  ASSERT_NE(Prepare(*preparer, claim).error, "");
  ASSERT_EQ(Unprepare(*preparer, claim), "");
  clock_.Advance(std::chrono::seconds(89));
  EXPECT_EQ(*preparer->Reconcile(), 0);
  EXPECT_TRUE(OnDisk().claims.contains("uid-1"));
  clock_.Advance(std::chrono::seconds(2));
  EXPECT_EQ(*preparer->Reconcile(), 1);
  EXPECT_TRUE(OnDisk().claims.empty());
}

TEST_F(ClaimPreparerTest, ACheckpointOfAnotherBootIsDiscarded) {
  {
    auto preparer = NewPreparer();
    const ordered_json claim = Claim("uid-1", "c1", {"gpu-0"});
    claims_.Put(claim);
    ASSERT_EQ(Prepare(*preparer, claim).error, "");
  }
  ClaimPreparerOptions options = Options();
  options.boot_id = "boot-2";
  auto rebooted = ClaimPreparer::Create(options, claims_, backend_);
  ASSERT_TRUE(rebooted.ok()) << rebooted.status();
  EXPECT_TRUE((*rebooted)->ReadCheckpoint()->claims.empty());
}

// ---- Crashes at every point

class ClaimPreparerCrashTest : public ClaimPreparerTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(ClaimPreparerCrashTest, PrepareCrashConvergesAfterRestartWithNothingLeaked) {
  const ordered_json claim = PutClaim("uid-1", "c1", {"gpu-0"});
  armed_point = GetParam();
  common::TEST_SetCrashPointHook(&ThrowAtArmedPoint);
  {
    auto preparer = NewPreparer();
    EXPECT_THROW(preparer->PrepareResourceClaims({Ref(claim)}), Crash);
  }
  common::TEST_SetCrashPointHook(nullptr);

  // Restarted: the kubelet asks again, then the pod goes.
  auto restarted = NewPreparer();
  const PrepareResult result = Prepare(*restarted, claim);
  ASSERT_EQ(result.error, "");
  ASSERT_EQ(result.devices.size(), 1u);
  EXPECT_EQ(OnDisk().claims.at("uid-1").state, ClaimCheckpointState::kPrepareCompleted);
  EXPECT_EQ(backend_.node_devices.at("uid-1"), std::set<std::string>{"gpu-0"});
  ASSERT_EQ(Unprepare(*restarted, claim), "");
  EXPECT_TRUE(backend_.node_devices.empty());
  EXPECT_TRUE(OnDisk().claims.empty());
}

INSTANTIATE_TEST_SUITE_P(EveryPreparePoint, ClaimPreparerCrashTest,
                         ::testing::Values("prepare-before-started-checkpoint", "prepare-after-started-checkpoint",
                                           "prepare-before-cdi-write", "prepare-after-cdi-write",
                                           "prepare-after-devices", "prepare-after-completed-checkpoint"),
                         [](const auto& point) {
                           std::string name = point.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST_F(ClaimPreparerTest, UnprepareCrashAfterTheDevicesConvergesOnTheKubeletsRetry) {
  const ordered_json claim = PutClaim("uid-1", "c1", {"gpu-0"});
  auto preparer = NewPreparer();
  ASSERT_EQ(Prepare(*preparer, claim).error, "");
  armed_point = "unprepare-after-devices";
  common::TEST_SetCrashPointHook(&ThrowAtArmedPoint);
  EXPECT_THROW(preparer->UnprepareResourceClaims({Ref(claim)}), Crash);
  common::TEST_SetCrashPointHook(nullptr);
  preparer.reset();
  // The entry survived the crash; the retried Unprepare undoes it again
  // (idempotent in the backend) and removes it.
  EXPECT_TRUE(OnDisk().claims.contains("uid-1"));
  auto restarted = NewPreparer();
  EXPECT_EQ(Unprepare(*restarted, claim), "");
  EXPECT_TRUE(OnDisk().claims.empty());
  EXPECT_EQ(backend_.unprepare_calls, 2);
}

}  // namespace
}  // namespace nvdra::kubeletplugin
