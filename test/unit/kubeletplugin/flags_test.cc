#include "kubeletplugin/flags.h"

#include <CLI/CLI.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "env_for_test.h"

namespace nvdra::kubeletplugin {
namespace {

using ::testing::HasSubstr;
using nvdra::testing::ParseArgs;
using nvdra::testing::ScopedEnv;

TEST(KubeletPluginFlagsTest, DefaultsMatchUpstream) {
  ScopedEnv a("NVIDIA_DRIVER_ROOT", nullptr), b("HOST_DRIVER_ROOT", nullptr),
      c("CDI_ROOT", nullptr), d("HEALTHCHECK_PORT", nullptr), e("NODE_NAME", nullptr);
  CLI::App app;
  KubeletPluginFlags flags;
  AddKubeletPluginFlags(app, flags);
  ASSERT_EQ(ParseArgs(app, {}), std::nullopt);
  EXPECT_EQ(flags.driver_namespace, "default");
  EXPECT_EQ(flags.cdi_root, "/etc/cdi");
  EXPECT_EQ(flags.nvidia_driver_root, "/");
  EXPECT_EQ(flags.container_driver_root, "/driver-root");
  EXPECT_EQ(flags.kubelet_registrar_directory_path, "/var/lib/kubelet/plugins_registry");
  EXPECT_EQ(flags.kubelet_plugins_directory_path, "/var/lib/kubelet/plugins");
  EXPECT_EQ(flags.healthcheck_port, -1);
}

TEST(KubeletPluginFlagsTest, UpstreamEnvironmentVariablesFillFlags) {
  ScopedEnv a("NODE_NAME", "node-1"), b("NAMESPACE", "nvidia"), c("CDI_ROOT", "/var/run/cdi"),
      d("NVIDIA_DRIVER_ROOT", "/run/nvidia/driver"), e("DRIVER_ROOT_CTR_PATH", "/drv"),
      f("NVIDIA_CDI_HOOK_PATH", "/usr/bin/nvidia-cdi-hook"),
      g("KUBELET_REGISTRAR_DIRECTORY_PATH", "/k/reg"),
      h("KUBELET_PLUGINS_DIRECTORY_PATH", "/k/plugins"), i("HEALTHCHECK_PORT", "51516");
  CLI::App app;
  KubeletPluginFlags flags;
  AddKubeletPluginFlags(app, flags);
  ASSERT_EQ(ParseArgs(app, {}), std::nullopt);
  EXPECT_EQ(flags.node_name, "node-1");
  EXPECT_EQ(flags.driver_namespace, "nvidia");
  EXPECT_EQ(flags.cdi_root, "/var/run/cdi");
  EXPECT_EQ(flags.nvidia_driver_root, "/run/nvidia/driver");
  EXPECT_EQ(flags.container_driver_root, "/drv");
  EXPECT_EQ(flags.nvidia_cdi_hook_path, "/usr/bin/nvidia-cdi-hook");
  EXPECT_EQ(flags.kubelet_registrar_directory_path, "/k/reg");
  EXPECT_EQ(flags.kubelet_plugins_directory_path, "/k/plugins");
  EXPECT_EQ(flags.healthcheck_port, 51516);
  EXPECT_TRUE(flags.Validate().ok());
}

TEST(KubeletPluginFlagsTest, HostDriverRootIsFallbackForNvidiaDriverRoot) {
  {
    ScopedEnv a("NVIDIA_DRIVER_ROOT", nullptr), b("HOST_DRIVER_ROOT", "/legacy");
    CLI::App app;
    KubeletPluginFlags flags;
    AddKubeletPluginFlags(app, flags);
    ASSERT_EQ(ParseArgs(app, {}), std::nullopt);
    EXPECT_EQ(flags.nvidia_driver_root, "/legacy");
  }
  {
    ScopedEnv a("NVIDIA_DRIVER_ROOT", "/current"), b("HOST_DRIVER_ROOT", "/legacy");
    CLI::App app;
    KubeletPluginFlags flags;
    AddKubeletPluginFlags(app, flags);
    ASSERT_EQ(ParseArgs(app, {}), std::nullopt);
    EXPECT_EQ(flags.nvidia_driver_root, "/current");
  }
}

TEST(KubeletPluginFlagsTest, FlagAndAliasBeatEnvironment) {
  ScopedEnv a("NVIDIA_DRIVER_ROOT", "/env"), b("NODE_NAME", "env-node");
  CLI::App app;
  KubeletPluginFlags flags;
  AddKubeletPluginFlags(app, flags);
  ASSERT_EQ(ParseArgs(app, {"--host_driver-root=/alias", "--node-name", "flag-node"}),
            std::nullopt);
  EXPECT_EQ(flags.nvidia_driver_root, "/alias");
  EXPECT_EQ(flags.node_name, "flag-node");
}

TEST(KubeletPluginFlagsTest, ValidateNamesTheBadFlag) {
  KubeletPluginFlags flags;
  EXPECT_THAT(flags.Validate().message(), HasSubstr("--node-name (NODE_NAME) is required"));
  flags.node_name = "n";
  flags.cdi_root = "relative/cdi";
  EXPECT_THAT(flags.Validate().message(), HasSubstr("--cdi-root"));
  flags.cdi_root = "/etc/cdi";
  flags.healthcheck_port = 70000;
  EXPECT_THAT(flags.Validate().message(), HasSubstr("--healthcheck-port"));
  flags.healthcheck_port = 0;
  EXPECT_TRUE(flags.Validate().ok());
}

}  // namespace
}  // namespace nvdra::kubeletplugin
