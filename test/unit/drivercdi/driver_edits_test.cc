#include "drivercdi/driver_edits.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "scoped_env.h"

namespace nvdra::drivercdi {
namespace {
namespace testing = ::nvdra::testing;

namespace fs = std::filesystem;
using kubeletplugin::CdiContainerEdits;
using nlohmann::json;
using testing::ScopedEnv;

constexpr char kHook[] = "/var/lib/kubelet/plugins/gpu.nvidia.com/nvidia-cdi-hook";
constexpr char kVersion[] = "550.163.01";  // driverVersion of a100-mig.json

// A mock driver root from test/mocknvml/make-driver-root with a100-mig.json.
class MockDriverRoot {
 public:
  MockDriverRoot() {
    std::string tmpl = (fs::temp_directory_path() / "gpu-cdi-test.XXXXXX").string();
    dir_ = fs::canonical(::mkdtemp(tmpl.data()));
    const std::string command = std::string(NVDRA_MOCKNVML_MAKE_DRIVER_ROOT) + " '" +
                                root().string() + "' '" NVDRA_MOCKNVML_PROFILES_DIR
                                "/a100-mig.json' '" NVDRA_MOCKNVML_PATH "'";
    ok_ = std::system(command.c_str()) == 0;
  }
  ~MockDriverRoot() { fs::remove_all(dir_); }
  bool ok() const { return ok_; }
  fs::path root() const { return dir_ / "driver"; }
  DriverRoots Roots(const fs::path& host) const {
    DriverRoots roots;
    roots.container_driver_root = root();
    roots.host_driver_root = host;
    return roots;
  }
  ProcPaths Proc() const {
    ProcPaths p;
    p.proc_root = root() / "proc";
    return p;
  }

