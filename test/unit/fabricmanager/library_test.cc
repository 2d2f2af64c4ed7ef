#include "fabricmanager/library.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "scoped_env.h"

namespace nvdra::fabricmanager {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr const char* kModule1Uuid = "GPU-3b9e6a71-0d4c-4f2a-9b57-6e1c2d8a4f10";

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Temp file and rename, as the mock's state file demands of every writer.
void WriteText(const fs::path& path, const std::string& text) {
  const fs::path temp = path.string() + ".test-tmp";
  std::ofstream(temp, std::ios::trunc) << text;
  fs::rename(temp, path);
}

std::set<std::uint32_t> ModuleIds(const Partition& partition) {
  std::set<std::uint32_t> ids;
  for (const PartitionGpu& gpu : partition.gpus) ids.insert(gpu.physical_id);
  return ids;
}

LibraryOptions AtRoot(const fs::path& root) {
  LibraryOptions options;
  options.driver_root = root;
  return options;
}

LibraryOptions FromFile(const fs::path& file) {
  LibraryOptions options;
  options.library_path = file;
  return options;
}

const Partition* Find(const std::vector<Partition>& partitions, std::uint32_t id) {
  auto it = std::find_if(partitions.begin(), partitions.end(), [&](const Partition& p) { return p.id == id; });
  return it == partitions.end() ? nullptr : &*it;
}

// A driver root with what the mock Fabric Manager needs: its library (a copy,
// so that each root is its own loaded library) and the hgx-h100 profile.
// make-driver-root lays out the same files and much more (test/mocknvml).
class FabricManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "fabricmanager-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    root_ = dir_ / "root";
    fs::create_directories(root_ / "usr/lib64");
    fs::create_directories(root_ / "mock-nvml");
    fs::copy_file(NVDRA_MOCKNVFM_PATH, root_ / "usr/lib64/libnvfm.so.1");
    fs::copy_file(fs::path(NVDRA_MOCKNVML_PROFILES_DIR) / "hgx-h100.json", root_ / "mock-nvml/profile.json");
    auto library = Library::Open(AtRoot(root_));
    ASSERT_TRUE(library.ok()) << library.status();
    library_ = std::move(*library);
  }
  void TearDown() override {
    library_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  fs::path state_file() const { return root_ / "mock-nvml/fabric-manager.json"; }
  // Merges `patch` into the FM state file (the test's faults).
  void PatchState(const json& patch) {
    json state = fs::exists(state_file()) ? json::parse(ReadText(state_file())) : json::object();
    state.merge_patch(patch);
    WriteText(state_file(), state.dump());
  }
  StatusOr<Connection> Connect(const Address& address = Address::Tcp("127.0.0.1")) const {
    return library_->Connect(address, 1000ms);
  }
  Connection ConnectOrDie() const {
    auto connection = Connect();
    EXPECT_TRUE(connection.ok()) << connection.status();
    return std::move(connection).value();
  }
  std::vector<Partition> PartitionsOrDie(const Connection& connection) const {
    auto partitions = connection.SupportedPartitions();
    EXPECT_TRUE(partitions.ok()) << partitions.status();
    return partitions.ok() ? *partitions : std::vector<Partition>{};
  }
  std::set<std::uint32_t> Active(const Connection& connection) const {
    std::set<std::uint32_t> active;
    for (const Partition& p : PartitionsOrDie(connection)) {
      if (p.is_active) active.insert(p.id);
    }
    return active;
  }
  // A raw FM handle through the loaded library, to see FM's own codes.
  abi::fmHandle_t RawConnect() const {
    abi::fmConnectParams_t params{};
    params.version = abi::fmConnectParams_version;
    std::snprintf(params.addressInfo, sizeof(params.addressInfo), "127.0.0.1");
    params.timeoutMs = 1000;
    params.addressType = abi::NV_FM_API_ADDR_TYPE_INET;
    abi::fmHandle_t handle = nullptr;
    EXPECT_EQ(library_->fn().fmConnect(&params, &handle), abi::FM_ST_SUCCESS);
    return handle;
  }

  testing::ScopedEnv no_profile_{"MOCK_NVML_PROFILE", nullptr};
  testing::ScopedEnv no_state_{"MOCK_NVFM_STATE", nullptr};
  fs::path dir_;
  fs::path root_;
  std::unique_ptr<Library> library_;
};

