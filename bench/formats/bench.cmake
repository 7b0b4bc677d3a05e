# bench/formats: HDF5 fixed-shape reads against the HDF5 C API, and training
# from pre-tokenized shards against JSONL with tokenization on the fly
# (bench/formats/run.sh).
add_executable(bench_formats ${CMAKE_CURRENT_LIST_DIR}/bench_formats.c)
target_compile_options(bench_formats PRIVATE ${ZP_WARN})
target_compile_definitions(bench_formats PRIVATE _GNU_SOURCE ${HDF5_C_DEFINITIONS})
target_include_directories(bench_formats SYSTEM PRIVATE ${ZP_HDF5_INCLUDE_DIRS})
target_link_libraries(bench_formats PRIVATE zephon ${HDF5_C_LIBRARIES})
