// PciSysfs over a hand-made sysfs tree (the layout the kernel gives, and the
// mock driver root copies), the VFIO twin's published form, and the pure
// helpers (addressable memory, the PCI-address UUID).

#include "gpu/pci_sysfs.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "gpu/published_devices.h"

namespace nvdra::gpu {
namespace {

namespace fs = std::filesystem;

class FakeSysfs {
 public:
  FakeSysfs() : root_(fs::temp_directory_path() / ("nvdra-pci-" + std::to_string(::getpid()) + "-" +
                                                   std::to_string(counter_++))) {
    fs::remove_all(root_);
    fs::create_directories(root_ / "sys/bus/pci/devices");
    fs::create_directories(root_ / "sys/bus/pci/drivers/nvidia");
    fs::create_directories(root_ / "sys/bus/pci/drivers/vfio-pci");
  }
  ~FakeSysfs() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  // A function under pci<domain>:<root bus>, bound to `driver` ("" none).
  fs::path Add(const std::string& bus_id, const std::string& vendor, const std::string& cls,
               const std::string& driver, int group, const std::string& resource = "") {
    const fs::path dir = root_ / "sys/devices" / ("pci" + bus_id.substr(0, 5) + "17") / bus_id;
    fs::create_directories(dir);
    std::ofstream(dir / "vendor") << vendor << "\n";
    std::ofstream(dir / "device") << "0x2330\n";
    std::ofstream(dir / "class") << cls << "\n";
    std::ofstream(dir / "numa_node") << "1\n";
    std::ofstream(dir / "resource") << resource;
    if (!driver.empty()) fs::create_symlink(root_ / "sys/bus/pci/drivers" / driver, dir / "driver");
    fs::create_directories(root_ / "sys/kernel/iommu_groups" / std::to_string(group) / "devices");
    fs::create_symlink(root_ / "sys/kernel/iommu_groups" / std::to_string(group), dir / "iommu_group");
    fs::create_symlink(dir, root_ / "sys/bus/pci/devices" / bus_id);
    return dir;
  }
  const fs::path& root() const { return root_; }

 private:
  static inline int counter_ = 0;
  fs::path root_;
};

// An H100's BARs as the kernel prints them: 16 MiB 32-bit registers, 128 GiB
// and 32 MiB 64-bit prefetchable memory.
constexpr char kH100Resource[] =
    "0x00000000a4000000 0x00000000a4ffffff 0x0000000000040200\n"
    "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
    "0x0000220000000000 0x0000221fffffffff 0x000000000014220c\n"
    "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
    "0x0000222000000000 0x0000222001ffffff 0x000000000014220c\n"
    "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
    "0x0000000000000000 0x0000000000000000 0x0000000000000000\n";

TEST(PciSysfs, ListsNvidiaGpuFunctionsInBusOrderWithTheirPlacement) {
  FakeSysfs sysfs;
  sysfs.Add("0000:9a:00.0", "0x10de", "0x030200", "vfio-pci", 31, kH100Resource);
  const fs::path first = sysfs.Add("0000:18:00.0", "0x10de", "0x030200", "nvidia", 20, kH100Resource);
  sysfs.Add("0000:19:00.0", "0x8086", "0x030000", "i915", 21);          // not NVIDIA
  sysfs.Add("0000:1a:00.1", "0x10de", "0x040300", "snd_hda_intel", 22);  // the GPU's audio function
  const fs::path vf = sysfs.Add("0000:1b:00.4", "0x10de", "0x030200", "", 23);
  fs::create_symlink(first, vf / "physfn");  // an SR-IOV virtual function

  PciSysfs pci(sysfs.root());
  auto gpus = pci.ListGpus();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), 2U);
  const PciGpuFunction& gpu = (*gpus)[0];
  EXPECT_EQ(gpu.bus_id, "0000:18:00.0");
  EXPECT_EQ(gpu.vendor_id, 0x10de);
  EXPECT_EQ(gpu.device_id, 0x2330);
  EXPECT_EQ(gpu.driver, "nvidia");
  EXPECT_EQ(gpu.iommu_group, 20);
  EXPECT_EQ(gpu.pcie_root, "pci0000:17");
  EXPECT_EQ(gpu.numa_node, 1);
  EXPECT_EQ(gpu.addressable_memory_bytes, 256ULL << 30);
  EXPECT_EQ((*gpus)[1].bus_id, "0000:9a:00.0");
  EXPECT_EQ((*gpus)[1].driver, "vfio-pci");
}

