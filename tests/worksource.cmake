# WorkSource unit tests. They build src/worksource.c with a fake dataset
# (tests/fake_dataset.c: shards given as record counts) instead of linking
# libzephon, so they need no files and no other part of the library.
# `test_worksource --bench` measures the lookup cost (not run by ctest).
set(_zp_ws_root ${CMAKE_CURRENT_LIST_DIR}/..)
add_executable(test_worksource
  ${_zp_ws_root}/tests/test_worksource.c
  ${_zp_ws_root}/tests/fake_dataset.c
  ${_zp_ws_root}/src/worksource.c
  ${_zp_ws_root}/src/mixture.c
  ${_zp_ws_root}/src/util.c
  ${_zp_ws_root}/src/error.c
  ${_zp_ws_root}/src/status.c)
target_compile_options(test_worksource PRIVATE ${ZP_WARN})
target_compile_definitions(test_worksource PRIVATE _GNU_SOURCE)
target_include_directories(test_worksource PRIVATE
  ${_zp_ws_root}/include ${_zp_ws_root}/src ${_zp_ws_root}/tests)
target_link_libraries(test_worksource PRIVATE PkgConfig::CMOCKA m)
add_test(NAME test_worksource COMMAND test_worksource)
set_tests_properties(test_worksource PROPERTIES TIMEOUT 60 LABELS unit)

# The WorkSource over a mixture (parts, passes, plans), the same way.
add_executable(test_ws_mixture
  ${_zp_ws_root}/tests/test_ws_mixture.c
  ${_zp_ws_root}/tests/fake_dataset.c
  ${_zp_ws_root}/src/worksource.c
  ${_zp_ws_root}/src/mixture.c
  ${_zp_ws_root}/src/util.c
  ${_zp_ws_root}/src/error.c
  ${_zp_ws_root}/src/status.c)
target_compile_options(test_ws_mixture PRIVATE ${ZP_WARN})
target_compile_definitions(test_ws_mixture PRIVATE _GNU_SOURCE)
target_include_directories(test_ws_mixture PRIVATE
  ${_zp_ws_root}/include ${_zp_ws_root}/src ${_zp_ws_root}/tests)
target_link_libraries(test_ws_mixture PRIVATE PkgConfig::CMOCKA m)
add_test(NAME test_ws_mixture COMMAND test_ws_mixture)
set_tests_properties(test_ws_mixture PROPERTIES TIMEOUT 60 LABELS unit)
