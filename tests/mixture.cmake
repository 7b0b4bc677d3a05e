# Mixture unit tests (src/mixture.c: the draw sequence of a weighted
# mixture). Built from src/mixture.c and the error mechanism only, without
# libzephon, so that they need no other part of the library.
set(_zp_mix_root ${CMAKE_CURRENT_LIST_DIR}/..)
add_executable(test_mixture
  ${_zp_mix_root}/tests/test_mixture.c
  ${_zp_mix_root}/src/mixture.c
  ${_zp_mix_root}/src/error.c
  ${_zp_mix_root}/src/status.c)
target_compile_options(test_mixture PRIVATE ${ZP_WARN})
target_compile_definitions(test_mixture PRIVATE _GNU_SOURCE)
target_include_directories(test_mixture PRIVATE
  ${_zp_mix_root}/include ${_zp_mix_root}/src ${_zp_mix_root}/tests)
target_link_libraries(test_mixture PRIVATE PkgConfig::CMOCKA m)
add_test(NAME test_mixture COMMAND test_mixture)
set_tests_properties(test_mixture PROPERTIES TIMEOUT 120 LABELS unit)