TEST_F(FabricManagerTest, HgxH100HasTheFifteenDefaultPartitions) {
  Connection connection = ConnectOrDie();
  std::vector<Partition> partitions = PartitionsOrDie(connection);
  ASSERT_EQ(partitions.size(), 15U);
  const std::map<std::uint32_t, std::set<std::uint32_t>> expected = {
      {0, {1, 2, 3, 4, 5, 6, 7, 8}}, {1, {1, 2, 3, 4}}, {2, {5, 6, 7, 8}}, {3, {1, 3}}, {4, {2, 4}},
      {5, {5, 7}}, {6, {6, 8}}, {7, {1}}, {8, {2}}, {9, {3}}, {10, {4}}, {11, {5}}, {12, {6}}, {13, {7}},
      {14, {8}}};
  std::map<std::size_t, int> by_size;
  for (const Partition& p : partitions) {
    ASSERT_TRUE(expected.contains(p.id)) << p.id;
    EXPECT_EQ(ModuleIds(p), expected.at(p.id)) << "partition " << p.id;
    EXPECT_FALSE(p.is_active);
    ++by_size[p.gpus.size()];
    for (const PartitionGpu& gpu : p.gpus) {
      // Multi-GPU partitions use all 18 NVLinks of each GPU, one-GPU ones none.
      EXPECT_EQ(gpu.num_nvlinks_available, p.gpus.size() > 1 ? 18U : 0U) << "partition " << p.id;
      EXPECT_EQ(gpu.max_num_nvlinks, 18U);
      EXPECT_EQ(gpu.nvlink_line_rate_mbps, 26562U);
    }
  }
  EXPECT_EQ(by_size, (std::map<std::size_t, int>{{8, 1}, {4, 2}, {2, 4}, {1, 8}}));
  const Partition* single = Find(partitions, 7);
  ASSERT_NE(single, nullptr);
  EXPECT_EQ(single->gpus[0].uuid, kModule1Uuid);
  EXPECT_EQ(single->gpus[0].pci_bus_id, "0000:18:00.0");
}

TEST_F(FabricManagerTest, ActivateAndDeactivateAreRecordedInTheStateFile) {
  Connection connection = ConnectOrDie();
  ASSERT_TRUE(connection.Activate(1).ok());
  EXPECT_EQ(Active(connection), (std::set<std::uint32_t>{1}));
  EXPECT_EQ(json::parse(ReadText(state_file())).at("activePartitions"), json::array({1}));
  ASSERT_TRUE(connection.Activate(2).ok());
  EXPECT_EQ(Active(connection), (std::set<std::uint32_t>{1, 2}));
  ASSERT_TRUE(connection.Deactivate(1).ok());
  EXPECT_EQ(Active(connection), (std::set<std::uint32_t>{2}));
}

TEST_F(FabricManagerTest, OverlappingPartitionIsRefusedNamingTheActiveOne) {
  Connection connection = ConnectOrDie();
  ASSERT_TRUE(connection.Activate(1).ok());  // module ids 1-4
  for (std::uint32_t id : {0U, 3U, 4U, 7U, 10U}) {
    Status status = connection.Activate(id);
    EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << id;
    EXPECT_THAT(status.message(), HasSubstr("FM_ST_IN_USE")) << id;
    EXPECT_THAT(status.message(), HasSubstr("active partition 1 holds GPU module ids")) << id;
  }
  EXPECT_TRUE(connection.Activate(5).ok());  // 5 and 7: disjoint
  EXPECT_TRUE(connection.Activate(14).ok());  // 8
  EXPECT_EQ(Active(connection), (std::set<std::uint32_t>{1, 5, 14}));
}

TEST_F(FabricManagerTest, RepeatedActivateAndDeactivateSucceed) {
  Connection connection = ConnectOrDie();
  EXPECT_TRUE(connection.Activate(3).ok());
  EXPECT_TRUE(connection.Activate(3).ok());
  EXPECT_EQ(Active(connection), (std::set<std::uint32_t>{3}));
  EXPECT_TRUE(connection.Deactivate(3).ok());
  EXPECT_TRUE(connection.Deactivate(3).ok());
  EXPECT_TRUE(Active(connection).empty());
}

