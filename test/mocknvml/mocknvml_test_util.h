#pragma once

// Helpers for the mock NVML's tests: NvmlLibrary dlopens a libnvidia-ml.so.1
// (RTLD_LOCAL) and resolves every nvml_abi.h function with dlsym; TempDir,
// ScopedEnv and MockNvmlTest set up a profile in a private folder.
//
// Ownership: NvmlLibrary owns its dlopen handle; TempDir its folder.
// Thread-safety: thread-compatible (ScopedEnv changes the process
// environment: use it before starting threads).

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "nvml/nvml_abi.h"
#include "scoped_env.h"  // test/unit

namespace nvdra::mocknvml::testing {

namespace abi = nvdra::nvml::abi;
using nvdra::testing::ScopedEnv;

class NvmlLibrary {
 public:
  explicit NvmlLibrary(const std::string& path) {
    handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      ADD_FAILURE() << "dlopen " << path << ": " << ::dlerror();
      return;
    }
#define NVDRA_RESOLVE(name, params) \
  name = reinterpret_cast<abi::name##_fn>(::dlsym(handle_, #name)); \
  if (name == nullptr) ADD_FAILURE() << "dlsym " #name;
    NVDRA_NVML_FUNCTIONS(NVDRA_RESOLVE)
    NVDRA_RESOLVE(nvmlErrorString, ())
#undef NVDRA_RESOLVE
  }
  ~NvmlLibrary() {
    if (handle_ != nullptr) {
      // Leave NVML uninitialised for the next test in this process.
      while (nvmlShutdown != nullptr && nvmlShutdown() == abi::NVML_SUCCESS) {
      }
      ::dlclose(handle_);
    }
  }
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  bool loaded() const { return handle_ != nullptr; }

  // The handle of GPU `index`; fails the test on error.
  abi::nvmlDevice_t Gpu(unsigned index) {
    abi::nvmlDevice_t device = nullptr;
    EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(index, &device), abi::NVML_SUCCESS);
    return device;
  }
  std::string Uuid(abi::nvmlDevice_t device) {
    char buffer[abi::kDeviceUuidBufferSize] = {};
    EXPECT_EQ(nvmlDeviceGetUUID(device, buffer, sizeof(buffer)), abi::NVML_SUCCESS);
    return buffer;
  }
  std::string Name(abi::nvmlDevice_t device) {
    char buffer[abi::kDeviceNameBufferSize] = {};
    EXPECT_EQ(nvmlDeviceGetName(device, buffer, sizeof(buffer)), abi::NVML_SUCCESS);
    return buffer;
  }

#define NVDRA_FIELD(name, params) abi::name##_fn name = nullptr;
  NVDRA_NVML_FUNCTIONS(NVDRA_FIELD)
#undef NVDRA_FIELD
  abi::nvmlErrorString_fn nvmlErrorString = nullptr;

 private:
  void* handle_ = nullptr;
};

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "mocknvml-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline void WriteFile(const std::filesystem::path& path, const std::string& text) {
  // Temp file + rename, as the mock's state file demands of every writer.
  const std::filesystem::path temp = path.string() + ".test-tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << text;
  }
  std::filesystem::rename(temp, path);
}

inline void AppendLine(const std::filesystem::path& path, const std::string& line) {
  std::ofstream out(path, std::ios::app);
  out << line << "\n";
}

// Copies a shipped profile into a private folder (so state.json and
// events.jsonl land there), points MOCK_NVML_PROFILE at it, clears the other
// MOCK_NVML_* variables, and loads the built mock.
class MockNvmlTest : public ::testing::Test {
 protected:
  // Call first in each test.
  void UseProfile(const std::string& name) {
    profile_ = dir_.path() / "profile.json";
    std::filesystem::copy_file(std::filesystem::path(NVDRA_MOCKNVML_PROFILES_DIR) / name,
                               profile_);
    env_profile_.emplace("MOCK_NVML_PROFILE", profile_.c_str());
    nvml_ = std::make_unique<NvmlLibrary>(NVDRA_MOCKNVML_PATH);
    ASSERT_TRUE(nvml_->loaded());
  }
  void InitOrFail() { ASSERT_EQ(nvml_->nvmlInit_v2(), abi::NVML_SUCCESS); }

  std::filesystem::path state_file() const { return dir_.path() / "state.json"; }
  std::filesystem::path events_file() const { return dir_.path() / "events.jsonl"; }

  TempDir dir_;
  std::filesystem::path profile_;
  ScopedEnv env_state_{"MOCK_NVML_STATE", nullptr};
  ScopedEnv env_events_{"MOCK_NVML_EVENTS", nullptr};
  ScopedEnv env_fabric_state_{"MOCK_NVML_FABRIC_STATE", nullptr};
  ScopedEnv env_fabric_status_{"MOCK_NVML_FABRIC_STATUS", nullptr};
  std::optional<ScopedEnv> env_profile_;
  std::unique_ptr<NvmlLibrary> nvml_;  // last: shut down before the folder goes
};

}  // namespace nvdra::mocknvml::testing
