// The typed prepared-device groups and their upstream JSON codec. The
// byte-for-byte round trips over files the Go types wrote are in
// checkpoint_test.cc; these cover the shapes and the errors.
#include "kubeletplugin/prepared_devices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kubeletplugin/go_json.h"

namespace nvdra::kubeletplugin {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

CheckpointedDevice Device(const std::string& name) {
  return {.device = {.requests = {"r"}, .pool_name = "node-a", .device_name = name, .cdi_device_ids = {"v/c=" + name}},
          .share_id = std::nullopt,
          .metadata = nullptr};
}

TEST(PreparedDevicesTest, GpuFamilyEncodesAsTheGoStructsDo) {
  const std::vector<PreparedDeviceGroup> groups = {
      {.devices = {{.kind = PreparedGpu{.uuid = "GPU-1"}, .device = Device("gpu-0")},
                   {.kind = PreparedMig{.parent_minor = 1, .gi_id = 2, .ci_id = 0, .mig_uuid = "MIG-1",
                                        .parent_uuid = "GPU-2", .parent_pci_bus_id = ""},
                    .device = Device("gpu-1-mig")},
                   {.kind = PreparedVfio{.uuid = "GPU-3", .pci_bus_id = "0000:1b:00.0"}, .device = Device("gpu-3")}},
       .config_state = GpuConfigState{.mps_control_daemon_id = "", .mps_applied = std::nullopt,
                                      .time_slice_applied = true}}};
  EXPECT_EQ(
      GoJson(EncodePreparedGroups(groups)),
      R"([{"devices":[)"
      R"({"gpu":{"info":{"uuid":"GPU-1"},"device":{"Requests":["r"],"PoolName":"node-a","DeviceName":"gpu-0","CDIDeviceIDs":["v/c=gpu-0"]}},"mig":null},)"
      R"({"gpu":null,"mig":{"concrete":{"parentMinor":1,"giId":2,"ciId":0,"migUUID":"MIG-1","parentUUID":"GPU-2"},"device":{"Requests":["r"],"PoolName":"node-a","DeviceName":"gpu-1-mig","CDIDeviceIDs":["v/c=gpu-1-mig"]}}},)"
      R"({"gpu":null,"mig":null,"vfio":{"info":{"uuid":"GPU-3","pciBusID":"0000:1b:00.0"},"device":{"Requests":["r"],"PoolName":"node-a","DeviceName":"gpu-3","CDIDeviceIDs":["v/c=gpu-3"]}}}],)"
      R"("configState":{"timeSliceApplied":true}}])");
  auto decoded = DecodePreparedGroups(EncodePreparedGroups(groups), "preparedDevices");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, groups);
}

// The Fabric Manager partitions a claim holds: an added key (upstream's
// decoder ignores it); absent means not recorded, [] that it needs none.
TEST(PreparedDevicesTest, FabricPartitionIdsRoundTripAndStayAbsentWhenUnrecorded) {
  std::vector<PreparedDeviceGroup> groups = {
      {.devices = {{.kind = PreparedGpu{.uuid = "GPU-1"}, .device = Device("gpu-0")}},
       .config_state = GpuConfigState{.mps_control_daemon_id = "", .mps_applied = std::nullopt,
                                      .time_slice_applied = std::nullopt,
                                      .fabric_partition_ids = std::vector<std::uint32_t>{5, 1}}}};
  const Json encoded = EncodePreparedGroups(groups);
  EXPECT_EQ(encoded[0]["configState"], Json::parse(R"({"fabricPartitionIDs":[5,1]})"));
  auto decoded = DecodePreparedGroups(encoded, "preparedDevices");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, groups);
  std::get<GpuConfigState>(groups[0].config_state).fabric_partition_ids = std::vector<std::uint32_t>{};
  EXPECT_EQ(*DecodePreparedGroups(EncodePreparedGroups(groups), "preparedDevices"), groups) << "[] is kept";
  std::get<GpuConfigState>(groups[0].config_state).fabric_partition_ids.reset();
  EXPECT_EQ(EncodePreparedGroups(groups)[0]["configState"], Json::object());
  auto bad = DecodePreparedGroups(Json::parse(R"([{"devices":[],"configState":{"fabricPartitionIDs":[-1]}}])"),
                                  "preparedDevices");
  EXPECT_THAT(bad.status().message(), HasSubstr("configState.fabricPartitionIDs[]: want a partition id"));
}

