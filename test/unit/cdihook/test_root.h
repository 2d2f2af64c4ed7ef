#pragma once

// A temporary OCI bundle for the hook tests: <tmp>/bundle/config.json with
// root.path "rootfs", <tmp>/bundle/rootfs, and <tmp>/host standing for host
// files that must never be touched. Removed on destruction.
// Owns: the temporary folder. Thread-compatible.

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace nvdra::cdihook::testing {

class TestBundle {
 public:
  TestBundle() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "cdihook-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    dir_ = tmpl;
    std::filesystem::create_directories(rootfs());
    std::filesystem::create_directories(host());
    WriteFile(bundle() / "config.json", R"({"ociVersion":"1.0.2","root":{"path":"rootfs"}})");
  }
  ~TestBundle() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  TestBundle(const TestBundle&) = delete;
  TestBundle& operator=(const TestBundle&) = delete;

  std::filesystem::path dir() const { return dir_; }
  std::filesystem::path bundle() const { return dir_ / "bundle"; }
  std::filesystem::path rootfs() const { return bundle() / "rootfs"; }
  std::filesystem::path host() const { return dir_ / "host"; }
  // The OCI state a runtime would write to the hook's stdin.
  std::string State() const {
    return R"({"ociVersion":"1.0.2","id":"c1","status":"creating","pid":42,"bundle":")" +
           bundle().string() + R"("})";
  }

  static void WriteFile(const std::filesystem::path& path, const std::string& content) {
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << content;
  }
  static std::string ReadFile(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::stringstream buffer;
    buffer << in.rdbuf();
    return buffer.str();
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace nvdra::cdihook::testing
