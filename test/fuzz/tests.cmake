# Fuzz tier (ctest label "fuzz"), included by the top-level CMakeLists.txt.
# The targets are clang/libFuzzer programs built apart from the g++ tree
# (test/fuzz/CMakeLists.txt), so fuzz.build builds them into build/fuzz when
# the tests run, and each fuzz.<target> runs one for a bounded time over its
# seed corpus in test/fuzz/corpus/<target>/ (scripts/fuzz; docs/fuzzing.md).

# Seconds each target runs in a test run; longer runs are for people
# (scripts/fuzz run TARGET 600).
set(NVDRA_FUZZ_SECONDS 10 CACHE STRING "Seconds each fuzz.<target> test fuzzes")

add_test(NAME fuzz.build COMMAND ${CMAKE_SOURCE_DIR}/scripts/fuzz build ${CMAKE_BINARY_DIR}/fuzz)
# PROCESSORS 2: the build runs two compilers; ctest -j2 then runs nothing
# beside it, as scripts/test builds with two jobs and no tests.
set_tests_properties(fuzz.build PROPERTIES LABELS fuzz TIMEOUT 1200 PROCESSORS 2
                     FIXTURES_SETUP nvdra_fuzz_build)

file(STRINGS ${CMAKE_CURRENT_LIST_DIR}/CMakeLists.txt _nvdra_fuzz_lines REGEX "^nvdra_fuzz_target\\(")
foreach(_line IN LISTS _nvdra_fuzz_lines)
  string(REGEX REPLACE "^nvdra_fuzz_target\\(([a-z_]+) .*" "\\1" _target "${_line}")
  add_test(NAME fuzz.${_target}
           COMMAND ${CMAKE_SOURCE_DIR}/scripts/fuzz run ${_target} ${NVDRA_FUZZ_SECONDS})
  set_tests_properties(fuzz.${_target} PROPERTIES LABELS fuzz TIMEOUT 300
                       FIXTURES_REQUIRED nvdra_fuzz_build
                       ENVIRONMENT "FUZZ_DIR=${CMAKE_BINARY_DIR}/fuzz")
endforeach()
# The target list is read from test/fuzz/CMakeLists.txt: configure again when it changes.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/CMakeLists.txt)