TEST(PciSysfs, NamesWhatIsMissingForPassthrough) {
  FakeSysfs sysfs;
  PciSysfs pci(sysfs.root());
  common::Status iommu = pci.CheckIommuEnabled();
  EXPECT_EQ(iommu.code(), common::StatusCode::kFailedPrecondition);
  EXPECT_NE(iommu.message().find("the IOMMU is not enabled"), std::string::npos) << iommu.message();
  EXPECT_NE(iommu.message().find("intel_iommu=on"), std::string::npos) << iommu.message();
  sysfs.Add("0000:18:00.0", "0x10de", "0x030200", "nvidia", 20);
  EXPECT_TRUE(pci.CheckIommuEnabled().ok());
  fs::remove_all(sysfs.root() / "sys/bus/pci/drivers/vfio-pci");
  common::Status driver = pci.CheckDriverLoaded(kVfioPciDriver);
  EXPECT_EQ(driver.code(), common::StatusCode::kFailedPrecondition);
  EXPECT_NE(driver.message().find("run `modprobe vfio-pci` on the host"), std::string::npos) << driver.message();
  EXPECT_FALSE(pci.IommufdAvailable());
  EXPECT_EQ(PciSysfs(sysfs.root() / "nowhere").ListGpus().status().code(), common::StatusCode::kNotFound);
}

// A bind that the driver core does not carry out (nothing plays the kernel
// here) is an error naming the file and the driver the GPU is left on; a
// function already on the driver needs no write at all.
TEST(PciSysfs, RebindWaitsForTheDriverCoreAndSaysWhereTheGpuWasLeft) {
  FakeSysfs sysfs;
  const fs::path dir = sysfs.Add("0000:18:00.0", "0x10de", "0x030200", "vfio-pci", 20);
  PciSysfs pci(sysfs.root());
  EXPECT_TRUE(pci.Rebind("0000:18:00.0", kVfioPciDriver, std::chrono::milliseconds(50)).ok());
  EXPECT_FALSE(fs::exists(dir / "driver_override"));

  fs::remove(dir / "driver");
  common::Status stuck = pci.Rebind("0000:18:00.0", kVfioPciDriver, std::chrono::milliseconds(50));
  EXPECT_EQ(stuck.code(), common::StatusCode::kDeadlineExceeded);
  EXPECT_NE(stuck.message().find("did not bind to vfio-pci within 50 ms of writing"), std::string::npos)
      << stuck.message();
  EXPECT_NE(stuck.message().find("it is on no driver"), std::string::npos) << stuck.message();
  std::ifstream override_file(dir / "driver_override");
  std::string written;
  std::getline(override_file, written);
  EXPECT_EQ(written, "vfio-pci");
}

TEST(PciSysfs, AddressableMemoryCountsSixtyFourBitMemoryBarsRoundedUp) {
  EXPECT_EQ(AddressableMemoryBytes(kH100Resource), 256ULL << 30);
  EXPECT_EQ(AddressableMemoryBytes(""), 0U);
  EXPECT_EQ(AddressableMemoryBytes("0x00000000a4000000 0x00000000a4ffffff 0x0000000000040200\n"), 0U);
}

TEST(PciSysfs, VfioUuidIsTheNameBasedUuidOfThePciAddress) {
  // Values upstream's uuid.NewSHA1(uuid.NameSpaceDNS, bdf) gives.
  EXPECT_EQ(VfioDeviceUuid("0000:3b:00.0"), "5f36833e-54b9-5234-b457-89cdb0ccb109");
  EXPECT_EQ(VfioDeviceUuid("0000:01:00.0"), "e7af2681-d4df-538a-9cde-d6ca12d67e90");
}

