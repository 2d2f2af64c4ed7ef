// NvidiaSmiComputePolicy at unit tier: it finds nvidia-smi where upstream
// looks in the driver root, runs it with upstream's arguments and with the
// driver's libnvidia-ml in LD_PRELOAD, and turns a failing run into an error
// that carries the tool's output. The nvidia-smi here is a shell script that
// records how it was called.
#include "gpu/compute_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace nvdra::gpu {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ComputePolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "compute-policy-test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    root_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  // An nvidia-smi in <root>/<folder> that appends "<args> | <LD_PRELOAD>" to
  // <root>/calls and exits with `exit_code`.
  void InstallNvidiaSmi(const std::string& folder, int exit_code = 0) {
    fs::create_directories(root_ / folder);
    const fs::path script = root_ / folder / "nvidia-smi";
    std::ofstream(script) << "#!/bin/sh\necho \"$* | $LD_PRELOAD\" >> '" << (root_ / "calls").string()
                          << "'\necho 'Unable to set: Insufficient Permissions'\nexit " << exit_code << "\n";
    fs::permissions(script, fs::perms::owner_all);
  }
  std::string Calls() const {
    std::ifstream in(root_ / "calls");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  fs::path root_;
};

TEST_F(ComputePolicyTest, RunsTheDriverRootsNvidiaSmiWithUpstreamsArguments) {
  InstallNvidiaSmi("usr/bin");
  auto policy = NvidiaSmiComputePolicy::Find(root_, "/driver/usr/lib64/libnvidia-ml.so.1");
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->nvidia_smi(), root_ / "usr/bin/nvidia-smi");
  ::unsetenv("LD_PRELOAD");
  ASSERT_TRUE(policy->SetComputeMode("GPU-1", ComputeMode::kDefault).ok());
  ASSERT_TRUE(policy->SetTimeSlice("GPU-1", api::TimeSliceInterval::kLong).ok());
  ASSERT_TRUE(policy->SetComputeMode("GPU-1", ComputeMode::kExclusiveProcess).ok());
  EXPECT_EQ(Calls(),
            "-i GPU-1 -c DEFAULT | /driver/usr/lib64/libnvidia-ml.so.1\n"
            "compute-policy -i GPU-1 --set-timeslice 3 | /driver/usr/lib64/libnvidia-ml.so.1\n"
            "-i GPU-1 -c EXCLUSIVE_PROCESS | /driver/usr/lib64/libnvidia-ml.so.1\n");
}

TEST_F(ComputePolicyTest, FindsOptBinFirstAndSaysWhereItLookedWhenMissing) {
  auto missing = NvidiaSmiComputePolicy::Find(root_, "libnvidia-ml.so.1");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), common::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("opt/bin, usr/bin, usr/sbin, bin, sbin"));
  EXPECT_THAT(missing.status().message(), HasSubstr("--container-driver-root"));
  InstallNvidiaSmi("sbin");
  InstallNvidiaSmi("opt/bin");
  auto found = NvidiaSmiComputePolicy::Find(root_, "libnvidia-ml.so.1");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->nvidia_smi(), root_ / "opt/bin/nvidia-smi");
}

TEST_F(ComputePolicyTest, AFailingRunIsAnErrorWithTheToolsOutput) {
  InstallNvidiaSmi("usr/bin", 4);
  auto policy = NvidiaSmiComputePolicy::Find(root_, "libnvidia-ml.so.1");
  ASSERT_TRUE(policy.ok());
  common::Status status = policy->SetTimeSlice("GPU-7", api::TimeSliceInterval::kShort);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("set the time slice of GPU-7 to Short"));
  EXPECT_THAT(status.message(), HasSubstr("exit code 4"));
  EXPECT_THAT(status.message(), HasSubstr("Insufficient Permissions"));
}

}  // namespace
}  // namespace nvdra::gpu
