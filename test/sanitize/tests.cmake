# Sanitizer tier (ctest labels "asan" and "tsan"), included last by the
# top-level CMakeLists.txt, once every test target exists.
#
# The concurrency-heavy cluster tests and the unit tier's test programs (all
# of them under ASan, the threaded ones under TSan), built again with clang:
# with AddressSanitizer and UndefinedBehaviorSanitizer into build/asan, with
# ThreadSanitizer into build/tsan (scripts/sanitize; docs/sanitizers.md).
# Where the plain tree leaves its unit programs out (NVDRA_PLAIN_UNIT_TESTS
# =OFF, as scripts/test configures it), build/asan is where the unit tier
# runs. asan.build and
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

# The unit programs TSan runs: those whose tests or code under test start
# threads (the informer, the work queue, the HTTP and gRPC servers, leader
# election, the claim preparer's node lock, device health, the domain watch,
# the controller, logging and metrics from many threads). TSan reports only
# what two threads do, so the single-threaded rest (parsers, renderers,
# device states) would cost a third of the TSan tree's build for nothing;
# ASan + UBSan runs every unit program. A name that is not a unit program
# fails the configure, so a rename cannot drop one silently.
set(NVDRA_TSAN_UNIT_PROGRAMS
  common_log_test common_metrics_test common_metrics_server_test common_signals_test
  common_child_process_test
  k8s_workqueue_test k8s_backoff_test k8s_flow_control_test k8s_client_test k8s_config_test
  k8s_store_test k8s_informer_test k8s_leader_election_test k8s_event_recorder_test
  kubeletplugin_plugin_server_test kubeletplugin_claim_preparer_test
  computedomain_domain_watch_test computedomain_controller_test computedomain_work_item_test
  gpu_device_health_test webhook_server_test webhook_serving_certificate_test
  mocknvml_test simmps_process_test)

get_property(_nvdra_unit_programs GLOBAL PROPERTY NVDRA_UNIT_GTESTS)
foreach(_target IN LISTS NVDRA_TSAN_UNIT_PROGRAMS)
  if(NOT _target IN_LIST _nvdra_unit_programs)
    message(FATAL_ERROR "NVDRA_TSAN_UNIT_PROGRAMS names ${_target}, which is not a unit program")
  endif()
endforeach()
set(_nvdra_cluster_programs)
foreach(_target IN LISTS NVDRA_SANITIZED_CLUSTER_TESTS)
  if(TARGET ${_target})
    list(APPEND _nvdra_cluster_programs ${_target})
  endif()
endforeach()

foreach(_kind IN ITEMS address thread)
  if(_kind STREQUAL "address")
    set(_tier asan)
    set(_nvdra_sanitized_programs ${_nvdra_unit_programs} ${_nvdra_cluster_programs})
  else()
    set(_tier tsan)
    set(_nvdra_sanitized_programs ${NVDRA_TSAN_UNIT_PROGRAMS} ${_nvdra_cluster_programs})
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

# The thread-safety analysis these trees compile src/ with (-Wthread-safety
# -Werror=thread-safety, CMakeLists.txt) can fail: the ASan tree's own flags
# for a src/ file must reject a snippet that reads a guarded member without
# its mutex.
add_test(NAME asan.thread_safety_rejects_unguarded_access
         COMMAND ${CMAKE_SOURCE_DIR}/scripts/check-thread-safety ${CMAKE_BINARY_DIR}/asan
                 --expect-failure ${CMAKE_SOURCE_DIR}/test/unit/common/thread_safety_negative.cc
                 --flags-of src/common/metrics.cc --as-configured)
set_tests_properties(asan.thread_safety_rejects_unguarded_access PROPERTIES LABELS asan TIMEOUT 120
                     FIXTURES_REQUIRED nvdra_asan_build)
