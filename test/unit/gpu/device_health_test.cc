// Device health: the XID policy, the health book (state machine and its
// record across restarts and reboots), the kubelet report, the reset
// annotation's parsing, and the NVML event monitor against the mock NVML
// (events appended to the driver root's events file, as a test node would).

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpu/device_health.h"
#include "gpu/device_health_reporter.h"
#include "mock_node.h"

namespace nvdra::gpu {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("nvdra-health-" + std::to_string(::getpid()) + "-" + std::to_string(n_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  static inline int n_ = 0;
  fs::path path_;
};

DeviceTaint Xid(std::uint64_t xid, TaintEffect effect = TaintEffect::kNoSchedule) {
  return {.key = std::string(kTaintKeyXid), .value = std::to_string(xid), .effect = effect,
          .since = std::chrono::system_clock::time_point(std::chrono::milliseconds(1700000000123))};
}

TEST(XidPolicyTest, UpstreamApplicationXidsAndAdditionalOnes) {
  auto policy = XidPolicy::Parse("");
  ASSERT_TRUE(policy.ok()) << policy.status();
  for (std::uint64_t xid : {13u, 31u, 43u, 45u, 68u, 109u}) EXPECT_TRUE(policy->IsApplicationXid(xid)) << xid;
  EXPECT_FALSE(policy->IsApplicationXid(79));
  EXPECT_FALSE(policy->IsApplicationXid(48));

  auto more = XidPolicy::Parse(" 63, 64 ,");
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_TRUE(more->IsApplicationXid(63));
  EXPECT_TRUE(more->IsApplicationXid(64));
  EXPECT_TRUE(more->IsApplicationXid(13));
}

TEST(XidPolicyTest, RefusesWhatIsNotAnXidNamingTheFlag) {
  for (const char* bad : {"x", "12,abc", "-1", "1.5"}) {
    auto policy = XidPolicy::Parse(bad);
    ASSERT_FALSE(policy.ok()) << bad;
    EXPECT_THAT(policy.status().message(), HasSubstr("--additional-xids-to-ignore")) << bad;
  }
}

TEST(DeviceHealthBookTest, OneTaintPerKeyLatestWinsAndClear) {
  TempDir dir;
  auto book = DeviceHealthBook::Open(dir.path() / "health.json", "boot-1", {"gpu-0", "gpu-1"});
  ASSERT_TRUE(book.ok()) << book.status();
  EXPECT_TRUE((*book)->Taints().empty());

  EXPECT_TRUE((*book)->Set({"gpu-0"}, Xid(79)));
  EXPECT_FALSE((*book)->Set({"gpu-0"}, Xid(79))) << "the same condition again is no change";
  EXPECT_TRUE((*book)->Set({"gpu-0"}, Xid(94)));
  EXPECT_TRUE((*book)->Set({"gpu-0", "gpu-1", "gpu-9"}, DeviceTaint{.key = std::string(kTaintKeyGpuLost)}));
  auto taints = (*book)->Taints();
  ASSERT_EQ(taints.size(), 2u) << "gpu-9 is not a device of this node";
  ASSERT_EQ(taints["gpu-0"].size(), 2u);
  EXPECT_EQ(taints["gpu-0"][0].key, kTaintKeyGpuLost);
  EXPECT_EQ(taints["gpu-0"][1].value, "94");

  EXPECT_TRUE((*book)->Clear({}, kTaintKeyGpuLost));
  EXPECT_FALSE((*book)->Clear({"gpu-1"}, kTaintKeyGpuLost));
  taints = (*book)->Taints();
  ASSERT_EQ(taints.size(), 1u);
  EXPECT_EQ(taints["gpu-0"].size(), 1u);
  EXPECT_TRUE((*book)->Clear({"gpu-0"}, ""));
  EXPECT_TRUE((*book)->Taints().empty());
}

TEST(DeviceHealthBookTest, KeptAcrossRestartsDroppedAfterAReboot) {
  TempDir dir;
  const fs::path file = dir.path() / "health.json";
  {
    auto book = DeviceHealthBook::Open(file, "boot-1", {"gpu-0", "gpu-1"});
    ASSERT_TRUE(book.ok());
    ASSERT_TRUE((*book)->Set({"gpu-1"}, Xid(79)));
    ASSERT_TRUE((*book)->Set({"gpu-0"}, Xid(13, TaintEffect::kNone)));
    EXPECT_FALSE(fs::exists(file)) << "changes are in memory until Commit";
    ASSERT_TRUE((*book)->Commit().ok());
    EXPECT_EQ((*book)->writes(), 1u);
    ASSERT_TRUE((*book)->Commit().ok());
    EXPECT_EQ((*book)->writes(), 1u) << "nothing changed since";
  }
  {
    // A restart: the same boot.
    auto book = DeviceHealthBook::Open(file, "boot-1", {"gpu-0", "gpu-1"});
    ASSERT_TRUE(book.ok()) << book.status();
    auto taints = (*book)->Taints();
    ASSERT_EQ(taints.size(), 2u);
    EXPECT_EQ(taints["gpu-1"][0], Xid(79)) << "key, value, effect and time all kept";
    EXPECT_EQ(taints["gpu-0"][0].effect, TaintEffect::kNone);
  }
  {
    // A device gone since (MIG reconfigured) is dropped.
    auto book = DeviceHealthBook::Open(file, "boot-1", {"gpu-0"});
    ASSERT_TRUE(book.ok());
    EXPECT_EQ((*book)->Taints().size(), 1u);
  }
  {
    // A reboot resets the GPUs: nothing is kept.
    auto book = DeviceHealthBook::Open(file, "boot-2", {"gpu-0", "gpu-1"});
    ASSERT_TRUE(book.ok());
    EXPECT_TRUE((*book)->Taints().empty());
  }
}

TEST(DeviceHealthBookTest, ACorruptRecordSaysWhatToDo) {
  TempDir dir;
  const fs::path file = dir.path() / "health.json";
  std::ofstream(file) << "{\"bootID\": \"boot-1\", \"devices\": {\"gpu-0\": [{\"key\": 5}]}}";
  auto book = DeviceHealthBook::Open(file, "boot-1", {"gpu-0"});
  ASSERT_FALSE(book.ok());
  EXPECT_EQ(book.status().code(), common::StatusCode::kDataLoss);
  EXPECT_THAT(book.status().message(), HasSubstr(file.string()));
  EXPECT_THAT(book.status().message(), HasSubstr("remove the file"));
  std::ofstream(file, std::ios::trunc) << "not json";
  EXPECT_FALSE(DeviceHealthBook::Open(file, "boot-1", {"gpu-0"}).ok());
}

TEST(DeviceTaintJsonTest, AsResourceSlicesSpellIt) {
  EXPECT_EQ(DeviceTaintJson(Xid(79)), json::parse(R"({"key":"gpu.nvidia.com/xid","value":"79","effect":"NoSchedule"})"));
  EXPECT_EQ(DeviceTaintJson(DeviceTaint{.key = std::string(kTaintKeyUnmonitored), .effect = TaintEffect::kNone}),
            json::parse(R"({"key":"gpu.nvidia.com/unmonitored","effect":"None"})"));
}

TEST(HealthReportTest, UnhealthyOnlyWithANoScheduleTaint) {
  std::map<std::string, std::vector<DeviceTaint>> taints{{"gpu-0", {Xid(79)}},
                                                         {"gpu-1", {Xid(13, TaintEffect::kNone)}}};
  auto report = HealthReport("node-a", {"gpu-0", "gpu-1", "gpu-2"}, taints, std::chrono::seconds(60));
  ASSERT_EQ(report.size(), 3u);
  EXPECT_EQ(report[0].pool_name, "node-a");
  EXPECT_EQ(report[0].health, kubeletplugin::DeviceHealthStatus::kUnhealthy);
  EXPECT_THAT(report[0].message, HasSubstr("XID 79"));
  EXPECT_EQ(report[0].health_check_timeout, std::chrono::seconds(60));
  EXPECT_EQ(report[1].health, kubeletplugin::DeviceHealthStatus::kHealthy);
  EXPECT_THAT(report[1].message, HasSubstr("XID 13"));
  EXPECT_EQ(report[2].health, kubeletplugin::DeviceHealthStatus::kHealthy);
  EXPECT_EQ(report[2].message, "");
}

TEST(ParseHealthResetTest, AllOrKnownDeviceNames) {
  const std::set<std::string> known{"gpu-0", "gpu-1"};
  EXPECT_EQ(*ParseHealthReset("all", known), std::vector<std::string>{});
  EXPECT_EQ(*ParseHealthReset(" gpu-1 , gpu-0", known), (std::vector<std::string>{"gpu-1", "gpu-0"}));
  auto unknown = ParseHealthReset("gpu-7", known);
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("gpu.nvidia.com/device-health-reset"));
  EXPECT_THAT(unknown.status().message(), HasSubstr("\"gpu-7\" is not a device of this node"));
  EXPECT_FALSE(ParseHealthReset("", known).ok());
  EXPECT_FALSE(ParseHealthReset(" , ", known).ok());
}

// The monitor against the mock NVML of a node: events are appended to the
// driver root's events file; each change the monitor reports is awaited.
class MonitorTest : public ::testing::Test {
 protected:
  void StartOn(const std::string& profile, std::string additional_xids = "") {
    node_ = std::make_unique<MockNode>(profile);
    library_ = node_->Open();
    ASSERT_NE(library_, nullptr);
    inventory_ = node_->Discover();
    watched_ = WatchedDevicesOf(inventory_);
    std::set<std::string> names;
    for (const WatchedDevice& device : watched_) names.insert(device.name);
    auto book = DeviceHealthBook::Open(dir_.path() / "health.json", "boot-1", names);
    ASSERT_TRUE(book.ok()) << book.status();
    book_ = std::move(*book);
    HealthMonitorOptions options;
    options.devices = watched_;
    options.wait_turn = std::chrono::milliseconds(100);
    auto xids = XidPolicy::Parse(additional_xids);
    ASSERT_TRUE(xids.ok());
    options.xids = *xids;
    options.on_change = [this](const std::vector<HealthNote>& notes) {
      std::lock_guard lock(mu_);
      ++changes_;
      notes_.insert(notes_.end(), notes.begin(), notes.end());
      changed_.notify_all();
    };
    auto monitor = NvmlHealthMonitor::Start(*library_, *book_, options);
    ASSERT_TRUE(monitor.ok()) << monitor.status();
    monitor_ = std::move(*monitor);
  }
  void TearDown() override { monitor_.reset(); }