// What FM itself answers (nv_fm_agent.h), under the idempotent layer above.
TEST_F(FabricManagerTest, MockAnswersFabricManagersCodes) {
  abi::fmHandle_t handle = RawConnect();
  const auto& fn = library_->fn();
  EXPECT_EQ(fn.fmActivateFabricPartition(handle, 1), abi::FM_ST_SUCCESS);
  EXPECT_EQ(fn.fmActivateFabricPartition(handle, 1), abi::FM_ST_IN_USE);       // already active
  EXPECT_EQ(fn.fmActivateFabricPartition(handle, 3), abi::FM_ST_IN_USE);       // overlaps 1
  EXPECT_EQ(fn.fmActivateFabricPartition(handle, 15), abi::FM_ST_BADPARAM);    // unsupported id
  EXPECT_EQ(fn.fmDeactivateFabricPartition(handle, 2), abi::FM_ST_UNINITIALIZED);  // not active
  EXPECT_EQ(fn.fmDeactivateFabricPartition(handle, 1), abi::FM_ST_SUCCESS);
  abi::fmFabricPartitionList_t list{};
  list.version = abi::fmFabricPartitionList_version - 1;
  EXPECT_EQ(fn.fmGetSupportedFabricPartitions(handle, &list), abi::FM_ST_VERSION_MISMATCH);
  EXPECT_EQ(fn.fmDisconnect(handle), abi::FM_ST_SUCCESS);
  EXPECT_EQ(fn.fmDisconnect(handle), abi::FM_ST_BADPARAM);
  EXPECT_EQ(fn.fmActivateFabricPartition(handle, 1), abi::FM_ST_BADPARAM);
  // The library is initialised once per process; a second init says so.
  EXPECT_EQ(fn.fmLibInit(), abi::FM_ST_IN_USE);
}

