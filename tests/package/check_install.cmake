# Run with cmake -P (CTest test `package_consumer`). Installs the ReplaySSM build tree
# REPLAYSSM_BINARY_DIR into WORK_DIR/install, then configures and builds
#   consumer/         find_package(replayssm CONFIG REQUIRED) against that prefix, and
#   consumer_subdir/  add_subdirectory(REPLAYSSM_SOURCE_DIR), then FetchContent of it.
# Optional: GENERATOR, CXX_COMPILER, CUDA_COMPILER (forwarded to the consumer builds).
cmake_minimum_required(VERSION 3.25)

foreach(var IN ITEMS REPLAYSSM_SOURCE_DIR REPLAYSSM_BINARY_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_install.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} COMMAND_ECHO STDOUT RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc})")
  endif()
endfunction()

set(prefix "${WORK_DIR}/install")
set(args -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90)
if(GENERATOR)
  list(APPEND args -G "${GENERATOR}")
endif()
if(CXX_COMPILER)
  list(APPEND args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
if(CUDA_COMPILER)
  list(APPEND args "-DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}")
endif()

file(REMOVE_RECURSE "${WORK_DIR}")

# 1. Install.
run("${CMAKE_COMMAND}" --install "${REPLAYSSM_BINARY_DIR}" --prefix "${prefix}")
foreach(file IN ITEMS include/replayssm/replayssm.cuh lib/cmake/replayssm/replayssm-config.cmake
                      lib/cmake/replayssm/replayssm-config-version.cmake
                      lib/cmake/replayssm/replayssm-targets.cmake)
  if(NOT EXISTS "${prefix}/${file}")
    message(FATAL_ERROR "not installed: ${prefix}/${file}")
  endif()
endforeach()

# 2. Consumer of the installed package.
set(dir "${WORK_DIR}/consumer")
run("${CMAKE_COMMAND}" -S "${CMAKE_CURRENT_LIST_DIR}/consumer" -B "${dir}" ${args}
    "-DCMAKE_PREFIX_PATH=${prefix}")
file(STRINGS "${dir}/CMakeCache.txt" found REGEX "^replayssm_DIR:")
if(NOT found STREQUAL "replayssm_DIR:PATH=${prefix}/lib/cmake/replayssm")
  message(FATAL_ERROR "consumer did not use the installed package: ${found}")
endif()
run("${CMAKE_COMMAND}" --build "${dir}")
run("${dir}/consumer")

# 3. Consumer embedding the source tree.
set(dir "${WORK_DIR}/consumer_subdir")
run("${CMAKE_COMMAND}" -S "${CMAKE_CURRENT_LIST_DIR}/consumer_subdir" -B "${dir}" ${args}
    "-DREPLAYSSM_SOURCE_DIR=${REPLAYSSM_SOURCE_DIR}")
run("${CMAKE_COMMAND}" --build "${dir}")
run("${dir}/consumer_subdir")

# 4. Consumer embedding the source tree through FetchContent.
set(dir "${WORK_DIR}/consumer_fetchcontent")
run("${CMAKE_COMMAND}" -S "${CMAKE_CURRENT_LIST_DIR}/consumer_subdir" -B "${dir}" ${args}
    "-DREPLAYSSM_SOURCE_DIR=${REPLAYSSM_SOURCE_DIR}" -DREPLAYSSM_VIA_FETCHCONTENT=ON)
run("${CMAKE_COMMAND}" --build "${dir}")
run("${dir}/consumer_subdir")

message(STATUS "package_consumer: OK")