  void Append(const json& line) {
    std::ofstream(node_->root() / "mock-nvml/events.jsonl", std::ios::app) << line.dump() << "\n";
  }
  // Waits until at least `notes` notes came in.
  bool AwaitNotes(std::size_t notes) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(20), [&] { return notes_.size() >= notes; });
  }
  std::vector<HealthNote> Notes() {
    std::lock_guard lock(mu_);
    return notes_;
  }

  TempDir dir_;
  std::unique_ptr<MockNode> node_;
  std::unique_ptr<nvml::Library> library_;
  NodeInventory inventory_;
  std::vector<WatchedDevice> watched_;
  std::unique_ptr<DeviceHealthBook> book_;
  std::mutex mu_;
  std::condition_variable changed_;
  int changes_ = 0;
  std::vector<HealthNote> notes_;
  std::unique_ptr<NvmlHealthMonitor> monitor_;
};

TEST_F(MonitorTest, CriticalXidTaintsTheGpuNoSchedule) {
  StartOn("h100-sxm.json");
  const std::string uuid = inventory_.gpus[2].uuid;
  Append({{"uuid", uuid}, {"type", "xid"}, {"data", 79}});
  ASSERT_TRUE(AwaitNotes(1));
  auto taints = book_->Taints();
  ASSERT_EQ(taints.size(), 1u);
  const std::string device = GpuDeviceName(inventory_.gpus[2].minor);
  ASSERT_TRUE(taints.contains(device));
  EXPECT_EQ(DeviceTaintJson(taints[device][0]),
            json::parse(R"({"key":"gpu.nvidia.com/xid","value":"79","effect":"NoSchedule"})"));
  EXPECT_THAT(Notes()[0].text, HasSubstr("XID 79"));
  EXPECT_FALSE(Notes()[0].recovered);
}