TEST(PreparedDevicesTest, ComputeDomainFamilyWritesBothKindsAndItsConfigState) {
  const std::vector<PreparedDeviceGroup> groups = {
      {.devices = {{.kind = PreparedDaemon{.id = 0}, .device = Device("daemon-0")}},
       .config_state = CdConfigState{.type = "daemon", .compute_domain = "cd-uid"}}};
  EXPECT_EQ(GoJson(EncodePreparedGroups(groups)),
            R"([{"devices":[{"channel":null,"daemon":{"info":{"id":0},"device":{"Requests":["r"],"PoolName":"node-a",)"
            R"("DeviceName":"daemon-0","CDIDeviceIDs":["v/c=daemon-0"]}}}],)"
            R"("configState":{"Type":"daemon","ComputeDomain":"cd-uid"}}])");
  auto decoded = DecodePreparedGroups(EncodePreparedGroups(groups), "preparedDevices");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, groups);
}

TEST(PreparedDevicesTest, KubeletDevicesListsEveryEntryInOrder) {
  const std::vector<PreparedDeviceGroup> groups = {
      {.devices = {{.kind = PreparedChannel{.id = 3}, .device = Device("channel-3")}},
       .config_state = CdConfigState{}},
      {.devices = {{.kind = PreparedDaemon{.id = 0}, .device = Device("daemon-0")}}, .config_state = CdConfigState{}}};
  const std::vector<PreparedDevice> devices = KubeletDevices(groups);
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].device_name, "channel-3");
  EXPECT_EQ(devices[1].device_name, "daemon-0");
  EXPECT_EQ(PreparedDeviceKindName(groups[0].devices[0].kind), "channel");
}

TEST(PreparedDevicesTest, NullIsNoGroupsAndUnknownMembersAreIgnored) {
  auto none = DecodePreparedGroups(Json(), "preparedDevices");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto extra = DecodePreparedGroups(
      Json::parse(R"([{"devices":[{"gpu":{"info":{"uuid":"G","future":1},"device":{"DeviceName":"gpu-0"}},"mig":null,
                      "later":{}}],"configState":{"newField":true},"more":[]}])"),
      "preparedDevices");
  ASSERT_TRUE(extra.ok()) << extra.status();
  EXPECT_EQ(std::get<PreparedGpu>((*extra)[0].devices[0].kind).uuid, "G");
}

TEST(PreparedDevicesTest, MalformedEntriesAreDataLossNamingThePath) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {R"({"devices":[]})", "preparedDevices: want an array"},
      {R"([{"devices":[{"gpu":null,"mig":null}],"configState":{}}])", "preparedDevices[0].devices[0]: no device"},
      {R"([{"devices":[{"gpu":{"info":{"uuid":"a"}},"mig":{"concrete":{}}}],"configState":{}}])",
       "more than one device kind"},
      {R"([{"devices":[{"channel":{"info":{"id":"x"}},"daemon":null}],"configState":{"Type":"channel"}}])",
       "preparedDevices[0].devices[0].channel.info.id: want a 32-bit integer"},
      {R"([{"devices":[{"gpu":{"info":{}},"channel":null,"daemon":{"info":{"id":0}}}],"configState":{}}])",
       "a GPU device (gpu) in a compute-domain group"},
      {R"([{"devices":[{"gpu":{"device":{"CDIDeviceIDs":[1]}},"mig":null}],"configState":{}}])",
       "preparedDevices[0].devices[0].gpu.device.CDIDeviceIDs[]: want a string"},
      {R"([{"devices":[{"gpu":{"info":{}}}],"configState":{"timeSliceApplied":"yes"}}])",
       "configState.timeSliceApplied: want a boolean"},
  };
  for (const Case& c : cases) {
    auto decoded = DecodePreparedGroups(Json::parse(c.json), "preparedDevices");
    ASSERT_FALSE(decoded.ok()) << c.json;
    EXPECT_EQ(decoded.status().code(), common::StatusCode::kDataLoss) << c.json;
    EXPECT_THAT(decoded.status().message(), HasSubstr(c.message)) << c.json;
  }
}

}  // namespace
}  // namespace nvdra::kubeletplugin