 private:
  fs::path dir_;
  bool ok_ = false;
};

json Mount(const std::string& host_root, const std::string& path, bool ipc = false) {
  json options = ipc ? json{"nosuid", "nodev", "rbind", "rprivate", "noexec"}
                     : json{"ro", "nosuid", "nodev", "rbind", "rprivate"};
  return {{"hostPath", host_root + path}, {"containerPath", path}, {"options", options}};
}

// The spec-level edits expected for the mock root, host driver root `h`
// ("" for "/").
// A character device node as the spec shows it: make-driver-root mknods the
// real driver's numbers, and a node that is a character device gets its type,
// numbers and mode from the file (minor 0 is omitted, as in the CDI JSON).
json CharNode(const std::string& path, const std::string& host_path, int major, int minor) {
  json node = {{"path", path}, {"hostPath", host_path}, {"type", "c"}, {"major", major}, {"fileMode", 0666}};
  if (minor != 0) node["minor"] = minor;
  return node;
}

json ExpectedCommonEdits(const std::string& h) {
  const std::string lib = "/usr/lib64/";
  const std::string v = kVersion;
  json nodes = json::array();
  for (const auto& [n, major, minor] : {std::tuple{"nvidia-modeset", 195, 254}, std::tuple{"nvidia-uvm-tools", 508, 1},
                                        std::tuple{"nvidia-uvm", 508, 0}, std::tuple{"nvidiactl", 195, 255}}) {
    nodes.push_back(CharNode(std::string("/dev/") + n, h + "/dev/" + n, major, minor));
  }
  json mounts = json::array({
      Mount(h, lib + "libcuda.so." + v),
      Mount(h, lib + "libnvidia-ml.so." + v),
      Mount(h, lib + "libnvidia-ptxjitcompiler.so." + v),
      Mount(h, "/run/nvidia-persistenced/socket", true),
      Mount(h, "/lib/firmware/nvidia/" + v + "/gsp_ga10x.bin"),
      Mount(h, "/lib/firmware/nvidia/" + v + "/gsp_tu10x.bin"),
      Mount(h, "/usr/bin/nvidia-smi"),
      Mount(h, "/usr/bin/nvidia-debugdump"),
      Mount(h, "/usr/bin/nvidia-persistenced"),
      Mount(h, "/usr/bin/nvidia-cuda-mps-control"),
      Mount(h, "/usr/bin/nvidia-cuda-mps-server"),
  });
  json hooks = json::array({
      {{"hookName", "createContainer"},
       {"path", kHook},
       {"args",
        {"nvidia-cdi-hook", "create-symlinks",                               //
         "--link", "libcuda.so.1::/usr/lib64/libcuda.so",                    //
         "--link", "libcuda.so." + v + "::/usr/lib64/libcuda.so.1",          //
         "--link", "libnvidia-ml.so." + v + "::/usr/lib64/libnvidia-ml.so.1",  //
         "--link", "libnvidia-ptxjitcompiler.so." + v + "::/usr/lib64/libnvidia-ptxjitcompiler.so.1"}},
       {"env", {"NVIDIA_CTK_DEBUG=false"}}},
      {{"hookName", "createContainer"},
       {"path", kHook},
       {"args", {"nvidia-cdi-hook", "enable-cuda-compat", "--host-driver-version=" + v}},
       {"env", {"NVIDIA_CTK_DEBUG=false"}}},
      {{"hookName", "createContainer"},
       {"path", kHook},
       {"args", {"nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib64"}},
       {"env", {"NVIDIA_CTK_DEBUG=false"}}},
      {{"hookName", "createContainer"},
       {"path", kHook},
       {"args", {"nvidia-cdi-hook", "disable-device-node-modification"}},
       {"env", {"NVIDIA_CTK_DEBUG=false"}}},
  });
  return {{"env", {"NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64"}},
          {"deviceNodes", nodes},
          {"hooks", hooks},
          {"mounts", mounts}};
}

// Shared by the tests that only read the root (building one takes a second
// on a loaded machine); tests that change the root make their own.
const MockDriverRoot& SharedRoot() {
  static const MockDriverRoot root;
  return root;
}

CdiContainerEdits CommonEdits(const MockDriverRoot& root, const fs::path& host) {
  CommonEditsOptions options;
  options.roots = root.Roots(host);
  options.driver_version = kVersion;
  options.hook_path = kHook;
  auto edits = BuildCommonEdits(options);
  EXPECT_TRUE(edits.ok()) << edits.status();
  return edits.ok() ? *edits : CdiContainerEdits{};
}

TEST(GpuCdi, FullGpuClaimSpecMatchesGolden) {
  const MockDriverRoot& root = SharedRoot();
  ASSERT_TRUE(root.ok());
  const auto roots = root.Roots("/run/nvidia/driver");
  const auto spec = BuildClaimSpec("k8s.gpu.nvidia.com", "0b7c-uid", CommonEdits(root, "/run/nvidia/driver"),
                                   {{"gpu-1", FullGpuEdits(1, roots)}}, roots);
  const json expected = {
      {"cdiVersion", "0.5.0"},
      {"kind", "k8s.gpu.nvidia.com/claim"},
      {"devices",
       {{{"name", "0b7c-uid-gpu-1"},
         {"containerEdits",
          {{"deviceNodes",
            {CharNode("/dev/nvidia1", "/run/nvidia/driver/dev/nvidia1", 195, 1)}}}}}}},
      {"containerEdits", ExpectedCommonEdits("/run/nvidia/driver")}};
  EXPECT_EQ(kubeletplugin::CdiSpecToJson(spec), expected)
      << kubeletplugin::CdiSpecToJson(spec).dump(2);
  EXPECT_TRUE(kubeletplugin::ValidateCdiSpec(spec).ok());
}

TEST(GpuCdi, MigClaimSpecMatchesGolden) {
  const MockDriverRoot& root = SharedRoot();
  ASSERT_TRUE(root.ok());
  const auto roots = root.Roots("/run/nvidia/driver");
  auto mig = MigDeviceEdits(0, 1, 0, roots, root.Proc());
  ASSERT_TRUE(mig.ok()) << mig.status();
  const auto spec = BuildClaimSpec("k8s.gpu.nvidia.com", "0b7c-uid", CommonEdits(root, "/run/nvidia/driver"),
                                   {{"gpu-0-mig-1g5gb-1-0", *mig}}, roots);
  // GI 1 of GPU 0: minor 3 + 0*135 + 1*9 = 12; its CI 0: 13. nvidia-caps is 235.
  const json cap12 = {{"path", "/dev/nvidia-caps/nvidia-cap12"},
                      {"hostPath", "/dev/nvidia-caps/nvidia-cap12"},
                      {"type", "c"},
                      {"major", 235},
                      {"minor", 12},
                      {"fileMode", 292}};
  json cap13 = cap12;
  cap13["path"] = cap13["hostPath"] = "/dev/nvidia-caps/nvidia-cap13";
  cap13["minor"] = 13;
  const json expected = {
      {"cdiVersion", "0.5.0"},
      {"kind", "k8s.gpu.nvidia.com/claim"},
      {"devices",
       {{{"name", "0b7c-uid-gpu-0-mig-1g5gb-1-0"},
         {"containerEdits",
          {{"deviceNodes",
            {CharNode("/dev/nvidia0", "/run/nvidia/driver/dev/nvidia0", 195, 0), cap12, cap13}}}}}}},
      {"containerEdits", ExpectedCommonEdits("/run/nvidia/driver")}};
  EXPECT_EQ(kubeletplugin::CdiSpecToJson(spec), expected)
      << kubeletplugin::CdiSpecToJson(spec).dump(2);
}

TEST(GpuCdi, HostDriverRootSlashGivesPlainPaths) {
  const MockDriverRoot& root = SharedRoot();
  ASSERT_TRUE(root.ok());
  const auto roots = root.Roots("/");
  const auto spec = BuildClaimSpec("k8s.gpu.nvidia.com", "u", CommonEdits(root, "/"), {{"gpu-0", FullGpuEdits(0, roots)}},
                                   roots);
  const json j = kubeletplugin::CdiSpecToJson(spec);
  EXPECT_EQ(j["containerEdits"], ExpectedCommonEdits("")) << j.dump(2);
  EXPECT_EQ(j["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"], "/dev/nvidia0");
}

TEST(GpuCdi, OnlyWhatExistsIsIncluded) {
  MockDriverRoot root;
  ASSERT_TRUE(root.ok());
  fs::remove(root.root() / "dev/nvidia-modeset");
  fs::remove_all(root.root() / "lib/firmware");
  fs::remove(root.root() / "usr/bin/nvidia-smi");
  fs::remove_all(root.root() / "run");
  json edits = kubeletplugin::CdiSpecToJson({.version = "",
                                             .kind = "a/b",
                                             .annotations = {},
                                             .devices = {},
                                             .container_edits = CommonEdits(root, "/")});
  const std::string text = edits["containerEdits"].dump();
  EXPECT_EQ(text.find("nvidia-modeset"), std::string::npos);
  EXPECT_EQ(text.find("firmware"), std::string::npos);
  EXPECT_EQ(text.find("nvidia-smi"), std::string::npos);
  EXPECT_EQ(text.find("persistenced/socket"), std::string::npos);
  EXPECT_NE(text.find("nvidia-debugdump"), std::string::npos);
  EXPECT_NE(text.find("/dev/nvidiactl"), std::string::npos);
}

TEST(GpuCdi, MissingDriverLibraryIsNotFound) {
  const MockDriverRoot& root = SharedRoot();
  ASSERT_TRUE(root.ok());
  CommonEditsOptions options;
  options.roots = root.Roots("/");
  options.driver_version = "999.1";
  options.hook_path = kHook;
  EXPECT_EQ(BuildCommonEdits(options).status().code(), common::StatusCode::kNotFound);
  options.hook_path.clear();
  options.driver_version = kVersion;
  EXPECT_EQ(BuildCommonEdits(options).status().code(), common::StatusCode::kInvalidArgument);
}

TEST(GpuCdi, DevRootIsSlashWithoutDevFolder) {
  MockDriverRoot root;
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(DevRootFor(root.root()), root.root());
  fs::remove_all(root.root() / "dev");
  EXPECT_EQ(DevRootFor(root.root()), fs::path("/"));
}

TEST(GpuCdi, ProcDevicesMajorOnlyFromCharacterSection) {
  const MockDriverRoot& root = SharedRoot();
  ASSERT_TRUE(root.ok());
  const fs::path devices = root.root() / "proc/devices";
  auto major = ReadCharDeviceMajor(devices, "nvidia-caps");
  ASSERT_TRUE(major.ok());
  EXPECT_EQ(*major, 235);
  EXPECT_EQ(ReadCharDeviceMajor(devices, "nvidia-cap").status().code(),
            common::StatusCode::kNotFound);
  EXPECT_EQ(ReadCharDeviceMajor(devices, "sd").status().code(), common::StatusCode::kNotFound)
      << "block devices do not count";
  EXPECT_EQ(ReadCharDeviceMajor(root.root() / "nope", "x").status().code(),
            common::StatusCode::kNotFound);
}

TEST(GpuCdi, MigEditsFailWhenCapabilityFileMissing) {
  const MockDriverRoot& root = SharedRoot();
  ASSERT_TRUE(root.ok());
  auto edits = MigDeviceEdits(0, 15, 0, root.Roots("/"), root.Proc());
  EXPECT_EQ(edits.status().code(), common::StatusCode::kNotFound);
  EXPECT_NE(edits.status().message().find("gi15"), std::string::npos);
}

TEST(GpuCdi, AltProcDevicesPathFromEnvironment) {
  {
    ScopedEnv env("ALT_PROC_DEVICES_PATH", "/tmp/devices");
    EXPECT_EQ(ProcPathsFromEnvironment().devices_file(), fs::path("/tmp/devices"));
  }
  ScopedEnv env("ALT_PROC_DEVICES_PATH", nullptr);
  EXPECT_EQ(ProcPathsFromEnvironment().devices_file(), fs::path("/proc/devices"));
}

}  // namespace
}  // namespace nvdra::drivercdi
