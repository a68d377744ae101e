# SPDX-License-Identifier: Apache-2.0
# disagmoe_add_test(NAME name SOURCES a.cpp ... [LIBS ...] [LABELS ...] [TIMEOUT s])
#   One doctest executable per module, registered with ctest under `name`.
option(DISAGMOE_UNITY_TESTS "Compile each test module's files in unity batches (faster full builds)" ON)
if(NOT DEFINED CMAKE_UNITY_BUILD_BATCH_SIZE)
  set(CMAKE_UNITY_BUILD_BATCH_SIZE 4)  # keeps both cores of a 2-core machine busy
endif()
function(disagmoe_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(test_${T_NAME} ${T_SOURCES})
  target_link_libraries(test_${T_NAME} PRIVATE disagmoe_doctest_main disagmoe::core ${T_LIBS})
  target_compile_options(test_${T_NAME} PRIVATE ${DISAGMOE_WARNINGS})
  if(DISAGMOE_UNITY_TESTS)
    # The test files of one module share most template instantiations (the simulator,
    # the planner, the trainer): compiled together they are instantiated once per batch
    # instead of once per file.
    set_target_properties(test_${T_NAME} PROPERTIES UNITY_BUILD ON)
  endif()
  if(DISAGMOE_BUILD_FUZZERS)
    # The fuzz preset builds and runs only the fuzz targets; the test target still
    # exists so that module CMake code may configure it.
    set_target_properties(test_${T_NAME} PROPERTIES EXCLUDE_FROM_ALL TRUE)
    return()
  endif()
  add_test(NAME ${T_NAME} COMMAND test_${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}")
endfunction()

# disagmoe_add_program(name SOURCES a.cpp ... [LIBS ...])
#   An installed command-line program (examples/ and its tools).
function(disagmoe_add_program NAME)
  cmake_parse_arguments(P "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${NAME} ${P_SOURCES})
  target_link_libraries(${NAME} PRIVATE disagmoe::core ${P_LIBS})
  target_compile_options(${NAME} PRIVATE ${DISAGMOE_WARNINGS})
  if(DISAGMOE_INSTALL)
    install(TARGETS ${NAME} RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
  endif()
endfunction()

# Adds every immediate subdirectory of the current source dir that has a CMakeLists.txt,
# so that each module owns its own folder under tests/, examples/ and bench/.
function(disagmoe_add_subdirectories)
  file(GLOB children LIST_DIRECTORIES true RELATIVE "${CMAKE_CURRENT_SOURCE_DIR}"
       "${CMAKE_CURRENT_SOURCE_DIR}/*")
  list(SORT children)
  foreach(child IN LISTS children)
    if(IS_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}/${child}"
       AND EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/${child}/CMakeLists.txt")
      add_subdirectory(${child})
    endif()
  endforeach()
endfunction()

set(DISAGMOE_WARNINGS
  $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-Wall -Wextra -Wpedantic -Wno-missing-field-initializers>)

# disagmoe_add_fuzz(NAME name SOURCE target.cpp [LIBS ...] [CORPUS dir] [ITERATIONS n] [INPUT_TIMEOUT s])
#   `target.cpp` defines LLVMFuzzerTestOneInput. With clang and DISAGMOE_BUILD_FUZZERS
#   it becomes a libFuzzer binary run for DISAGMOE_FUZZ_SECONDS by ctest (an input that
#   runs longer than INPUT_TIMEOUT seconds, default libFuzzer's 1200, is a failure);
#   otherwise, with DISAGMOE_FUZZ_REPLAYS, it is linked with a deterministic mutation driver
#   (tests/fuzz_replay_main.cpp) that ctest runs for ITERATIONS (default 20000) seeded
#   mutations of the corpus. The libFuzzer binaries run under address + UB sanitizers; the
#   asan preset turns the replays off, since the fuzz preset runs the same targets sanitized
#   and the replays of the programs' argument parsing are its costliest build.
option(DISAGMOE_BUILD_FUZZERS "Build libFuzzer targets (needs clang)" OFF)
option(DISAGMOE_FUZZ_REPLAYS "Without DISAGMOE_BUILD_FUZZERS, build the fuzz targets as seeded replays" ON)
set(DISAGMOE_FUZZ_SECONDS 20 CACHE STRING "Seconds each libFuzzer target runs under ctest")
function(disagmoe_add_fuzz)
  cmake_parse_arguments(F "" "NAME;SOURCE;CORPUS;ITERATIONS;INPUT_TIMEOUT" "LIBS" ${ARGN})
  set(exe fuzz_${F_NAME})
  if(NOT DEFINED F_ITERATIONS)
    set(F_ITERATIONS 20000)
  endif()
  if(NOT DEFINED F_INPUT_TIMEOUT)
    set(F_INPUT_TIMEOUT 1200)
  endif()
  if(DISAGMOE_BUILD_FUZZERS)
    add_executable(${exe} ${F_SOURCE})
    target_compile_options(${exe} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(${exe} PRIVATE -fsanitize=fuzzer,address,undefined)
    set(corpus_copy "${CMAKE_CURRENT_BINARY_DIR}/${exe}_corpus")
    add_test(NAME ${exe} COMMAND ${CMAKE_COMMAND} -E env
             sh -c "mkdir -p '${corpus_copy}' && exec $<TARGET_FILE:${exe}> -max_total_time=${DISAGMOE_FUZZ_SECONDS} -timeout=${F_INPUT_TIMEOUT} -max_len=4096 '${corpus_copy}' '${F_CORPUS}'")
    set_tests_properties(${exe} PROPERTIES LABELS fuzz TIMEOUT 300)
  elseif(DISAGMOE_FUZZ_REPLAYS)
    add_executable(${exe} ${F_SOURCE} "${PROJECT_SOURCE_DIR}/tests/fuzz_replay_main.cpp")
    add_test(NAME ${exe} COMMAND ${exe} --iterations ${F_ITERATIONS} --seed 1 "${F_CORPUS}")
    set_tests_properties(${exe} PROPERTIES LABELS fuzz TIMEOUT 600)
  else()
    return()
  endif()
  target_link_libraries(${exe} PRIVATE disagmoe::core ${F_LIBS})
endfunction()

# disagmoe_add_program_test(NAME name COMMAND prog args... [EXIT code] [EXPECT regex])
#   Runs a program and checks its exit code (default 0) and that stdout+stderr match
#   `regex`, so a bad-input test fails if the program crashes instead of reporting.
set(DISAGMOE_RUN_AND_CHECK "${CMAKE_CURRENT_LIST_DIR}/run_and_check.cmake")
function(disagmoe_add_program_test)
  cmake_parse_arguments(T "" "NAME;EXIT;EXPECT" "COMMAND" ${ARGN})
  if(NOT DEFINED T_EXIT)
    set(T_EXIT 0)
  endif()
  list(POP_FRONT T_COMMAND program)
  if(TARGET ${program})
    set(program $<TARGET_FILE:${program}>)
  endif()
  set(defs "")
  set(i 0)
  foreach(a IN LISTS T_COMMAND)  # one -DARGn per argument: lists do not survive add_test
    list(APPEND defs "-DARG${i}=${a}")
    math(EXPR i "${i} + 1")
  endforeach()
  add_test(NAME ${T_NAME} COMMAND ${CMAKE_COMMAND} "-DPROGRAM=${program}" "-DARGC=${i}" ${defs}
           "-DEXIT=${T_EXIT}" "-DEXPECT=${T_EXPECT}" -P "${DISAGMOE_RUN_AND_CHECK}")
  set_tests_properties(${T_NAME} PROPERTIES LABELS program TIMEOUT 300)
endfunction()

# disagmoe_add_compile_fail_test(NAME prefix SOURCE file.cpp CASES model case... EXPECT regex)
#   Concept checks: `file.cpp` is compiled (-fsyntax-only) once per case with -DCASE_<case>.
#   The case `model` is the control and must compile; every other case must fail with
#   output matching `regex` (the concept named), so an unrelated error does not pass.
function(disagmoe_add_compile_fail_test)
  cmake_parse_arguments(T "" "NAME;SOURCE;EXPECT" "CASES" ${ARGN})
  foreach(c IN LISTS T_CASES)
    # Eigen's include directory too: the compute concepts name model::Matrix.
    add_test(NAME ${T_NAME}_${c}
             COMMAND ${CMAKE_CXX_COMPILER} -std=c++20 -fsyntax-only -I${PROJECT_SOURCE_DIR}/include
                     "-I$<JOIN:$<TARGET_PROPERTY:Eigen3::Eigen,INTERFACE_INCLUDE_DIRECTORIES>,;-I>"
                     -DCASE_${c} "${CMAKE_CURRENT_SOURCE_DIR}/${T_SOURCE}"
             COMMAND_EXPAND_LISTS)
    set_tests_properties(${T_NAME}_${c} PROPERTIES LABELS compile_fail TIMEOUT 120)
    if(NOT c STREQUAL "model")
      set_tests_properties(${T_NAME}_${c} PROPERTIES PASS_REGULAR_EXPRESSION "${T_EXPECT}")
    endif()
  endforeach()
endfunction()
