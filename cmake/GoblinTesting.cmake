# goblin_add_test(NAME n SOURCES ... [LIBS ...] LABELS unit|system|fuzz|rdma|slow [TIMEOUT s]
#                 [ENVIRONMENT K=V ...] [SLOW_TESTS gtest-pattern])
#   Builds a GoogleTest binary and registers each of its test cases with ctest, labelled.
#   Cases matching SLOW_TESTS get the label "slow" instead (the sanitizer runs skip them);
#   they take the lock "big_objects" (one at a time: each writes gigabytes to the disk) and
#   a high COST, so that ctest starts them first and the short cases run beside them.
#   (Test bodies keep -O1 under the sanitizers: at -O0 their byte-wise helpers, reading
#   files and making patterns, made the ASan test run take 285 s instead of 166 s.)
# goblin_add_fuzz(NAME n SOURCES ... [LIBS ...] [SECONDS s] [CORPUS dir])
#   Builds a fuzz target exporting LLVMFuzzerTestOneInput. Under the Fuzz build type it links
#   clang's libFuzzer and ctest runs it for SECONDS; in every other build it links
#   tests/fuzz/standalone_main.cpp, which replays the checked-in corpus plus a bounded number
#   of deterministic random mutations, so the gcc sanitizer build exercises it too.
include(GoogleTest)

function(goblin_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT;SLOW_TESTS" "SOURCES;LIBS;LABELS;ENVIRONMENT" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  if(T_SLOW_TESTS)
    # gtest_discover_tests cannot pass a list in PROPERTIES (it is split into pairs), so the
    # slow cases carry the single label "slow".
    gtest_discover_tests(${T_NAME}
      DISCOVERY_MODE PRE_TEST
      DISCOVERY_TIMEOUT 60
      TEST_FILTER "-${T_SLOW_TESTS}"
      PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT} ENVIRONMENT "${T_ENVIRONMENT}")
    gtest_discover_tests(${T_NAME}
      DISCOVERY_MODE PRE_TEST
      DISCOVERY_TIMEOUT 60
      TEST_FILTER "${T_SLOW_TESTS}"
      PROPERTIES LABELS slow TIMEOUT ${T_TIMEOUT} RESOURCE_LOCK big_objects COST 5000
                 ENVIRONMENT "${T_ENVIRONMENT}")  # (last: an empty value takes nothing)
  else()
    gtest_discover_tests(${T_NAME}
      DISCOVERY_MODE PRE_TEST
      DISCOVERY_TIMEOUT 60
      PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT} ENVIRONMENT "${T_ENVIRONMENT}")
  endif()
endfunction()

function(goblin_add_fuzz)
  cmake_parse_arguments(F "" "NAME;SECONDS;CORPUS" "SOURCES;LIBS" ${ARGN})
  if(NOT F_SECONDS)
    set(F_SECONDS 30)
  endif()
  add_executable(${F_NAME} ${F_SOURCES})
  target_link_libraries(${F_NAME} PRIVATE ${F_LIBS})
  set(corpus_dir ${CMAKE_CURRENT_SOURCE_DIR}/corpus/${F_NAME})
  if(CMAKE_BUILD_TYPE STREQUAL "Fuzz")
    target_link_options(${F_NAME} PRIVATE -fsanitize=fuzzer)
    set(work ${CMAKE_CURRENT_BINARY_DIR}/${F_NAME}.corpus)
    file(MAKE_DIRECTORY ${work})
    add_test(NAME ${F_NAME}
      COMMAND ${F_NAME} -max_total_time=${F_SECONDS} -timeout=10 -rss_limit_mb=2048
              -print_final_stats=1 ${work} ${corpus_dir})
    set_tests_properties(${F_NAME} PROPERTIES LABELS fuzz TIMEOUT ${F_SECONDS}0)
  else()
    target_sources(${F_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/tests/fuzz/standalone_main.cpp)
    add_test(NAME ${F_NAME} COMMAND ${F_NAME} --iterations=20000 ${corpus_dir})
    set_tests_properties(${F_NAME} PROPERTIES LABELS fuzz TIMEOUT 300)
  endif()
endfunction()
