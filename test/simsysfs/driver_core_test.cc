// DriverCore against a mock driver root laid out by make-driver-root
// (h100-sxm): the kernel's answers to bind, unbind and driver_override, and
// the tree each leaves.

#include "driver_core.h"

#include <fcntl.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "simsysfs_test_util.h"

namespace nvdra::simsysfs::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kGpu0[] = "0000:18:00.0";  // h100-sxm GPU 0, IOMMU group 20
constexpr char kGpu1[] = "0000:2a:00.0";  // group 21
constexpr char kGpu2[] = "0000:3a:00.0";  // group 22

// Every path under sys/ and dev/vfio with its link target or content.
std::map<std::string, std::string> Snapshot(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (const char* top : {"sys", "dev/vfio"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      const std::string key = entry.path().lexically_relative(root).string();
      if (entry.is_symlink()) {
        out[key] = "-> " + fs::read_symlink(entry.path()).string();
      } else if (entry.is_regular_file()) {
        out[key] = ReadFile(entry.path());
      } else {
        out[key] = "/";
      }
    }
  }
  return out;
}

// What the plugin's rebind does: override, unbind from the current driver,
// bind to the new one.
void Rebind(DriverCore& core, const std::string& bus_id, const std::string& to) {
  WriteFile(core.OverrideFile(bus_id), to);
  ASSERT_TRUE(core.SettleOverride(bus_id).ok());
  const std::string from = core.DriverOf(bus_id);
  if (!from.empty()) {
    ASSERT_TRUE(core.Unbind(from, bus_id).ok()) << from;
  }
  const common::Status status = core.Bind(to, bus_id);
  ASSERT_TRUE(status.ok()) << status;
}

TEST(DriverCore, LayoutBindsEveryGpuToNvidiaWithRelativeLinks) {
  TestRoot root("h100-sxm.json", "", Layout::kSysfsOnly);
  ASSERT_TRUE(root.ok());
  DriverCore core(root.root());
  EXPECT_THAT(core.Drivers(), ::testing::ElementsAre("nvidia", "vfio-pci"));
  ASSERT_EQ(core.Devices().size(), 8U);
  for (const std::string& bus_id : core.Devices()) {
    EXPECT_EQ(core.DriverOf(bus_id), "nvidia") << bus_id;
    EXPECT_EQ(ReadFile(core.OverrideFile(bus_id)), "(null)\n");
  }
  const fs::path device = root.Device(kGpu0);
  EXPECT_EQ(fs::read_symlink(root.root() / "sys/bus/pci/devices" / kGpu0), "../../../devices/pci0000:17/0000:18:00.0");
  EXPECT_EQ(fs::read_symlink(device / "driver"), "../../../bus/pci/drivers/nvidia");
  EXPECT_EQ(fs::read_symlink(device / "iommu_group"), "../../../kernel/iommu_groups/20");
  EXPECT_EQ(fs::read_symlink(root.Driver("nvidia") / kGpu0), "../../../../devices/pci0000:17/0000:18:00.0");
  EXPECT_EQ(fs::canonical(root.root() / "sys/kernel/iommu_groups/20/devices" / kGpu0), fs::canonical(device));
  EXPECT_EQ(ReadFile(device / "vendor"), "0x10de\n");
  EXPECT_EQ(ReadFile(device / "device"), "0x2330\n");
  EXPECT_EQ(ReadFile(device / "class"), "0x030200\n");
  EXPECT_EQ(ReadFile(device / "modalias"), "pci:v000010DEd00002330sv000010DEsd000016C1bc03sc02i00\n");
  // BAR1: the next power of two above 80 GB, 128 GiB.
  const std::string resource = ReadFile(device / "resource");
  EXPECT_EQ(std::count(resource.begin(), resource.end(), '\n'), 13);
  EXPECT_THAT(resource, HasSubstr("0x0000200000000000 0x0000201fffffffff 0x000000000014220c\n"));
  EXPECT_TRUE(fs::exists(root.root() / "dev/iommu"));
  EXPECT_TRUE(fs::exists(root.Vfio() / "vfio"));
  EXPECT_FALSE(fs::exists(root.Vfio() / "20"));
  EXPECT_FALSE(fs::exists(root.Vfio() / "devices"));
}

