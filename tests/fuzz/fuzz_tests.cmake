# The request-parsing fuzzer (libFuzzer needs clang; Debian's clang-14 and
# libclang-rt-14-dev). Built beside the project, run for a bounded time.
find_program(KILN_FUZZ_CXX NAMES clang++-14 clang++)
if(NOT KILN_FUZZ_CXX)
  message(STATUS "clang++ not found: the request fuzzer is not built")
  return()
endif()
set(KILN_FUZZER ${CMAKE_CURRENT_BINARY_DIR}/kiln_request_fuzzer)
add_custom_command(
  OUTPUT ${KILN_FUZZER}
  COMMAND ${KILN_FUZZ_CXX} -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
          -I${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/apps/serve/requests.cpp
          ${CMAKE_CURRENT_SOURCE_DIR}/tests/fuzz/request_fuzzer.cpp -o ${KILN_FUZZER}
  DEPENDS apps/serve/requests.cpp apps/serve/requests.h tests/fuzz/request_fuzzer.cpp
  COMMENT "Building the request fuzzer with ${KILN_FUZZ_CXX}")
add_custom_target(build_request_fuzzer ALL DEPENDS ${KILN_FUZZER})
file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fuzz-corpus)
add_test(NAME fuzz.requests
         COMMAND ${KILN_FUZZER} -max_total_time=20 -print_final_stats=1 -rss_limit_mb=1024
                 ${CMAKE_CURRENT_BINARY_DIR}/fuzz-corpus ${CMAKE_CURRENT_SOURCE_DIR}/tests/fuzz/corpus)
set_tests_properties(fuzz.requests PROPERTIES LABELS "cpu;fuzz" TIMEOUT 120)
