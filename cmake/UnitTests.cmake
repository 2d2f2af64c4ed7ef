# The unit tier's GoogleTest programs: where they run.
#
# Every unit program is built three times in a full test run: here, and in
# the ASan + UBSan and TSan trees (test/sanitize/tests.cmake), which run it
# whole under the sanitizer. NVDRA_PLAIN_UNIT_TESTS=OFF (what scripts/test
# configures) leaves the plain copy out: the targets stay defined, so the
# sanitized trees and `cmake --build build --target <program>` still find
# them, but they are not in the default build and ctest has no plain
# `unit.*` cases for them. The ASan tree then runs the unit tier alone; on
# this 2-core machine that saves the plain compile of about 100 test files
# (about 1,000 s of CPU in a cold build) and a second run of the same tests.
option(NVDRA_PLAIN_UNIT_TESTS
       "Build the unit tier's GoogleTest programs in this tree and run them under ctest (label unit)" ON)

# nvdra_register_unit_gtest(<target> [TEST_PREFIX <prefix>] [TIMEOUT <seconds>])
# Registers an existing GoogleTest executable as a unit program: its cases
# become ctest tests (label unit) when plain unit tests are on, and the
# sanitized trees run it in every case.
function(nvdra_register_unit_gtest target)
  cmake_parse_arguments(ARG "" "TEST_PREFIX;TIMEOUT" "" ${ARGN})
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "nvdra_register_unit_gtest(${target}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  set_property(GLOBAL APPEND PROPERTY NVDRA_UNIT_GTESTS ${target})
  if(NOT NVDRA_PLAIN_UNIT_TESTS)
    set_target_properties(${target} PROPERTIES EXCLUDE_FROM_ALL ON)
    return()
  endif()
  set(_properties LABELS unit)
  if(ARG_TIMEOUT)
    list(APPEND _properties TIMEOUT ${ARG_TIMEOUT})
  endif()
  set(_prefix)
  if(ARG_TEST_PREFIX)
    set(_prefix TEST_PREFIX ${ARG_TEST_PREFIX})
  endif()
  # PRE_TEST: test discovery runs at ctest time, keeping builds fast.
  gtest_discover_tests(${target} DISCOVERY_MODE PRE_TEST ${_prefix} PROPERTIES ${_properties})
endfunction()
