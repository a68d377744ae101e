# SPDX-License-Identifier: Apache-2.0
# install(EXPORT) + package config with COMPONENTS, and a build-tree export so a
# consumer can point disagmoe_DIR at a build directory without installing.
include(CMakePackageConfigHelpers)
set(DISAGMOE_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/disagmoe")

install(DIRECTORY include/disagmoe DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(TARGETS ${DISAGMOE_TARGETS} EXPORT disagmoeTargets)
install(EXPORT disagmoeTargets NAMESPACE disagmoe:: DESTINATION "${DISAGMOE_CMAKE_DIR}")

list(TRANSFORM DISAGMOE_TARGETS REPLACE "^disagmoe_" "" OUTPUT_VARIABLE DISAGMOE_COMPONENTS)
configure_package_config_file(cmake/disagmoeConfig.cmake.in
  "${PROJECT_BINARY_DIR}/disagmoeConfig.cmake" INSTALL_DESTINATION "${DISAGMOE_CMAKE_DIR}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/disagmoeConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES "${PROJECT_BINARY_DIR}/disagmoeConfig.cmake"
              "${PROJECT_BINARY_DIR}/disagmoeConfigVersion.cmake"
              cmake/FindNCCL.cmake
        DESTINATION "${DISAGMOE_CMAKE_DIR}")

# Build tree: the same config next to a targets file that points into the sources.
export(EXPORT disagmoeTargets NAMESPACE disagmoe:: FILE "${PROJECT_BINARY_DIR}/disagmoeTargets.cmake")
configure_file(cmake/FindNCCL.cmake "${PROJECT_BINARY_DIR}/FindNCCL.cmake" COPYONLY)
