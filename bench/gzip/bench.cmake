# bench/gzip: the inflate libraries on one .jsonl.gz (zlib, ISA-L igzip,
# libdeflate), the measurement behind the gzip shards' decoder choice
# (bench/gzip/run.sh, docs/formats.md "gzip"). libdeflate is needed only
# here: without it the target is not built and run.sh says so.
pkg_check_modules(ZP_BENCH_DEFLATE IMPORTED_TARGET libdeflate)
pkg_check_modules(ZP_BENCH_ZLIB IMPORTED_TARGET zlib)
if(ZP_BENCH_DEFLATE_FOUND AND ZP_BENCH_ZLIB_FOUND)
  add_executable(bench_gz_libs ${CMAKE_CURRENT_LIST_DIR}/gz_libs.c)
  target_compile_options(bench_gz_libs PRIVATE ${ZP_WARN})
  target_compile_definitions(bench_gz_libs PRIVATE _GNU_SOURCE)
  target_link_libraries(bench_gz_libs PRIVATE PkgConfig::ISAL PkgConfig::ZP_BENCH_DEFLATE
                        PkgConfig::ZP_BENCH_ZLIB)
endif()
