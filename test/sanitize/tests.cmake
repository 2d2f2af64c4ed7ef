# Sanitizer tier (ctest labels "asan" and "tsan"), included last by the
# top-level CMakeLists.txt, once every test target exists.
#
# The unit tier's test programs and the concurrency-heavy cluster tests,
# built a second and a third time with clang: with AddressSanitizer and
# UndefinedBehaviorSanitizer into build/asan, with ThreadSanitizer into
# build/tsan (scripts/sanitize; docs/sanitizers.md). asan.build and
# tsan.build build them when the tests run, as fuzz.build does for the fuzz
# targets; then asan.<program> and tsan.<program> run each program whole
# (all its tests in one process: one sanitizer start-up per program, and
# tests that share a process are what the sanitizers look at best). The
# product binaries the cluster tests start (the controller, the daemon) come
# from the same sanitized tree, so a report from them fails the test too.

# Cluster tests whose code runs many threads: the informer, the slice
# publisher, leader election and the controller (with its daemons). The
# work queue and the claim preparer have unit tests, run above.
set(NVDRA_SANITIZED_CLUSTER_TESTS
  k8s_informer_cluster_test
  k8s_leader_election_cluster_test
  resource_slice_publisher_cluster_test
  cd_controller_cluster_test)

get_property(_nvdra_sanitized_programs GLOBAL PROPERTY NVDRA_UNIT_GTESTS)
foreach(_target IN LISTS NVDRA_SANITIZED_CLUSTER_TESTS)
  if(TARGET ${_target})
    list(APPEND _nvdra_sanitized_programs ${_target})
  endif()
endforeach()

foreach(_kind IN ITEMS address thread)
  if(_kind STREQUAL "address")
    set(_tier asan)
  else()
    set(_tier tsan)
  endif()
  set(_tree ${CMAKE_BINARY_DIR}/${_tier})
  add_test(NAME ${_tier}.build
           COMMAND ${CMAKE_SOURCE_DIR}/scripts/sanitize build ${_kind} ${_tree} ${_nvdra_sanitized_programs}
                   sanitize_canary)
  # PROCESSORS 2: the build runs two compilers; ctest -j2 then runs nothing
  # beside it, as scripts/test builds with two jobs and no tests.
  set_tests_properties(${_tier}.build PROPERTIES LABELS ${_tier} TIMEOUT 1800 PROCESSORS 2
                       FIXTURES_SETUP nvdra_${_tier}_build)
  foreach(_target IN LISTS _nvdra_sanitized_programs)
    get_target_property(_dir ${_target} BINARY_DIR)
    file(RELATIVE_PATH _rel ${CMAKE_BINARY_DIR} ${_dir})
    add_test(NAME ${_tier}.${_target}
             COMMAND ${CMAKE_SOURCE_DIR}/scripts/sanitize run ${_kind} ${_tree}/${_rel}/${_target})
    set_tests_properties(${_tier}.${_target} PROPERTIES LABELS ${_tier} TIMEOUT 900
                         FIXTURES_REQUIRED nvdra_${_tier}_build)
  endforeach()
  # The canaries: a bug of each kind the tree's sanitizer must report.
  if(_kind STREQUAL "address")
    set(_canaries "heap-use-after-free=heap-use-after-free" "signed-overflow=signed integer overflow"
                  "leak=detected memory leaks")
  else()
    set(_canaries "data-race=data race")
  endif()
  foreach(_canary IN LISTS _canaries)
    string(REGEX MATCH "^[^=]+" _mode "${_canary}")
    string(REGEX REPLACE "^[^=]+=" "" _report "${_canary}")
    add_test(NAME ${_tier}.canary.${_mode}
             COMMAND ${CMAKE_SOURCE_DIR}/scripts/sanitize expect ${_kind} "${_report}"
                     ${_tree}/test/sanitize/sanitize_canary ${_mode})
    set_tests_properties(${_tier}.canary.${_mode} PROPERTIES LABELS ${_tier} TIMEOUT 60
                         FIXTURES_REQUIRED nvdra_${_tier}_build)
  endforeach()
endforeach()
