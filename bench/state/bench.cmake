# bench_state: checkpoint states at 1,000 parts and 10^9 samples, and the
# mixture's selection cost per sample (bench/state/run.sh). Links
# zephon_static for the bare quota schedule (src/plan/mixture.h).
set(_zp_bst_root ${CMAKE_CURRENT_LIST_DIR}/../..)
if(EXISTS ${_zp_bst_root}/src/api/pipeline_state.c AND EXISTS ${_zp_bst_root}/src/plan/mixture.c)
  add_executable(bench_state ${_zp_bst_root}/bench/state/bench_state.c)
  target_compile_options(bench_state PRIVATE ${ZP_WARN})
  target_compile_definitions(bench_state PRIVATE _GNU_SOURCE)
  target_include_directories(bench_state PRIVATE ${_zp_bst_root}/src)
  target_link_libraries(bench_state PRIVATE zephon_static PkgConfig::JANSSON)
endif()
