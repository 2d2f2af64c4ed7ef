# fmt::fmt: {fmt} compiled into a static archive of ours (cmake/fmt_static.cc)
# from Debian's libfmt-dev headers, in place of Debian's libfmt.so.
#
# Why: libfmt.so is a C++ shared object, so while any binary loads it the
# binary also needs the shared libstdc++ (1.7 MiB resident in the
# gpu-kubelet-plugin, almost all of it code the plugin never calls), and the
# plugin binaries link libstdc++ statically (nvdra_static_cxx_runtime below).
# Debian ships no libfmt.a, and fmt::fmt-header-only compiles fmt's whole
# implementation into every translation unit that includes fmt/format.h
# (measured: 4.0 s -> 9.7 s for one of ours), so the one translation unit
# that needs it is compiled once here.
#
# Include this file before find_package(fmt) (and spdlog, whose config looks
# fmt up): fmt's package config defines its imported targets only when no
# target named fmt::fmt exists yet, so every target of the project, and
# spdlog::spdlog_header_only's own link to fmt::fmt, resolve to the archive
# and no process holds two copies of fmt. fmt::fmt-header-only keeps its
# meaning. Off: Debian's shared libfmt.

option(NVDRA_STATIC_FMT "Link {fmt} as a static archive built from Debian's headers" ON)

if(NVDRA_STATIC_FMT)
  add_library(nvdra_fmt STATIC ${CMAKE_CURRENT_LIST_DIR}/fmt_static.cc)
  add_library(fmt::fmt ALIAS nvdra_fmt)
  add_library(nvdra_fmt_header_only INTERFACE)
  target_compile_definitions(nvdra_fmt_header_only INTERFACE FMT_HEADER_ONLY=1)
  add_library(fmt::fmt-header-only ALIAS nvdra_fmt_header_only)
endif()

# nvdra_static_cxx_runtime(<target>): links libstdc++ and libgcc into an
# executable (or a shared object that exports a C API only, as the mock NVML).
# Only for binaries that load no C++ shared object (each would bring the
# shared libstdc++ back, with a second copy of its globals); the
# gpu-kubelet-plugin loads C libraries only (libcurl, OpenSSL, NVML).
# Not with the sanitizers, whose runtimes expect the shared libstdc++.
option(NVDRA_STATIC_CXX_RUNTIME "Link libstdc++ and libgcc statically into the kubelet plugins" ON)

function(nvdra_static_cxx_runtime target)
  if(NVDRA_STATIC_CXX_RUNTIME AND NOT NVDRA_SANITIZE)
    target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc)
  endif()
endfunction()