TEST_F(MonitorTest, ApplicationXidTaintsWithEffectNoneAndDoubleBitEccIsXid48) {
  StartOn("h100-sxm.json", "94");
  Append({{"uuid", inventory_.gpus[0].uuid}, {"type", "xid"}, {"data", 13}});
  Append({{"uuid", inventory_.gpus[1].uuid}, {"type", "xid"}, {"data", 94}});
  Append({{"uuid", inventory_.gpus[3].uuid}, {"type", "double_bit_ecc"}, {"data", 0}});
  Append({{"uuid", inventory_.gpus[4].uuid}, {"type", "single_bit_ecc"}, {"data", 0}});
  ASSERT_TRUE(AwaitNotes(3));
  auto taints = book_->Taints();
  EXPECT_EQ(taints[GpuDeviceName(inventory_.gpus[0].minor)][0].effect, TaintEffect::kNone);
  EXPECT_EQ(taints[GpuDeviceName(inventory_.gpus[1].minor)][0].effect, TaintEffect::kNone)
      << "--additional-xids-to-ignore";
  const auto& dbe = taints[GpuDeviceName(inventory_.gpus[3].minor)];
  ASSERT_EQ(dbe.size(), 1u);
  EXPECT_EQ(dbe[0].value, "48");
  EXPECT_EQ(dbe[0].effect, TaintEffect::kNoSchedule);
  EXPECT_FALSE(taints.contains(GpuDeviceName(inventory_.gpus[4].minor))) << "single-bit ECC errors are corrected";
}

