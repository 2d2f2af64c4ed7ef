#pragma once

// Where the simulated MPS control daemon and its clients find their files.
// Test infrastructure, not product.
//
// Defines: MpsPaths.
//
// The folders come from the environment as NVIDIA documents it for the real
// nvidia-cuda-mps-control: CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps)
// and CUDA_MPS_LOG_DIRECTORY (default /var/log/nvidia-mps). The file names
// inside them are listed below; `control` and `nvidia-cuda-mps-control.pid`
// are the real daemon's, the rest the simulator's.
//
// Thread-safety: a plain value; FromEnvironment reads the environment, so call
// it from main before threads start.

#include <cstdlib>
#include <filesystem>
#include <string>

namespace nvdra::simmps {

struct MpsPaths {
  std::filesystem::path pipe_dir = "/tmp/nvidia-mps";
  std::filesystem::path log_dir = "/var/log/nvidia-mps";

  // The unix socket the daemon listens on and clients connect to.
  [[nodiscard]] std::filesystem::path control_socket() const { return pipe_dir / "control"; }
  // The daemon's pid, one decimal line (the real daemon writes this file too).
  [[nodiscard]] std::filesystem::path pid_file() const {
    return pipe_dir / "nvidia-cuda-mps-control.pid";
  }
  // Held with flock() for the daemon's lifetime: the one-daemon-per-pipe-folder
  // rule survives a crash (the kernel drops the lock), unlike a pid check.
  [[nodiscard]] std::filesystem::path lock_file() const { return pipe_dir / "control_lock"; }
  // Simulation only: what the daemon was told, for tests on the host (README).
  [[nodiscard]] std::filesystem::path state_file() const {
    return pipe_dir / "simulated-mps-state.json";
  }
  [[nodiscard]] std::filesystem::path control_log() const { return log_dir / "control.log"; }

  // The folders from the environment (unset or empty: the defaults), made
  // absolute so that a daemon which leaves its working folder keeps them.
  static MpsPaths FromEnvironment() {
    MpsPaths out;
    if (const char* v = std::getenv("CUDA_MPS_PIPE_DIRECTORY"); v != nullptr && *v != '\0') {
      out.pipe_dir = v;
    }
    if (const char* v = std::getenv("CUDA_MPS_LOG_DIRECTORY"); v != nullptr && *v != '\0') {
      out.log_dir = v;
    }
    std::error_code ec;
    if (auto abs = std::filesystem::absolute(out.pipe_dir, ec); !ec) out.pipe_dir = abs;
    if (auto abs = std::filesystem::absolute(out.log_dir, ec); !ec) out.log_dir = abs;
    return out;
  }
};

}  // namespace nvdra::simmps
