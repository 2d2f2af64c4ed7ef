#include "kubeletplugin/cdi_spec.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace nvdra::kubeletplugin {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "cdi-spec-test.XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

CdiSpec MinimalSpec() {
  CdiSpec spec;
  spec.kind = "k8s.gpu.nvidia.com/claim";
  CdiDevice d;
  d.name = "gpu-0";
  CdiDeviceNode node;
  node.path = "/dev/nvidia0";
  d.container_edits.device_nodes.push_back(node);
  spec.devices.push_back(d);
  return spec;
}

TEST(CdiNames, ClaimNamesMatchUpstream) {
  EXPECT_EQ(CdiVendorForDriver("gpu.nvidia.com"), "k8s.gpu.nvidia.com");
  EXPECT_EQ(ClaimCdiSpecFileName("k8s.gpu.nvidia.com", "5f3c-11"),
            "k8s.gpu.nvidia.com-claim_5f3c-11.yaml");
  EXPECT_EQ(ClaimCdiDeviceName("5f3c-11", "gpu-0"), "5f3c-11-gpu-0");
  EXPECT_EQ(ClaimCdiDeviceId("k8s.gpu.nvidia.com", "5f3c-11", "gpu-0"),
            "k8s.gpu.nvidia.com/claim=5f3c-11-gpu-0");
  EXPECT_EQ(TransientCdiSpecFileName("v.com", "c", "a/b"), "v.com-c_a_b.yaml");
}

TEST(CdiVersion, MinimumFollowsTheFeaturesUsed) {
  CdiSpec spec = MinimalSpec();
  EXPECT_EQ(MinimumCdiVersion(spec), "0.3.0");
  spec.container_edits.mounts.push_back({"/a", "/b", "bind", {}});
  EXPECT_EQ(MinimumCdiVersion(spec), "0.4.0");
  spec.devices[0].container_edits.device_nodes[0].host_path = "/dev/nvidia0";
  EXPECT_EQ(MinimumCdiVersion(spec), "0.5.0");
  CdiSpec digit = MinimalSpec();
  digit.devices[0].name = "0b7c-gpu-0";
  EXPECT_EQ(MinimumCdiVersion(digit), "0.5.0");
  CdiSpec dotted = MinimalSpec();
  dotted.kind = "vendor.com/my.class";
  EXPECT_EQ(MinimumCdiVersion(dotted), "0.6.0");
  spec.devices[0].annotations["a"] = "b";
  EXPECT_EQ(MinimumCdiVersion(spec), "0.6.0");
  spec.container_edits.additional_gids = {44};
  EXPECT_EQ(MinimumCdiVersion(spec), "0.7.0");
}

TEST(CdiJson, UsesCdiFieldNamesAndOmitsEmptyFields) {
  CdiSpec spec = MinimalSpec();
  spec.devices[0].name = "1-gpu-0";
  auto& cap = spec.devices[0].container_edits.device_nodes[0];
  cap.path = "/dev/nvidia-caps/nvidia-cap12";
  cap.type = "c";
  cap.major = 235;
  cap.minor = 12;
  cap.file_mode = 0444;
  spec.container_edits.env = {"NVIDIA_VISIBLE_DEVICES=void"};
  spec.container_edits.mounts.push_back({"/h/lib.so", "/lib.so", "", {"ro", "bind"}});
  spec.container_edits.hooks.push_back(
      {"createContainer", "/usr/bin/nvidia-cdi-hook", {"nvidia-cdi-hook", "x"}, {}, 5});
  const auto expected = nlohmann::json::parse(R"({
    "cdiVersion": "0.5.0",
    "kind": "k8s.gpu.nvidia.com/claim",
    "devices": [{"name": "1-gpu-0", "containerEdits": {"deviceNodes": [
      {"path": "/dev/nvidia-caps/nvidia-cap12", "type": "c", "major": 235, "minor": 12,
       "fileMode": 292}]}}],
    "containerEdits": {
      "env": ["NVIDIA_VISIBLE_DEVICES=void"],
      "mounts": [{"hostPath": "/h/lib.so", "containerPath": "/lib.so", "options": ["ro", "bind"]}],
      "hooks": [{"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook",
                 "args": ["nvidia-cdi-hook", "x"], "timeout": 5}]}
  })");
  EXPECT_EQ(CdiSpecToJson(spec), expected);
  auto back = CdiSpecFromJson(expected);
  ASSERT_TRUE(back.ok()) << back.status();
  spec.version = "0.5.0";
  EXPECT_EQ(*back, spec);
}

TEST(CdiJson, UnknownFieldIsRejected) {
  auto j = CdiSpecToJson(MinimalSpec());
  j["devices"][0]["containerEdits"]["deviceNodes"][0]["colour"] = "red";
  EXPECT_EQ(CdiSpecFromJson(j).status().code(), common::StatusCode::kInvalidArgument);
}

using ::testing::HasSubstr;