TEST_F(MonitorTest, MigDevicesFollowTheirGpuAndAnInstanceEventTaintsOneDevice) {
  StartOn("a100-mig.json");
  const GpuInfo* gpu = nullptr;
  for (const GpuInfo& candidate : inventory_.gpus) {
    if (candidate.mig_enabled && candidate.mig_devices.size() >= 2) gpu = &candidate;
  }
  ASSERT_NE(gpu, nullptr) << "the profile has a GPU with two MIG devices";
  const MigDeviceInfo& mig = gpu->mig_devices[1];
  Append({{"uuid", gpu->uuid}, {"type", "xid"}, {"data", 94}, {"gpuInstanceId", mig.gi_id}, {"computeInstanceId", mig.ci_id}});
  ASSERT_TRUE(AwaitNotes(1));
  auto taints = book_->Taints();
  ASSERT_EQ(taints.size(), 1u);
  EXPECT_TRUE(taints.contains(MigDeviceName(gpu->minor, mig.profile, mig.gi.id, mig.placement.start)));

  Append({{"uuid", gpu->uuid}, {"type", "xid"}, {"data", 79}});
  ASSERT_TRUE(AwaitNotes(2));
  taints = book_->Taints();
  EXPECT_EQ(taints.size(), gpu->mig_devices.size()) << "an event of the whole GPU reaches every MIG device on it";
}

TEST_F(MonitorTest, AFloodOfEventsIsReadInBatches) {
  StartOn("h100-sxm.json");
  {
    std::ofstream out(node_->root() / "mock-nvml/events.jsonl", std::ios::app);
    for (int i = 0; i < 1000; ++i) {
      out << json{{"uuid", inventory_.gpus[static_cast<std::size_t>(i) % inventory_.gpus.size()].uuid}, {"type", "xid"}, {"data", 1000 + i}}.dump()
          << "\n";
    }
  }
  // Every event reaches a note (one per GPU and key per batch, counting the
  // events it stands for); the batch's report comes after its record write.
  const auto repeats = [this] {
    std::size_t total = 0;
    for (const HealthNote& note : notes_) total += note.repeats;
    return total;
  };
  {
    std::unique_lock lock(mu_);
    EXPECT_TRUE(changed_.wait_for(lock, std::chrono::seconds(30), [&] { return repeats() >= 1000; }))
        << repeats() << " of 1000 events reported";
    EXPECT_EQ(repeats(), 1000u);
    EXPECT_LT(changes_, 100) << "a change report (one record write, one publish) per batch, not per event";
    EXPECT_LE(notes_.size(), static_cast<std::size_t>(changes_) * inventory_.gpus.size());
  }
  EXPECT_EQ(monitor_->events_seen(), 1000u);
  EXPECT_LT(book_->writes(), 100u) << "one record write per batch";
  // The latest event of each GPU wins.
  auto taints = book_->Taints();
  EXPECT_EQ(taints.size(), inventory_.gpus.size());
  EXPECT_EQ(taints[GpuDeviceName(inventory_.gpus[0].minor)][0].value, std::to_string(1000 + 992));
}

// GB200: the NVLink fabric's health summary, read each wait turn (NVML has
// no event for it): unhealthy taints every device of the GPU NoSchedule,
// limited capacity with None, healthy again clears it.
TEST_F(MonitorTest, NvlinkFabricHealthFollowsTheFabricInfo) {
  StartOn("gb200-tray.json");
  const std::string uuid = inventory_.gpus[1].uuid;
  const std::string device = GpuDeviceName(inventory_.gpus[1].minor);
  const auto set_fabric = [&](const json& entry) {
    // The state file exists once the mock initialised; the test edits it
    // as the README says (write beside it, rename over it).
    const fs::path state = node_->root() / "mock-nvml/state.json";
    json doc = json::parse(std::ifstream(state), nullptr, false);
    ASSERT_FALSE(doc.is_discarded());
    doc["fabric"][uuid] = entry;
    std::ofstream(state.string() + ".tmp.test") << doc.dump();
    fs::rename(state.string() + ".tmp.test", state);
  };
  set_fabric({{"healthSummary", "unhealthy"}, {"healthMask", 16}});
  ASSERT_TRUE(AwaitNotes(1));
  auto taints = book_->Taints();
  ASSERT_EQ(taints.size(), 1u);
  EXPECT_EQ(DeviceTaintJson(taints[device][0]),
            json::parse(R"({"key":"gpu.nvidia.com/nvlink-fabric","value":"unhealthy","effect":"NoSchedule"})"));
  EXPECT_THAT(Notes()[0].text, HasSubstr("healthMask 0x10: route unhealthy"));

  set_fabric({{"healthSummary", "limited_capacity"}, {"healthMask", 0}});
  ASSERT_TRUE(AwaitNotes(2));
  EXPECT_EQ(book_->Taints()[device][0].effect, TaintEffect::kNone);

  set_fabric({{"healthSummary", "healthy"}, {"healthMask", 0}});
  ASSERT_TRUE(AwaitNotes(3));
  EXPECT_TRUE(book_->Taints().empty());
  EXPECT_TRUE(Notes()[2].recovered);
}

}  // namespace
}  // namespace nvdra::gpu
