# SPDX-License-Identifier: Apache-2.0
# The INTERFACE targets. Each back end is its own target so that a consumer links
# only what it uses; feature macros tell the headers what is present.

find_package(Eigen3 3.3 REQUIRED NO_MODULE)

# disagmoe_interface(NAME LIBS... [DEFINE MACRO]): INTERFACE target disagmoe_NAME,
# exported and aliased as disagmoe::NAME, linking LIBS and defining MACRO=1.
function(disagmoe_interface name)
  cmake_parse_arguments(I "" "DEFINE" "" ${ARGN})
  add_library(disagmoe_${name} INTERFACE)
  add_library(disagmoe::${name} ALIAS disagmoe_${name})
  set_target_properties(disagmoe_${name} PROPERTIES EXPORT_NAME ${name})
  target_link_libraries(disagmoe_${name} INTERFACE ${I_UNPARSED_ARGUMENTS})
  if(I_DEFINE)
    target_compile_definitions(disagmoe_${name} INTERFACE ${I_DEFINE}=1)
  endif()
endfunction()

find_package(Threads REQUIRED)
disagmoe_interface(core Eigen3::Eigen Threads::Threads)
target_include_directories(disagmoe_core INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(disagmoe_core INTERFACE cxx_std_20)

find_package(nlohmann_json 3.10 QUIET)
if(nlohmann_json_FOUND)
  disagmoe_interface(io disagmoe_core nlohmann_json::nlohmann_json DEFINE DISAGMOE_HAS_IO_)
endif()

find_package(ZLIB QUIET)
if(ZLIB_FOUND)
  disagmoe_interface(zlib disagmoe_core ZLIB::ZLIB DEFINE DISAGMOE_HAS_ZLIB_)
endif()

if(DISAGMOE_ENABLE_MPI)
  find_package(MPI REQUIRED COMPONENTS CXX)
  disagmoe_interface(mpi disagmoe_core MPI::MPI_CXX DEFINE DISAGMOE_HAS_MPI_)
endif()

if(DISAGMOE_ENABLE_NCCL AND NOT DISAGMOE_ENABLE_CUDA)
  message(FATAL_ERROR "DISAGMOE_ENABLE_NCCL=ON needs DISAGMOE_ENABLE_CUDA=ON")
endif()

if(DISAGMOE_ENABLE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)  # H100/H200/H800; PTX for newer chips
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # CCCL (CUB, Thrust, libcu++) comes from the toolkit, never a copy of our own.
  # cuBLAS: the GEMMs of the GPU compute (backend/cuda/blas.hpp).
  disagmoe_interface(cuda disagmoe_core CUDA::cudart CUDA::cublas $<TARGET_NAME_IF_EXISTS:CUDA::cccl>
                     DEFINE DISAGMOE_HAS_CUDA_)
  # CMake 3.25 does not turn cuda_std_20 into a flag for nvcc 13.
  target_compile_options(disagmoe_cuda INTERFACE
    $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20 --expt-relaxed-constexpr>)
endif()

if(DISAGMOE_ENABLE_NCCL)
  find_package(NCCL REQUIRED)
  disagmoe_interface(nccl disagmoe_cuda NCCL::NCCL DEFINE DISAGMOE_HAS_NCCL_)
endif()

# Targets that exist in this configuration (install and export iterate over them).
set(DISAGMOE_TARGETS disagmoe_core)
foreach(t io zlib mpi cuda nccl)
  if(TARGET disagmoe_${t})
    list(APPEND DISAGMOE_TARGETS disagmoe_${t})
  endif()
endforeach()