// Found by fuzz.cdi_spec: a float out of an integer field's range was
// converted with a plain cast (undefined behaviour); negative ids wrapped.
TEST(CdiJson, IntegerFieldsTakeIntegersInRangeOnly) {
  auto spec_with = [](nlohmann::json node, nlohmann::json gids = nlohmann::json::array()) {
    node["path"] = "/dev/x";
    nlohmann::json edits = {{"deviceNodes", {node}}};
    if (!gids.empty()) edits["additionalGids"] = gids;
    return nlohmann::json{{"cdiVersion", "0.7.0"},
                          {"kind", "k8s.gpu.nvidia.com/claim"},
                          {"devices", {{{"name", "d"}, {"containerEdits", edits}}}}};
  };
  auto message_of = [](const nlohmann::json& j) {
    auto parsed = CdiSpecFromJson(j);
    EXPECT_EQ(parsed.status().code(), common::StatusCode::kInvalidArgument) << j.dump();
    return std::string(parsed.status().message());
  };
  EXPECT_THAT(message_of(spec_with({{"major", 234}, {"minor", 3.33333e+65}})),
              HasSubstr("minor: expected an integer, got number"));
  EXPECT_THAT(message_of(spec_with({{"uid", -1}})), HasSubstr("uid: -1 is out of range (0 to 4294967295)"));
  EXPECT_THAT(message_of(spec_with({{"gid", 4294967296}})), HasSubstr("gid: 4294967296 is out of range"));
  EXPECT_THAT(message_of(spec_with({}, {1, 2.5})), HasSubstr("additionalGids: expected an integer"));
  auto fine = CdiSpecFromJson(spec_with({{"major", 195}, {"minor", 255}, {"uid", 0}}, {44}));
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(fine->devices[0].container_edits.device_nodes[0].minor, 255);
  EXPECT_EQ(fine->devices[0].container_edits.additional_gids, std::vector<std::uint32_t>{44});
}

TEST(CdiValidate, RejectsWhatRuntimesReject) {
  EXPECT_TRUE(ValidateCdiSpec(MinimalSpec()).ok());
  CdiSpec s = MinimalSpec();
  s.kind = "noslash";
  EXPECT_FALSE(ValidateCdiSpec(s).ok());
  s = MinimalSpec();
  s.devices.clear();
  EXPECT_FALSE(ValidateCdiSpec(s).ok());
  s = MinimalSpec();
  s.devices.push_back(s.devices[0]);
  EXPECT_NE(ValidateCdiSpec(s).message().find("appears twice"), std::string::npos);
  s = MinimalSpec();
  s.devices[0].name = "-bad";
  EXPECT_FALSE(ValidateCdiSpec(s).ok());
  s = MinimalSpec();
  s.container_edits.env = {"NOEQUALS"};
  EXPECT_NE(ValidateCdiSpec(s).message().find("containerEdits.env[0]"), std::string::npos);
  s = MinimalSpec();
  s.container_edits.hooks.push_back({"beforeEverything", "/x", {}, {}, {}});
  EXPECT_FALSE(ValidateCdiSpec(s).ok());
  s = MinimalSpec();
  s.container_edits.hooks.push_back({"createContainer", "relative", {}, {}, {}});
  EXPECT_FALSE(ValidateCdiSpec(s).ok());
}

TEST(CdiSpecWriter, WritesAtomicallyListsAndRemoves) {
  TempDir dir;
  CdiSpecWriter writer(dir.path() / "cdi");
  const std::string vendor = "k8s.gpu.nvidia.com";
  ASSERT_TRUE(writer.Write(MinimalSpec(), ClaimCdiSpecFileName(vendor, "uid-b")).ok());
  ASSERT_TRUE(writer.Write(MinimalSpec(), ClaimCdiSpecFileName(vendor, "uid-a")).ok());
  ASSERT_TRUE(writer.Write(MinimalSpec(), "other-vendor-claim_x.yaml").ok());
  // Overwrite: a retried prepare rewrites the same file.
  CdiSpec second = MinimalSpec();
  second.container_edits.env = {"A=1"};
  ASSERT_TRUE(writer.Write(second, ClaimCdiSpecFileName(vendor, "uid-a")).ok());

  std::ifstream in(dir.path() / "cdi" / ClaimCdiSpecFileName(vendor, "uid-a"));
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = CdiSpecFromJson(nlohmann::json::parse(text.str()));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->container_edits.env, std::vector<std::string>{"A=1"});
  EXPECT_EQ(parsed->version, "0.3.0");

  struct stat st {};
  ASSERT_EQ(::stat((dir.path() / "cdi").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755U);
  for (const auto& e : fs::directory_iterator(dir.path() / "cdi")) {
    EXPECT_FALSE(e.path().string().ends_with(".tmp")) << e.path();
  }

  auto ids = writer.ListTransient(vendor, kCdiClaimClass);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<std::string>{"uid-a", "uid-b"}));

  ASSERT_TRUE(writer.Remove(ClaimCdiSpecFileName(vendor, "uid-a")).ok());
  EXPECT_TRUE(writer.Remove(ClaimCdiSpecFileName(vendor, "uid-a")).ok()) << "absent is not an error";
  ids = writer.ListTransient(vendor, kCdiClaimClass);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, std::vector<std::string>{"uid-b"});
}

TEST(CdiSpecWriter, InvalidSpecOrNameWritesNothing) {
  TempDir dir;
  CdiSpecWriter writer(dir.path());
  CdiSpec bad = MinimalSpec();
  bad.devices.clear();
  EXPECT_EQ(writer.Write(bad, "k8s.x-claim_a.yaml").code(), common::StatusCode::kInvalidArgument);
  EXPECT_EQ(writer.Write(MinimalSpec(), "../escape.yaml").code(),
            common::StatusCode::kInvalidArgument);
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(CdiSpecWriter, MissingRootListsNothing) {
  CdiSpecWriter writer("/nonexistent/cdi-root-for-test");
  auto ids = writer.ListTransient("k8s.gpu.nvidia.com", "claim");
  ASSERT_TRUE(ids.ok());
  EXPECT_TRUE(ids->empty());
}

}  // namespace
}  // namespace nvdra::kubeletplugin
