# SPDX-License-Identifier: Apache-2.0
# FindNCCL: locates NCCL (header nccl.h, library libnccl) and defines NCCL::NCCL.
# Hints: NCCL_ROOT, NCCL_HOME or the CUDA toolkit directory.
include(FindPackageHandleStandardArgs)
find_package(CUDAToolkit QUIET)
set(_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl HINTS ${_nccl_hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib64 lib)
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_ver REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*NCCL_${part} +([0-9]+).*" "\\1" _v_${part} "${_nccl_ver}")
    string(REGEX MATCH "NCCL_${part} +([0-9]+)" _m "${_nccl_ver}")
    set(_v_${part} "${CMAKE_MATCH_1}")
  endforeach()
  set(NCCL_VERSION "${_v_MAJOR}.${_v_MINOR}.${_v_PATCH}")
endif()
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR VERSION_VAR NCCL_VERSION)
if(NCCL_FOUND AND NOT TARGET NCCL::NCCL)
  add_library(NCCL::NCCL UNKNOWN IMPORTED)
  set_target_properties(NCCL::NCCL PROPERTIES
    IMPORTED_LOCATION "${NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