TEST(DriverCore, BindToVfioPciMakesGroupAndIommufdNodesAndUnbindRemovesThem) {
  TestRoot root("h100-sxm.json", "", Layout::kSysfsOnly);
  ASSERT_TRUE(root.ok());
  DriverCore core(root.root());
  Rebind(core, kGpu0, "vfio-pci");
  const fs::path device = root.Device(kGpu0);
  EXPECT_EQ(fs::read_symlink(device / "driver"), "../../../bus/pci/drivers/vfio-pci");
  EXPECT_FALSE(fs::is_symlink(root.Driver("nvidia") / kGpu0));
  EXPECT_EQ(fs::canonical(root.Driver("vfio-pci") / kGpu0), fs::canonical(device));
  EXPECT_TRUE(fs::exists(root.Vfio() / "20"));
  EXPECT_TRUE(fs::is_directory(device / "vfio-dev/vfio0"));
  EXPECT_TRUE(fs::exists(root.Vfio() / "devices/vfio0"));
  EXPECT_EQ(ReadFile(core.OverrideFile(kGpu0)), "vfio-pci\n");

  Rebind(core, kGpu0, "nvidia");
  EXPECT_EQ(core.DriverOf(kGpu0), "nvidia");
  EXPECT_FALSE(fs::exists(root.Vfio() / "20"));
  EXPECT_FALSE(fs::exists(device / "vfio-dev"));
  EXPECT_FALSE(fs::exists(root.Vfio() / "devices"));
  EXPECT_FALSE(fs::is_symlink(root.Driver("vfio-pci") / kGpu0));
}

TEST(DriverCore, LayoutWithVfioBoundIsWhatTheRebindLeaves) {
  TestRoot laid_out("h100-sxm.json", std::string(kGpu1) + ",00000000:3A:00.0", Layout::kSysfsOnly);
  TestRoot rebound("h100-sxm.json", "", Layout::kSysfsOnly);
  ASSERT_TRUE(laid_out.ok() && rebound.ok());
  DriverCore core(rebound.root());
  Rebind(core, kGpu1, "vfio-pci");
  Rebind(core, kGpu2, "vfio-pci");
  EXPECT_EQ(Snapshot(laid_out.root()), Snapshot(rebound.root()));
}

TEST(DriverCore, IommufdNumbersAreTheLowestFree) {
  TestRoot root("h100-sxm.json", "", Layout::kSysfsOnly);
  ASSERT_TRUE(root.ok());
  DriverCore core(root.root());
  Rebind(core, kGpu0, "vfio-pci");
  Rebind(core, kGpu1, "vfio-pci");
  Rebind(core, kGpu0, "nvidia");
  Rebind(core, kGpu2, "vfio-pci");
  EXPECT_TRUE(fs::exists(root.Device(kGpu2) / "vfio-dev/vfio0"));
  EXPECT_TRUE(fs::exists(root.Device(kGpu1) / "vfio-dev/vfio1"));
  EXPECT_TRUE(fs::exists(root.Vfio() / "devices/vfio0"));
  EXPECT_TRUE(fs::exists(root.Vfio() / "devices/vfio1"));
}

TEST(DriverCore, GroupNodeStaysWhileAnotherDeviceOfTheGroupIsOnVfioPci) {
  TestRoot scratch("h100-sxm.json", "", Layout::kSysfsOnly);
  nlohmann::json profile = nlohmann::json::parse(std::ifstream(fs::path(NVDRA_MOCKNVML_PROFILES_DIR) / "h100-sxm.json"));
  profile["devices"][0]["pci"]["iommuGroup"] = 40;
  profile["devices"][1]["pci"]["iommuGroup"] = 40;
  const fs::path patched = scratch.dir() / "shared-group.json";
  std::ofstream(patched) << profile.dump(2);
  TestRoot root(patched.string(), "", Layout::kSysfsOnly);
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(LinkName(root.Device(kGpu2) / "iommu_group"), "22");  // defaults keep 20 + index
  DriverCore core(root.root());
  Rebind(core, kGpu0, "vfio-pci");
  Rebind(core, kGpu1, "vfio-pci");
  Rebind(core, kGpu0, "nvidia");
  EXPECT_TRUE(fs::exists(root.Vfio() / "40"));
  Rebind(core, kGpu1, "nvidia");
  EXPECT_FALSE(fs::exists(root.Vfio() / "40"));
}

TEST(DriverCore, UnbindFromADriverTheDeviceIsNotOnIsEnodevAndChangesNothing) {
  TestRoot root("h100-sxm.json", "", Layout::kSysfsOnly);
  ASSERT_TRUE(root.ok());
  DriverCore core(root.root());
  const auto before = Snapshot(root.root());
  const common::Status status = core.Unbind("vfio-pci", kGpu0);
  EXPECT_EQ(status.code(), common::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), StartsWith("ENODEV: "));
  EXPECT_THAT(status.message(), HasSubstr("bound to nvidia"));
  EXPECT_THAT(core.Unbind("nvidia", "0000:99:00.0").message(), StartsWith("ENODEV: no PCI device"));
  EXPECT_THAT(core.Unbind("nvidia", "../../..").message(), StartsWith("ENODEV: no PCI device"));
  EXPECT_EQ(Snapshot(root.root()), before);
}