TEST_F(FabricManagerTest, UnknownPartitionIsInvalidArgument) {
  Connection connection = ConnectOrDie();
  EXPECT_EQ(connection.Activate(99).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(connection.Deactivate(99).code(), StatusCode::kInvalidArgument);
}

TEST_F(FabricManagerTest, FabricManagerDownIsUnavailableNamingTheAddress) {
  Connection before = ConnectOrDie();
  PatchState({{"running", false}});
  auto connection = Connect();
  ASSERT_FALSE(connection.ok());
  EXPECT_EQ(connection.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(connection.status().message(), HasSubstr("127.0.0.1:6666"));
  EXPECT_THAT(connection.status().message(), HasSubstr("FM_ST_CONNECTION_NOT_VALID"));
  // A connection made before FM stopped is dropped too.
  EXPECT_EQ(before.SupportedPartitions().status().code(), StatusCode::kUnavailable);
}

TEST_F(FabricManagerTest, OnlyTheConfiguredAddressAnswers) {
  auto other_port = Connect(Address::Tcp("127.0.0.1:7777"));
  EXPECT_EQ(other_port.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(other_port.status().message(), HasSubstr("127.0.0.1:7777"));
  EXPECT_TRUE(Connect(Address::Tcp("127.0.0.1:6666")).ok());
  EXPECT_EQ(Connect(Address::UnixSocket("/run/nvidia-fabricmanager/socket")).status().code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(Connect(Address::Tcp("localhost")).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(FabricManagerTest, UnixSocketReplacesTcpWhenConfigured) {
  PatchState({{"listen", {{"unixSocketPath", "/run/nvidia-fabricmanager/socket"}}}});
  auto unix_connection = Connect(Address::UnixSocket("/run/nvidia-fabricmanager/socket"));
  ASSERT_TRUE(unix_connection.ok()) << unix_connection.status();
  EXPECT_EQ(PartitionsOrDie(*unix_connection).size(), 15U);
  auto tcp = Connect();
  EXPECT_EQ(tcp.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(Connect(Address::UnixSocket("/elsewhere")).status().message(), HasSubstr("unix:/elsewhere"));
}

TEST_F(FabricManagerTest, SlowFabricManagerDelaysEveryCall) {
  Connection connection = ConnectOrDie();
  PatchState({{"delayMs", 150}});
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(connection.SupportedPartitions().ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms);
  // A connect that waits less than FM takes gives up: not reachable.
  const auto connect_start = std::chrono::steady_clock::now();
  auto impatient = library_->Connect(Address::Tcp("127.0.0.1"), 50ms);
  EXPECT_EQ(impatient.status().code(), StatusCode::kUnavailable);
  EXPECT_GE(std::chrono::steady_clock::now() - connect_start, 50ms);
}

TEST_F(FabricManagerTest, RestartDropsOldConnectionsAndKeepsPartitions) {
  Connection old_connection = ConnectOrDie();
  ASSERT_TRUE(old_connection.Activate(2).ok());
  PatchState({{"generation", 2}});
  auto stale = old_connection.SupportedPartitions();
  EXPECT_EQ(stale.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(stale.status().message(), HasSubstr("FM_ST_CONNECTION_NOT_VALID"));
  EXPECT_EQ(old_connection.Activate(1).code(), StatusCode::kUnavailable);
  Connection fresh = ConnectOrDie();
  EXPECT_EQ(Active(fresh), (std::set<std::uint32_t>{2}));
}

TEST_F(FabricManagerTest, GpuWithFailedNvlinksBlocksItsMultiGpuPartitions) {
  PatchState({{"nvlinkFailedGpus", {{kModule1Uuid, {0, 1}}}}});
  Connection connection = ConnectOrDie();
  Status status = connection.Activate(1);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("FM_ST_NVLINK_ERROR"));
  EXPECT_EQ(connection.Activate(3).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(connection.Activate(7).ok());  // module 1 alone: no NVLinks needed
  EXPECT_TRUE(connection.Activate(2).ok());  // module ids 5-8
  // Kept: Find points into the list (ThreadSanitizer caught a read of a
  // temporary list freed at the end of the statement).
  const std::vector<Partition> partitions = PartitionsOrDie(connection);
  const Partition* first_half = Find(partitions, 1);
  ASSERT_NE(first_half, nullptr);
  EXPECT_EQ(first_half->gpus[0].num_nvlinks_available, 16U);
  EXPECT_EQ(first_half->gpus[1].num_nvlinks_available, 18U);
  // HGX H100: FM lists no failed devices (nv_fm_agent.h).
  auto failures = connection.NvlinkFailedDevices();
  ASSERT_TRUE(failures.ok()) << failures.status();
  EXPECT_TRUE(failures->gpus.empty());
  EXPECT_TRUE(failures->switches.empty());
}

TEST_F(FabricManagerTest, FailedNvlinksAreListedWhereFabricManagerReportsThem) {
  json profile = json::parse(ReadText(root_ / "mock-nvml/profile.json"));
  profile["fabricManager"]["reportsNvlinkFailedDevices"] = true;
  WriteText(root_ / "mock-nvml/profile.json", profile.dump());
  PatchState({{"nvlinkFailedGpus", {{kModule1Uuid, {0, 1}}}}});
  Connection connection = ConnectOrDie();
  auto failures = connection.NvlinkFailedDevices();
  ASSERT_TRUE(failures.ok()) << failures.status();
  ASSERT_EQ(failures->gpus.size(), 1U);
  EXPECT_EQ(failures->gpus[0].uuid, kModule1Uuid);
  EXPECT_EQ(failures->gpus[0].pci_bus_id, "0000:18:00.0");
  EXPECT_EQ(failures->gpus[0].ports, (std::vector<std::uint32_t>{0, 1}));
}

TEST_F(FabricManagerTest, SecondLibraryInTheProcessSharesTheInitAndTheState) {
  Connection first = ConnectOrDie();
  {
    auto second = Library::Open(AtRoot(root_));
    ASSERT_TRUE(second.ok()) << second.status();
    auto connection = (*second)->Connect(Address::Tcp("127.0.0.1"), 1000ms);
    ASSERT_TRUE(connection.ok()) << connection.status();
    ASSERT_TRUE(connection->Activate(4).ok());
  }
  // The second Library's end did not shut the library down under the first.
  EXPECT_EQ(Active(first), (std::set<std::uint32_t>{4}));
  EXPECT_TRUE(Connect().ok());
}

TEST_F(FabricManagerTest, AnotherProcessSeesTheActivation) {
  Connection connection = ConnectOrDie();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Its own Library and connection; only the state file is shared.
    auto library = Library::Open(AtRoot(root_));
    if (!library.ok()) ::_exit(2);
    auto own = (*library)->Connect(Address::Tcp("127.0.0.1"), 1000ms);
    if (!own.ok()) ::_exit(3);
    ::_exit(own->Activate(2).ok() ? 0 : 4);
  }
  int wait_status = 0;
  ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
  ASSERT_TRUE(WIFEXITED(wait_status));
  ASSERT_EQ(WEXITSTATUS(wait_status), 0);
  EXPECT_EQ(Active(connection), (std::set<std::uint32_t>{2}));
  Status overlap = connection.Activate(5);  // module ids 5 and 7
  EXPECT_EQ(overlap.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(overlap.message(), HasSubstr("active partition 2"));
}

TEST(FabricManagerLibrary, MissingLibraryNamesThePathsTried) {
  auto library = Library::Open(AtRoot("/nonexistent-root"));
  ASSERT_FALSE(library.ok());
  EXPECT_EQ(library.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(library.status().message(), HasSubstr("/nonexistent-root/usr/lib64/libnvfm.so.1"));
  EXPECT_THAT(library.status().message(), HasSubstr("/nonexistent-root/usr/lib/x86_64-linux-gnu/libnvfm.so"));
}

TEST(FabricManagerLibrary, LibraryWithoutFabricManagerFunctionsIsRefusedNamingThem) {
  auto library = Library::Open(FromFile(NVDRA_MINIMAL_NVML_PATH));
  ASSERT_FALSE(library.ok());
  EXPECT_EQ(library.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(library.status().message(), HasSubstr("fmLibInit, fmLibShutdown, fmConnect, fmDisconnect"));
}

TEST(FabricManagerLibrary, MissingCallIsUnimplementedAndNamed) {
  auto library = Library::Open(FromFile(NVDRA_MINIMAL_NVFM_PATH));
  ASSERT_TRUE(library.ok()) << library.status();
  EXPECT_THAT((*library)->MissingFunctions(),
              ::testing::UnorderedElementsAre("fmGetSupportedFabricPartitions", "fmActivateFabricPartition",
                                              "fmDeactivateFabricPartition", "fmGetNvlinkFailedDevices"));
  auto connection = (*library)->Connect(Address::Tcp("127.0.0.1"), 1000ms);
  ASSERT_TRUE(connection.ok()) << connection.status();
  auto partitions = connection->SupportedPartitions();
  EXPECT_EQ(partitions.status().code(), StatusCode::kUnimplemented);
  EXPECT_THAT(partitions.status().message(), HasSubstr("fmGetSupportedFabricPartitions"));
  EXPECT_EQ(connection->Activate(1).code(), StatusCode::kUnimplemented);
}

TEST(FabricManagerLibrary, ReturnCodesMapToWhatCallersDo) {
  EXPECT_EQ(FmReturnToStatusCode(abi::FM_ST_CONNECTION_NOT_VALID), StatusCode::kUnavailable);
  EXPECT_EQ(FmReturnToStatusCode(abi::FM_ST_NOT_CONFIGURED), StatusCode::kUnavailable);
  EXPECT_EQ(FmReturnToStatusCode(abi::FM_ST_BADPARAM), StatusCode::kInvalidArgument);
  EXPECT_EQ(FmReturnToStatusCode(abi::FM_ST_NVLINK_ERROR), StatusCode::kFailedPrecondition);
  EXPECT_EQ(FmReturnToStatusCode(abi::FM_ST_IN_USE), StatusCode::kFailedPrecondition);
  EXPECT_EQ(FmReturnToStatusCode(abi::FM_ST_GENERIC_ERROR), StatusCode::kInternal);
  EXPECT_EQ(FmReturnToStatusCode(-100), StatusCode::kInternal);
  EXPECT_EQ(FmReturnName(abi::FM_ST_NVLINK_ERROR), "FM_ST_NVLINK_ERROR");
  EXPECT_EQ(FmReturnName(-100), "FM_ST_<-100>");
  EXPECT_EQ(Address::Tcp("10.0.0.1").ToString(), "10.0.0.1:6666");
  EXPECT_EQ(Address::Tcp("10.0.0.1:7000").ToString(), "10.0.0.1:7000");
  EXPECT_EQ(Address::UnixSocket("/run/fm").ToString(), "unix:/run/fm");
}

}  // namespace
}  // namespace nvdra::fabricmanager
