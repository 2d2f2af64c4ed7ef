# fmt::fmt: {fmt} compiled into a static archive of ours (cmake/fmt_static.cc)
# from Debian's libfmt-dev headers, in place of Debian's libfmt.so.
#
# Why: libfmt.so is a C++ shared object, so while any binary loads it the
# binary also needs the shared libstdc++ (1.7 MiB resident in the
# gpu-kubelet-plugin, almost all of it code the plugin never calls), and the
# plugin binaries link libstdc++ statically (cmake/LeanLink.cmake).
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
