#pragma once

// Test helpers for flag parsing: ScopedEnv sets or unsets one environment
// variable for a scope; ParseArgs runs common::ParseFlags on a list of args.
// Thread-compatible: the environment is process-wide, so tests using these
// must not run flag parsing on other threads.

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/flags.h"

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

// ParseFlags with argv[0] = "test-binary" followed by `args`.
inline std::optional<int> ParseArgs(CLI::App& app, const std::vector<std::string>& args) {
  std::vector<const char*> argv = {"test-binary"};
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  return common::ParseFlags(app, static_cast<int>(argv.size()), argv.data());
}

}  // namespace nvdra::testing
