# SPDX-License-Identifier: Apache-2.0
# The INTERFACE targets. Each back end is its own target so that a consumer links
# only what it uses; feature macros tell the headers what is present.

find_package(Eigen3 3.3 REQUIRED NO_MODULE)

add_library(disagmoe_core INTERFACE)
add_library(disagmoe::core ALIAS disagmoe_core)
set_target_properties(disagmoe_core PROPERTIES EXPORT_NAME core)
target_include_directories(disagmoe_core INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(disagmoe_core INTERFACE cxx_std_20)
target_link_libraries(disagmoe_core INTERFACE Eigen3::Eigen)

find_package(nlohmann_json 3.10 QUIET)
if(nlohmann_json_FOUND)
  add_library(disagmoe_io INTERFACE)
  add_library(disagmoe::io ALIAS disagmoe_io)
  set_target_properties(disagmoe_io PROPERTIES EXPORT_NAME io)
  target_link_libraries(disagmoe_io INTERFACE disagmoe_core nlohmann_json::nlohmann_json)
  target_compile_definitions(disagmoe_io INTERFACE DISAGMOE_HAS_IO_=1)
endif()

find_package(ZLIB QUIET)
if(ZLIB_FOUND)
  add_library(disagmoe_zlib INTERFACE)
  add_library(disagmoe::zlib ALIAS disagmoe_zlib)
  set_target_properties(disagmoe_zlib PROPERTIES EXPORT_NAME zlib)
  target_link_libraries(disagmoe_zlib INTERFACE disagmoe_core ZLIB::ZLIB)
  target_compile_definitions(disagmoe_zlib INTERFACE DISAGMOE_HAS_ZLIB_=1)
endif()

find_package(Threads REQUIRED)
target_link_libraries(disagmoe_core INTERFACE Threads::Threads)

if(DISAGMOE_ENABLE_MPI)
  find_package(MPI REQUIRED COMPONENTS CXX)
  add_library(disagmoe_mpi INTERFACE)
  add_library(disagmoe::mpi ALIAS disagmoe_mpi)
  set_target_properties(disagmoe_mpi PROPERTIES EXPORT_NAME mpi)
  target_link_libraries(disagmoe_mpi INTERFACE disagmoe_core MPI::MPI_CXX)
  target_compile_definitions(disagmoe_mpi INTERFACE DISAGMOE_HAS_MPI_=1)
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
  add_library(disagmoe_cuda INTERFACE)
  add_library(disagmoe::cuda ALIAS disagmoe_cuda)
  set_target_properties(disagmoe_cuda PROPERTIES EXPORT_NAME cuda)
  # CCCL (CUB, Thrust, libcu++) comes from the toolkit, never a copy of our own.
  target_link_libraries(disagmoe_cuda INTERFACE disagmoe_core CUDA::cudart)
  if(TARGET CUDA::cccl)
    target_link_libraries(disagmoe_cuda INTERFACE CUDA::cccl)
  endif()
  # CMake 3.25 does not turn cuda_std_20 into a flag for nvcc 13.
  target_compile_options(disagmoe_cuda INTERFACE
    $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20 --expt-relaxed-constexpr>)
  target_compile_definitions(disagmoe_cuda INTERFACE DISAGMOE_HAS_CUDA_=1)
endif()

if(DISAGMOE_ENABLE_NCCL)
  find_package(NCCL REQUIRED)
  add_library(disagmoe_nccl INTERFACE)
  add_library(disagmoe::nccl ALIAS disagmoe_nccl)
  set_target_properties(disagmoe_nccl PROPERTIES EXPORT_NAME nccl)
  target_link_libraries(disagmoe_nccl INTERFACE disagmoe_cuda NCCL::NCCL)
  target_compile_definitions(disagmoe_nccl INTERFACE DISAGMOE_HAS_NCCL_=1)
endif()

# Targets that exist in this configuration (install and export iterate over them).
set(DISAGMOE_TARGETS disagmoe_core)
foreach(t io zlib mpi cuda nccl)
  if(TARGET disagmoe_${t})
    list(APPEND DISAGMOE_TARGETS disagmoe_${t})
  endif()
endforeach()
