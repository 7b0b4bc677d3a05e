# bench_mixture: the cost of the mixture's selection (bench/mixture/run.sh).
# Built from src/plan/mixture.c and the error mechanism only, as test_mixture is.
set(_zp_bmix_root ${CMAKE_CURRENT_LIST_DIR}/../..)
if(EXISTS ${_zp_bmix_root}/src/plan/mixture.c)
  add_executable(bench_mixture
    ${_zp_bmix_root}/bench/mixture/bench_mixture.c
    ${_zp_bmix_root}/src/plan/mixture.c
    ${_zp_bmix_root}/src/base/error.c
    ${_zp_bmix_root}/src/base/status.c)
  target_compile_options(bench_mixture PRIVATE ${ZP_WARN})
  target_compile_definitions(bench_mixture PRIVATE _GNU_SOURCE)
  target_include_directories(bench_mixture PRIVATE ${_zp_bmix_root}/include ${_zp_bmix_root}/src)
  target_link_libraries(bench_mixture PRIVATE m)
endif()
