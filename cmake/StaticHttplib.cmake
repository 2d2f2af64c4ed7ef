# nvdra::httplib: cpp-httplib (the plugins' metrics and health endpoints, the
# webhook's HTTPS server), as a static library built from Debian's own
# cpp-httplib source (NVDRA_STATIC_HTTPLIB, default on), or Debian's shared
# libcpp-httplib.
#
# Why: Debian ships cpp-httplib only as a C++ shared object. Loading one in
# the kubelet plugins brings the shared libstdc++ (and OpenSSL and brotli)
# back, so they could not link libstdc++ statically (cmake/LeanLink.cmake):
# 1.3 MiB of resident memory in the gpu-kubelet-plugin (bench/README.md,
# "Where the plugin's RSS goes").
#
# What is built: the upstream 0.11.4 tarball with Debian's patches
# (0.11.4+ds-1+deb12u1: the CVE-2023-26130 fix), fetched once from
# deb.debian.org into .cache/cpp-httplib and checked against the SHA-256 sums
# of Debian's .dsc (cmake/DebianSource.cmake), split into a header and one
# source file by upstream's split.py, as Debian's build does, and compiled
# with Debian's features (OpenSSL, zlib; not brotli, which nothing of ours
# sends or accepts) and Debian's -DCPPHTTPLIB_USE_POLL. Offline, or when a
# step fails, the configure says why and links Debian's library.

option(NVDRA_STATIC_HTTPLIB "Build cpp-httplib statically from Debian's source" ON)
include(${CMAKE_CURRENT_LIST_DIR}/DebianSource.cmake)

# TRUE below once our static build is the one linked.
set(NVDRA_STATIC_HTTPLIB_IN_USE FALSE)
add_library(nvdra_httplib_interface INTERFACE)
add_library(nvdra::httplib ALIAS nvdra_httplib_interface)

if(NVDRA_STATIC_HTTPLIB)
  set(_nvdra_httplib_debian 0.11.4+ds-1+deb12u1)
  set(_nvdra_httplib_dir ${CMAKE_SOURCE_DIR}/.cache/cpp-httplib/${_nvdra_httplib_debian})
  nvdra_debian_source(_nvdra_httplib POOL http://deb.debian.org/debian/pool/main/c/cpp-httplib
    DIR ${_nvdra_httplib_dir}
    ORIG cpp-httplib_0.11.4+ds.orig.tar.xz 8b1a5df569003b6a4f24c68489bbda5c64aec94697bdc9ebba5d79408b2ae7eb
    DEBIAN cpp-httplib_${_nvdra_httplib_debian}.debian.tar.xz a0adf8a38610806f6d94ba69839438635e5e6580775e28ff31d6a081e34f1484)
  set(_nvdra_httplib_split ${_nvdra_httplib_dir}/split)
  if(_nvdra_httplib_OK AND NOT EXISTS ${_nvdra_httplib_split}/httplib.cc)
    find_package(Python3 COMPONENTS Interpreter)
    if(NOT Python3_Interpreter_FOUND)
      message(WARNING "NVDRA_STATIC_HTTPLIB: no python3 to run cpp-httplib's split.py")
      set(_nvdra_httplib_OK FALSE)
    endif()
    _nvdra_debian_step(_nvdra_httplib_OK "NVDRA_STATIC_HTTPLIB: splitting httplib.h"
      COMMAND ${Python3_EXECUTABLE} ${_nvdra_httplib_SOURCE_DIR}/split.py --out ${_nvdra_httplib_split}
      WORKING_DIRECTORY ${_nvdra_httplib_dir})
  endif()
  if(_nvdra_httplib_OK)
    # OpenSSL::SSL and ::Crypto: found by cmake/StaticOpenSSL.cmake, included
    # next (its choice of static or shared depends on this file's outcome).
    find_package(ZLIB REQUIRED)
    add_library(nvdra_httplib STATIC ${_nvdra_httplib_split}/httplib.cc)
    target_include_directories(nvdra_httplib SYSTEM PUBLIC ${_nvdra_httplib_split})
    # A listen backlog of 1024, not httplib's 5: under a burst of connections
    # (100 idle clients at the webhook) the kernel dropped SYNs, and a probe
    # waited out the 1 s SYN retransmission.
    target_compile_definitions(nvdra_httplib PUBLIC
      CPPHTTPLIB_OPENSSL_SUPPORT CPPHTTPLIB_ZLIB_SUPPORT CPPHTTPLIB_USE_POLL CPPHTTPLIB_LISTEN_BACKLOG=1024)
    # One section per function: a plugin's --gc-sections then drops the TLS
    # server and the client it never uses.
    target_compile_options(nvdra_httplib PRIVATE -ffunction-sections -fdata-sections)
    target_link_libraries(nvdra_httplib PUBLIC OpenSSL::SSL OpenSSL::Crypto ZLIB::ZLIB Threads::Threads)
    target_link_libraries(nvdra_httplib_interface INTERFACE nvdra_httplib)
    set(NVDRA_STATIC_HTTPLIB_IN_USE TRUE)
    message(STATUS "NVDRA_STATIC_HTTPLIB: static cpp-httplib ${_nvdra_httplib_debian} from ${_nvdra_httplib_dir}")
  else()
    message(WARNING "NVDRA_STATIC_HTTPLIB: using Debian's shared libcpp-httplib "
                    "(-DNVDRA_STATIC_HTTPLIB=OFF skips this attempt)")
  endif()
endif()
if(NOT NVDRA_STATIC_HTTPLIB_IN_USE)
  # Debian ships only a pkg-config file.
  pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
  target_link_libraries(nvdra_httplib_interface INTERFACE PkgConfig::HTTPLIB)
endif()
