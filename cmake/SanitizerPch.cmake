# Precompiled headers for the clang trees (build/asan, build/tsan), which
# scripts/test builds cold in every CI run.
#
# Clang spends about 4 s of a 17 s test-file compile under ASan parsing the
# same headers (nlohmann/json, fmt, GoogleTest, the standard library). Two
# shared precompiled headers, one for the libraries and one for the test
# programs, are each built once per tree and reused by every C++ target of
# src/, cmd/, test/unit and test/cluster (REUSE_FROM). Clang checks that a
# reused header was built with compatible options and refuses it otherwise,
# so a mismatch fails the build instead of compiling wrong code.
#
# Not for the g++ trees: with a precompiled header g++ 12 reports false
# -Warray-bounds errors in our code under -Werror (tried in stop 36). Left
# out: position-independent code (the mock NVML and other shared objects,
# whose flags differ), the simulators that build fmt header-only
# (test/simimex, test/simmps), generated code and third-party sources.
#
# nvdra_use_sanitizer_pch(): call once, after every target is defined.

set(_nvdra_pch_headers
  <algorithm> <chrono> <cstdint> <filesystem> <functional> <map> <memory> <mutex>
  <optional> <set> <string> <string_view> <thread> <unordered_map> <utility> <vector>
  <fmt/format.h> <nlohmann/json.hpp>)

function(_nvdra_collect_targets dir out)
  get_property(_targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(_subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(_sub IN LISTS _subdirs)
    _nvdra_collect_targets(${_sub} _more)
    list(APPEND _targets ${_more})
  endforeach()
  set(${out} ${_targets} PARENT_SCOPE)
endfunction()

function(nvdra_use_sanitizer_pch)
  file(WRITE ${CMAKE_BINARY_DIR}/nvdra_pch_owner.cc "// The owner of a shared precompiled header.\n")
  add_library(nvdra_pch_lib OBJECT ${CMAKE_BINARY_DIR}/nvdra_pch_owner.cc)
  target_link_libraries(nvdra_pch_lib PRIVATE fmt::fmt nlohmann_json::nlohmann_json)
  target_precompile_headers(nvdra_pch_lib PRIVATE ${_nvdra_pch_headers})
  add_library(nvdra_pch_test OBJECT ${CMAKE_BINARY_DIR}/nvdra_pch_owner.cc)
  target_link_libraries(nvdra_pch_test PRIVATE fmt::fmt nlohmann_json::nlohmann_json GTest::gtest GTest::gmock)
  target_precompile_headers(nvdra_pch_test PRIVATE ${_nvdra_pch_headers} <gtest/gtest.h> <gmock/gmock.h>)

  _nvdra_collect_targets(${CMAKE_SOURCE_DIR} _all)
  set(_count_lib 0)
  set(_count_test 0)
  foreach(_t IN LISTS _all)
    if(_t MATCHES "^nvdra_pch_")
      continue()
    endif()
    get_target_property(_type ${_t} TYPE)
    if(NOT _type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|OBJECT_LIBRARY)$")
      continue()
    endif()
    get_target_property(_dir ${_t} SOURCE_DIR)
    file(RELATIVE_PATH _rel ${CMAKE_SOURCE_DIR} ${_dir})
    if(NOT _rel MATCHES "^(src|cmd|test/unit|test/cluster)(/|$)")
      continue()
    endif()
    get_target_property(_pic ${_t} POSITION_INDEPENDENT_CODE)
    if(_pic)
      continue()
    endif()
    get_target_property(_sources ${_t} SOURCES)
    set(_has_cxx FALSE)
    foreach(_s IN LISTS _sources)
      if(_s MATCHES "\\.(cc|cpp|cxx)$")
        set(_has_cxx TRUE)
      endif()
    endforeach()
    if(NOT _has_cxx)
      continue()
    endif()
    get_target_property(_libs ${_t} LINK_LIBRARIES)
    if(_libs MATCHES "GTest::")
      target_precompile_headers(${_t} REUSE_FROM nvdra_pch_test)
      math(EXPR _count_test "${_count_test} + 1")
    else()
      target_precompile_headers(${_t} REUSE_FROM nvdra_pch_lib)
      math(EXPR _count_lib "${_count_lib} + 1")
    endif()
  endforeach()
  message(STATUS "Precompiled headers: ${_count_lib} library and ${_count_test} test targets")
endfunction()
