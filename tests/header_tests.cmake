# SPDX-License-Identifier: Apache-2.0
# Every public header must compile on its own (and twice, so its guard works).
# One generated translation unit per header; headers of optional back ends are
# tested only when that back end is configured.
file(GLOB_RECURSE _headers RELATIVE "${PROJECT_SOURCE_DIR}/include"
     CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/include/disagmoe/*.hpp")
set(_sources "")
set(_libs disagmoe::core)
foreach(h IN LISTS _headers)
  if(h MATCHES "/backend/(cuda|nccl)/")
    continue()  # nvcc-only; compiled by the cuda preset
  elseif(h MATCHES "/backend/mpi/")
    if(NOT TARGET disagmoe::mpi)
      continue()
    endif()
    list(APPEND _libs disagmoe::mpi)
  elseif(h MATCHES "/io/" OR h MATCHES "/cli/")
    if(NOT TARGET disagmoe::io)
      continue()
    endif()
    list(APPEND _libs disagmoe::io)
  endif()
  string(MAKE_C_IDENTIFIER "${h}" id)
  set(src "${CMAKE_CURRENT_BINARY_DIR}/header_tests/${id}.cpp")
  file(CONFIGURE OUTPUT "${src}" CONTENT "#include <${h}>\n#include <${h}>\n")
  list(APPEND _sources "${src}")
endforeach()
if(TARGET disagmoe::zlib)
  list(APPEND _libs disagmoe::zlib)
endif()
list(REMOVE_DUPLICATES _libs)
add_executable(test_headers_compile_alone ${_sources} "${CMAKE_CURRENT_SOURCE_DIR}/header_tests_main.cpp")
target_link_libraries(test_headers_compile_alone PRIVATE ${_libs})
# Parsing is what is tested: -O0 keeps these many translation units cheap.
target_compile_options(test_headers_compile_alone PRIVATE ${DISAGMOE_WARNINGS} -O0)
add_test(NAME headers_compile_alone COMMAND test_headers_compile_alone)
