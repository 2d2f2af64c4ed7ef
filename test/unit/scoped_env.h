#pragma once

// ScopedEnv: sets or unsets one environment variable for a scope and restores
// the old value after. Header-only with no dependencies, so test helpers of
// other folders (the mock NVML's) share it.
// Thread-compatible: the environment is process-wide; do not use it while
// other threads read the environment.

#include <cstdlib>
#include <optional>
#include <string>

namespace nvdra::testing {

class ScopedEnv {
 public:
  // `value` nullptr unsets the variable.
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace nvdra::testing
