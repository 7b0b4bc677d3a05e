# Test registry: each part of the library keeps its tests in its own file.
# A unit test built from a few of the library's sources, without libzephon
# (the WorkSource and mixture tests): zp_add_source_test(name SOURCES ...),
# paths relative to the repository root.
function(zp_add_source_test name)
  cmake_parse_arguments(T "" "" "SOURCES" ${ARGN})
  set(_root ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/..)
  list(TRANSFORM T_SOURCES PREPEND ${_root}/)
  add_executable(${name} ${T_SOURCES})
  target_compile_options(${name} PRIVATE ${ZP_WARN})
  target_compile_definitions(${name} PRIVATE _GNU_SOURCE)
  target_include_directories(${name} PRIVATE ${_root}/include ${_root}/src ${_root}/tests)
  target_link_libraries(${name} PRIVATE PkgConfig::CMOCKA m)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT 60 LABELS unit)
endfunction()

foreach(part net dataset worksource engine cli storage disk_cache remote mixture state resume
             hdf5 megatron preprocess ondemand python tokenizers budget parquet)
  if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/${part}.cmake)
    include(${CMAKE_CURRENT_LIST_DIR}/${part}.cmake)
  endif()
endforeach()

# The small helpers and the error mechanism (src/base/util.c, src/base/error.c).
zp_add_test(test_util SOURCES tests/test_util.c tests/testutil.c TIMEOUT 60 LABELS unit)
# Durable writes and the sweep of dead writers' temporaries (src/base/fsio.c).
zp_add_test(test_fsio SOURCES tests/test_fsio.c TIMEOUT 60 LABELS unit)

# The shared libraries export the zp_ API only (ZP_API, -fvisibility=hidden).
# test_exports_probe runs the same check on a library that exports a zpi_
# symbol and must fail: the check itself is tested.
set(_zp_check_exports ${CMAKE_CURRENT_LIST_DIR}/../cmake/check_exports.cmake)
foreach(lib zephon zephon_mpi)
  if(TARGET ${lib})
    get_target_property(_type ${lib} TYPE)
    if(_type STREQUAL "SHARED_LIBRARY")
      if(lib STREQUAL "zephon")
        set(_expect zp_pipeline_create)
      else()
        set(_expect zp_mpi_create)
      endif()
      add_test(NAME test_exports_${lib}
        COMMAND ${CMAKE_COMMAND} -DNM=${CMAKE_NM} -DLIB=$<TARGET_FILE:${lib}>
                -DEXPECT=${_expect} -P ${_zp_check_exports})
      set_tests_properties(test_exports_${lib} PROPERTIES TIMEOUT 30 LABELS unit)
    endif()
  endif()
endforeach()
add_library(zp_exports_probe SHARED ${CMAKE_CURRENT_LIST_DIR}/exports/probe.c)
add_test(NAME test_exports_probe
  COMMAND ${CMAKE_COMMAND} -DNM=${CMAKE_NM} -DLIB=$<TARGET_FILE:zp_exports_probe>
          -DEXPECT=zp_probe_public -P ${_zp_check_exports})
# CMake wraps the message at about 80 columns: where it breaks depends on the
# length of the library's path (a break between "zp_" and "API:" too).
set_tests_properties(test_exports_probe PROPERTIES TIMEOUT 30 LABELS unit
  PASS_REGULAR_EXPRESSION "zp_[ \n]+API:[ \n]*zpi_probe_internal")

# Install: an installed copy is found by pkg-config and find_package, the
# README's example builds and runs against it, and the tree can be moved.
# Label nosan: a consumer of a sanitizer build would need the sanitizer flags.
# Shared builds only (the test checks which libzephon.so the programs load).
get_target_property(_type zephon TYPE)
if(_type STREQUAL "SHARED_LIBRARY")
  add_test(NAME test_install
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/install/install_test.sh
            ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_LIST_DIR}/..)
  set_tests_properties(test_install PROPERTIES TIMEOUT 300 LABELS "install;nosan"
    ENVIRONMENT "CC=${CMAKE_C_COMPILER};CMAKE=${CMAKE_COMMAND}")
endif()
include(${CMAKE_CURRENT_LIST_DIR}/tokenize_cli.cmake)
