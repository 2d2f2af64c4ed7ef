#pragma once

// Test helpers for flag parsing: ParseArgs runs common::ParseFlags on a list
// of args; ScopedEnv (scoped_env.h) sets or unsets a variable for a scope.
// Thread-compatible: the environment is process-wide, so tests using these
// must not run flag parsing on other threads.

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/flags.h"
#include "scoped_env.h"

namespace nvdra::testing {

// ParseFlags with argv[0] = "test-binary" followed by `args`.
inline std::optional<int> ParseArgs(CLI::App& app, const std::vector<std::string>& args) {
  std::vector<const char*> argv = {"test-binary"};
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  return common::ParseFlags(app, static_cast<int>(argv.size()), argv.data());
}

}  // namespace nvdra::testing
