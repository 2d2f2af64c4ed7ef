#pragma once

// Finding and loading a library of the NVIDIA driver (libnvidia-ml,
// libnvfm) under a driver root with dlopen, the one search both loaders use,
// and the two conversions both need for what those libraries write.
//
// Search order: `library_path` alone when given; otherwise each of
// kDriverLibraryFolders under the driver root, each of `names` in order
// (go-nvlib's root lookup); then, for driver root "/", the dynamic loader's
// own search by name (ld.so.cache knows distribution folders). Libraries are
// opened RTLD_NOW | RTLD_LOCAL: their symbols must not satisfy other
// libraries' lookups (a second copy, such as a mock a test loads, stays
// apart).
//
// Ownership: the caller owns the returned handle (dlclose). Thread-safety:
// as dlopen.

#include <filesystem>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace nvdra::common {

// Folders under a driver root where distributions and the GPU operator put
// the driver's libraries.
inline constexpr const char* kDriverLibraryFolders[] = {
    "usr/lib64", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "lib64", "usr/lib", "lib",
};

struct LoadedDriverLibrary {
  void* handle = nullptr;      // dlopen's handle
  std::filesystem::path path;  // what was opened (a name for the loader's search)
};

// The first library found, or kNotFound whose message is "<what> not found
// under driver root <root>: tried <each path and why>; <hint>".
StatusOr<LoadedDriverLibrary> OpenDriverLibrary(const std::filesystem::path& driver_root,
                                                const std::optional<std::filesystem::path>& library_path,
                                                const std::vector<std::string>& names, const std::string& what,
                                                const std::string& hint);

// A string out of a fixed char buffer the driver filled, which may lack its
// terminator.
std::string DriverBufferString(const char* buffer, std::size_t size);

// The driver writes "00000000:18:00.0" (8-digit domain), in either case;
// sysfs, CDI and Kubernetes' pciBusID attribute use "0000:18:00.0",
// lowercase.
std::string NormalizePciBusId(std::string bus_id);

}  // namespace nvdra::common
