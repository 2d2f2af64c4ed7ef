# CMake toolchain file: cross-builds for linux/arm64 (aarch64-linux-gnu) with
# Debian's cross compiler (g++-aarch64-linux-gnu) against a sysroot of
# Debian's arm64 packages.
#
#   scripts/cross-build arm64          makes the sysroot, configures and builds build/arm64
#   cmake -S . -B build/arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
#         -DNVDRA_TESTS=OFF
#
# The sysroot is the arm64 -dev packages the build links (gRPC, protobuf,
# abseil, OpenSSL, nghttp2, zlib, yaml-cpp, spdlog, fmt, ...), unpacked by
# scripts/cross-build with mmdebstrap --arch=arm64 into
# .cache/cross/aarch64-linux-gnu/sysroot (NVDRA_SYSROOT, in the environment or
# the cache, picks another). Not the host's dpkg with multiarch :arm64
# packages: libyaml-cpp-dev is not Multi-Arch: same, so it cannot be
# installed beside the amd64 one, and the :arm64 packages must be the same
# versions as the host's, which would upgrade the host's headers under every
# build tree on the machine.
#
# Code generators run on the host: protoc (FindProtobuf looks programs up on
# the host) and grpc_cpp_plugin (the top-level CMakeLists.txt defines
# gRPC::grpc_cpp_plugin from the host's when the sysroot's gRPC package has
# none).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

if(NOT NVDRA_SYSROOT)
  if(DEFINED ENV{NVDRA_SYSROOT})
    set(NVDRA_SYSROOT "$ENV{NVDRA_SYSROOT}")
  else()
    get_filename_component(NVDRA_SYSROOT "${CMAKE_CURRENT_LIST_DIR}/../.cache/cross/aarch64-linux-gnu/sysroot" ABSOLUTE)
  endif()
endif()
if(NOT EXISTS "${NVDRA_SYSROOT}/usr/lib/aarch64-linux-gnu")
  message(FATAL_ERROR "no arm64 sysroot at ${NVDRA_SYSROOT}: run scripts/cross-build arm64 "
                      "(it makes one with mmdebstrap), or set NVDRA_SYSROOT")
endif()
# try_compile projects read this file again: hand them the same sysroot.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES NVDRA_SYSROOT)
set(CMAKE_SYSROOT "${NVDRA_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH "${NVDRA_SYSROOT}")
# Programs (protoc, grpc_cpp_plugin, python3, patch) from the host; libraries,
# headers and packages from the sysroot only.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# pkg-config (cmake/StaticHttplib.cmake's fallback) in the sysroot too.
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${NVDRA_SYSROOT}")
set(ENV{PKG_CONFIG_LIBDIR} "${NVDRA_SYSROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${NVDRA_SYSROOT}/usr/share/pkgconfig")
