#pragma once

// Changes a GPU's NVLink fabric health under a running process: the mock
// NVML's state file <driver root>/mock-nvml/state.json carries a "fabric"
// map (test/mocknvml/README.md, "Fabric state, for tests") that every
// process using the mock re-reads when the file changes. Written as the
// mock's own writers do: under state.json.lock, to a temporary file renamed
// over the state file.
// Thread-safety: one call at a time per driver root (the lock is per file
// descriptor).

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace nvdra::testing {

// Replaces the state file's "fabric" map with `fabric` (GPU UUID ->
// {"healthSummary": 2, "healthMask": 16, ...}; {} restores the profile's);
// the rest of the file is kept. "" on success, else what failed.
inline std::string SetMockFabric(const std::filesystem::path& driver_root, const nlohmann::json& fabric) {
  const std::filesystem::path state = driver_root / "mock-nvml" / "state.json";
  const std::string lock_path = state.string() + ".lock";
  const int lock = open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (lock < 0) return "open " + lock_path;
  if (flock(lock, LOCK_EX) != 0) {
    close(lock);
    return "flock " + lock_path;
  }
  nlohmann::json content = {{"version", 1}, {"gpus", nlohmann::json::object()}};
  if (std::ifstream in(state); in) {
    std::stringstream text;
    text << in.rdbuf();
    content = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (content.is_discarded() || !content.is_object()) {
      close(lock);
      return "cannot parse " + state.string();
    }
  }
  content["fabric"] = fabric;
  const std::filesystem::path temp = state.string() + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(temp, std::ios::trunc);
    out << content.dump(1) << "\n";
    if (!out) {
      close(lock);
      return "write " + temp.string();
    }
  }
  std::error_code ec;
  std::filesystem::rename(temp, state, ec);
  close(lock);
  return ec ? "rename " + temp.string() + ": " + ec.message() : "";
}

}  // namespace nvdra::testing
