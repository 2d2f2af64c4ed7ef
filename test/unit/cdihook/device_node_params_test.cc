// The disable-device-node-modification hook: the params text it writes, and
// the mounts themselves in a private mount namespace of a child process (as
// a runtime runs the hook in the container's), on a scratch root whose
// proc/driver/nvidia/params stands in for the container's procfs file. The
// mount tests skip where this machine does not allow a private mount
// namespace.

#include "cdihook/device_node_params.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cdihook/test_root.h"

namespace nvdra::cdihook {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::TestBundle;

constexpr char kHostParams[] =
    "ResmanDebugLevel: 4294967295\n"
    "ModifyDeviceFiles: 1\n"
    "DeviceFileUID: 0\n"
    "DeviceFileMode: 438\n";

TEST(ParamsWithDeviceFilesUnmodifiable, TurnsOnlyThatLineOff) {
  EXPECT_EQ(ParamsWithDeviceFilesUnmodifiable(kHostParams).value_or("(none)"),
            "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 0\nDeviceFileUID: 0\nDeviceFileMode: 438\n");
  EXPECT_EQ(ParamsWithDeviceFilesUnmodifiable("ModifyDeviceFiles: 1").value_or("(none)"), "ModifyDeviceFiles: 0")
      << "no final newline: none added";
  EXPECT_FALSE(ParamsWithDeviceFilesUnmodifiable("ModifyDeviceFiles: 0\nDeviceFileUID: 0\n"));
  EXPECT_FALSE(ParamsWithDeviceFilesUnmodifiable("DeviceFileUID: 0\n")) << "no such line: nothing to change";
  EXPECT_FALSE(ParamsWithDeviceFilesUnmodifiable(""));
}

// Runs `body` in a child with a private mount namespace; its exit code is
// the result (0 success, 77 no mount namespace here, other: the failed step,
// explained on stderr).
int InPrivateMountNamespace(const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::unshare(CLONE_NEWNS) != 0) ::_exit(77);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(77);
    ::_exit(body());
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

int Fail(int code, const std::string& what) {
  std::fprintf(stderr, "step %d failed: %s (errno %d)\n", code, what.c_str(), errno);
  return code;
}

class DisableDeviceNodeModificationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TestBundle::WriteFile(b_.host() / "params", kHostParams);
    TestBundle::WriteFile(container_params(), "as the container's procfs shows it\n");
  }
  fs::path container_params() const { return b_.rootfs() / "proc/driver/nvidia/params"; }
  DeviceNodeParamsOptions Options() const { return {.container_root = b_.rootfs(), .host_params = b_.host() / "params"}; }

  TestBundle b_;
};

TEST_F(DisableDeviceNodeModificationTest, MountsAReadOnlyCopyAndLeavesNoScratch) {
  const int result = InPrivateMountNamespace([&] {
    auto mounted = DisableDeviceNodeModification(Options());
    if (!mounted.ok()) return Fail(1, mounted.status().ToString());
    if (!*mounted) return Fail(2, "reported nothing to do");
    if (TestBundle::ReadFile(container_params()) !=
        "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 0\nDeviceFileUID: 0\nDeviceFileMode: 438\n") {
      return Fail(3, "the container reads: " + TestBundle::ReadFile(container_params()));
    }
    const int fd = ::open(container_params().c_str(), O_WRONLY | O_CLOEXEC);
    if (fd >= 0 || errno != EROFS) return Fail(4, "the copy is writable");
    for (const auto& entry : fs::directory_iterator(b_.rootfs())) {
      if (entry.path().filename() != "proc") return Fail(5, "left in the root: " + entry.path().string());
    }
    return 0;
  });
  if (result == 77) GTEST_SKIP() << "no private mount namespace on this machine (unshare(CLONE_NEWNS) refused)";
  EXPECT_EQ(result, 0) << "see the child's stderr";
  // The child's namespace is gone: here the file is what it was.
  EXPECT_EQ(TestBundle::ReadFile(container_params()), "as the container's procfs shows it\n");
}

TEST_F(DisableDeviceNodeModificationTest, NothingMountedWhenAlreadyOffOrNoDriver) {
  const int result = InPrivateMountNamespace([&] {
    TestBundle::WriteFile(b_.host() / "params", "ModifyDeviceFiles: 0\n");
    auto off = DisableDeviceNodeModification(Options());
    if (!off.ok() || *off) return Fail(1, "already off: " + off.status().ToString());
    fs::remove(b_.host() / "params");
    auto none = DisableDeviceNodeModification(Options());
    if (!none.ok() || *none) return Fail(2, "no host file: " + none.status().ToString());
    if (TestBundle::ReadFile(container_params()) != "as the container's procfs shows it\n") {
      return Fail(3, "the container's file changed");
    }
    return 0;
  });
  if (result == 77) GTEST_SKIP() << "no private mount namespace on this machine (unshare(CLONE_NEWNS) refused)";
  EXPECT_EQ(result, 0) << "see the child's stderr";
}

TEST_F(DisableDeviceNodeModificationTest, ContainerWithoutTheParamsFileIsAnError) {
  fs::remove(container_params());
  auto mounted = DisableDeviceNodeModification(Options());
  ASSERT_FALSE(mounted.ok());
  EXPECT_THAT(mounted.status().ToString(), HasSubstr("/proc/driver/nvidia/params"));
}

}  // namespace
}  // namespace nvdra::cdihook