TEST(DriverCore, BindOfABoundDeviceIsEbusy) {
  TestRoot root("h100-sxm.json", "", Layout::kSysfsOnly);
  ASSERT_TRUE(root.ok());
  DriverCore core(root.root());
  const auto before = Snapshot(root.root());
  const common::Status status = core.Bind("vfio-pci", kGpu0);
  EXPECT_EQ(status.code(), common::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), StartsWith("EBUSY: "));
  EXPECT_EQ(Snapshot(root.root()), before);
}

TEST(DriverCore, DriverOverrideNamingAnotherDriverRefusesTheBind) {
  TestRoot root("h100-sxm.json", "", Layout::kSysfsOnly);
  ASSERT_TRUE(root.ok());
  DriverCore core(root.root());
  ASSERT_TRUE(core.Unbind("nvidia", kGpu0).ok());
  WriteFile(core.OverrideFile(kGpu0), "nvidia");
  ASSERT_TRUE(core.SettleOverride(kGpu0).ok());
  const auto before = Snapshot(root.root());
  const common::Status status = core.Bind("vfio-pci", kGpu0);
  EXPECT_THAT(status.message(), StartsWith("ENODEV: "));
  EXPECT_THAT(status.message(), HasSubstr("driver_override is nvidia"));
  EXPECT_EQ(core.DriverOf(kGpu0), "");
  EXPECT_EQ(Snapshot(root.root()), before);
  EXPECT_TRUE(core.Bind("nvidia", kGpu0).ok());
}

TEST(DriverCore, NvidiaDoesNotMatchAnotherVendor) {
  TestRoot root("h100-sxm.json", "", Layout::kSysfsOnly);
  ASSERT_TRUE(root.ok());
  DriverCore core(root.root());
  ASSERT_TRUE(core.Unbind("nvidia", kGpu0).ok());
  WriteFile(root.Device(kGpu0) / "vendor", "0x1002\n");
  EXPECT_THAT(core.Bind("nvidia", kGpu0).message(), StartsWith("ENODEV: nvidia does not match"));
  EXPECT_EQ(core.DriverOf(kGpu0), "");
}

TEST(DriverCore, BlankDriverOverrideReadsBackAsNull) {
  TestRoot root("h100-sxm.json", "", Layout::kSysfsOnly);
  ASSERT_TRUE(root.ok());
  DriverCore core(root.root());
  for (const char* blank : {"", "\n", "  \n"}) {
    WriteFile(core.OverrideFile(kGpu0), "vfio-pci");
    ASSERT_EQ(core.SettleOverride(kGpu0)->value, "vfio-pci");
    EXPECT_EQ(ReadFile(core.OverrideFile(kGpu0)), "vfio-pci\n");
    WriteFile(core.OverrideFile(kGpu0), blank);
    ASSERT_EQ(core.SettleOverride(kGpu0)->value, "");
    EXPECT_EQ(ReadFile(core.OverrideFile(kGpu0)), "(null)\n") << "after writing '" << blank << "'";
  }
  EXPECT_FALSE(core.SettleOverride("0000:99:00.0").ok());
}

TEST(DriverCore, DriverOverrideOpenElsewhereIsNotRewrittenUnderItsWriter) {
  TestRoot root("h100-sxm.json", "", Layout::kSysfsOnly);
  ASSERT_TRUE(root.ok());
  DriverCore core(root.root());
  const fs::path file = core.OverrideFile(kGpu0);
  WriteFile(file, "");
  {
    common::UniqueFd writer(::open(file.c_str(), O_WRONLY | O_CLOEXEC));
    ASSERT_TRUE(writer.valid());
    auto settled = core.SettleOverride(kGpu0);
    ASSERT_TRUE(settled.ok()) << settled.status();
    EXPECT_TRUE(settled->deferred);
    EXPECT_TRUE(settled->opened_for_write);
    EXPECT_EQ(ReadFile(file), "");
  }
  auto settled = core.SettleOverride(kGpu0);
  ASSERT_TRUE(settled.ok()) << settled.status();
  EXPECT_FALSE(settled->deferred);
  EXPECT_EQ(ReadFile(file), "(null)\n");
}

}  // namespace
}  // namespace nvdra::simsysfs::testing
