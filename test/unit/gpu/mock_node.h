#pragma once

// MockNode: a fresh mock driver root for GPU unit tests (its own copy of the
// mock NVML library, a profile from test/mocknvml/profiles, optionally
// patched, and a fake sysfs), opened, discovered or inspected as the plugin
// and nvidia-dra-inspect would. Each instance has its own MIG state.

#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpu/discovery.h"
#include "gpu/inspect.h"
#include "gpu/published_devices.h"
#include "nvml/library.h"

namespace nvdra::gpu::test_support {

namespace fs = std::filesystem;
using nlohmann::json;

inline nvml::LibraryOptions AtRoot(const fs::path& root) {
  nvml::LibraryOptions options;
  options.driver_root = root;
  return options;
}

// A fresh driver root holding its own copy of the mock library and `profile`,
// so each test gets its own library instance and MIG state; plus a fake sysfs
// where every GPU of the profile sits under a PCIe root with a NUMA node.
class MockNode {
 public:
  explicit MockNode(const std::string& profile, const json& patch = json::object()) {
    root_ = fs::temp_directory_path() /
            ("nvdra-discovery-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::remove_all(root_);
    fs::create_directories(root_ / "usr/lib64");
    fs::create_directories(root_ / "mock-nvml");
    fs::copy_file(NVDRA_MOCKNVML_PATH, root_ / "usr/lib64/libnvidia-ml.so.1");
    json doc = json::parse(std::ifstream(fs::path(NVDRA_MOCKNVML_PROFILES_DIR) / profile));
    doc.merge_patch(patch);
    std::ofstream(root_ / "mock-nvml/profile.json") << doc.dump(2);
    // sysfs: bus/pci/devices/<bus> -> devices/pci<domain>:<bus>/<bus>.
    for (const json& device : doc["devices"]) {
      std::string bus = device["pci"]["busId"].get<std::string>();
      for (char& c : bus) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      bus = bus.substr(4);  // "0000:18:00.0"
      fs::path real = root_ / "sys/devices" / ("pci" + bus.substr(0, 7)) / bus;  // pci0000:18
      fs::create_directories(real);
      std::ofstream(real / "numa_node") << device.value("numaNode", -1) << "\n";
      fs::create_directories(root_ / "sys/bus/pci/devices");
      fs::create_symlink(real, root_ / "sys/bus/pci/devices" / bus);
      // On nvidia, as the mock NVML requires of a GPU it manages.
      fs::create_directories(root_ / "sys/bus/pci/drivers/nvidia");
      fs::create_symlink(root_ / "sys/bus/pci/drivers/nvidia", real / "driver");
    }
  }
  ~MockNode() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  const fs::path& root() const { return root_; }

  std::unique_ptr<nvml::Library> Open() const {
    auto library = nvml::Library::Open(AtRoot(root_));
    EXPECT_TRUE(library.ok()) << library.status();
    return library.ok() ? std::move(*library) : nullptr;
  }
  NodeInventory Discover() const {
    auto library = Open();
    DiscoveryOptions options;
    options.sysfs_root = root_ / "sys";
    auto inventory = DiscoverDevices(*library, options);
    EXPECT_TRUE(inventory.ok()) << inventory.status();
    return inventory.ok() ? *inventory : NodeInventory{};
  }
  json Inspect(const PublishOptions& publish = {}, const nvml::CliqueOptions& clique = {}) const {
    InspectOptions options;
    options.driver_root = root_;
    options.discovery.sysfs_root = root_ / "sys";
    options.publish = publish;
    options.clique = clique;
    auto report = InspectNode(options);
    EXPECT_TRUE(report.ok()) << report.status();
    return report.ok() ? *report : json();
  }

 private:
  static inline int counter_ = 0;
  fs::path root_;
};

}  // namespace nvdra::gpu::test_support

namespace nvdra::gpu {
using test_support::AtRoot;
using test_support::MockNode;
}  // namespace nvdra::gpu
