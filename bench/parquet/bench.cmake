# bench/parquet: the Parquet reader's decode speed (bench/parquet/run.sh).
add_executable(bench_parquet bench/parquet/bench_parquet.c)
target_compile_options(bench_parquet PRIVATE ${ZP_WARN})
target_compile_definitions(bench_parquet PRIVATE _GNU_SOURCE)
target_include_directories(bench_parquet PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_link_libraries(bench_parquet PRIVATE zephon_static)