TEST(PublishedVfioDevices, EveryGpuFunctionGetsATwinWithUpstreamsAttributes) {
  NodeInventory inventory;
  inventory.driver_version = "580.159.04";
  inventory.cuda_driver_version = "13.0";
  GpuInfo gpu;
  gpu.minor = 0;
  gpu.uuid = "GPU-a4f87852-c040-2818-e88b-bf8725dc5f6c";
  gpu.product_name = "NVIDIA H100 80GB HBM3";
  gpu.cuda_compute_capability = "9.0";
  gpu.pci.bus_id = "0000:18:00.0";
  gpu.memory_bytes = 85520809984;
  inventory.gpus.push_back(gpu);
  PublishOptions options;
  PciGpuFunction on_nvidia{.bus_id = "0000:18:00.0", .vendor_id = 0x10de, .device_id = 0x2330, .driver = "nvidia",
                           .iommu_group = 20, .iommufd_device = "", .pcie_root = "pci0000:17", .numa_node = 0,
                           .addressable_memory_bytes = 256ULL << 30, .sriov_vfs = 0};
  PciGpuFunction on_vfio = on_nvidia;
  on_vfio.bus_id = "0000:2a:00.0";
  on_vfio.driver = "vfio-pci";
  on_vfio.numa_node.reset();
  options.vfio_functions = {on_nvidia, on_vfio};
  options.iommufd_enabled = true;
  auto published = BuildPublishedResources(inventory, options);
  ASSERT_TRUE(published.ok()) << published.status();
  ASSERT_EQ(published->devices.size(), 3U);
  EXPECT_EQ(published->devices[0].name, "gpu-0");
  const PublishedDevice& twin = published->devices[1];
  EXPECT_EQ(twin.name, "gpu-vfio-0");
  EXPECT_EQ(std::get<std::string>(twin.attributes.at("type")), "vfio");
  EXPECT_EQ(std::get<std::string>(twin.attributes.at("uuid")), VfioDeviceUuid("0000:18:00.0"));
  EXPECT_EQ(std::get<std::string>(twin.attributes.at("deviceID")), "0x2330");
  EXPECT_EQ(std::get<std::string>(twin.attributes.at("vendorID")), "0x10de");
  EXPECT_EQ(std::get<std::string>(twin.attributes.at("productName")), "NVIDIA H100 80GB HBM3");
  EXPECT_TRUE(std::get<bool>(twin.attributes.at("iommuFDEnabled")));
  EXPECT_EQ(std::get<std::string>(twin.attributes.at("resource.kubernetes.io/pciBusID")), "0000:18:00.0");
  EXPECT_EQ(std::get<std::string>(twin.attributes.at("resource.kubernetes.io/pcieRoot")), "pci0000:17");
  EXPECT_EQ(std::get<std::int64_t>(twin.attributes.at("resource.kubernetes.io/numaNode")), 0);
  EXPECT_EQ(twin.capacity.at("addressableMemory"), std::int64_t{256} << 30);
  EXPECT_FALSE(twin.attributes.contains("driverVersion"));
  // A GPU NVML does not see (on vfio-pci at start-up) is only a twin.
  const PublishedDevice& alone = published->devices[2];
  EXPECT_EQ(alone.name, "gpu-vfio-1");
  EXPECT_EQ(std::get<std::string>(alone.attributes.at("productName")), "NVIDIA device 0x2330");
  EXPECT_FALSE(alone.attributes.contains("resource.kubernetes.io/numaNode"));
  const nlohmann::json json = DeviceToJson(twin);
  EXPECT_EQ(json["capacity"]["addressableMemory"]["value"], "256Gi");
  EXPECT_EQ(json["attributes"]["iommuFDEnabled"]["bool"], true);
}

}  // namespace
}  // namespace nvdra::gpu
