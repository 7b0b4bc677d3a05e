# fuzz/fuzz.cmake - libFuzzer targets (ASan + UBSan), built when
# -DZEPHON_FUZZ=ON with clang; fuzz/run.sh configures build/fuzz and runs
# them (docs/fuzzing.md). include()d from the top-level CMakeLists.txt after
# the library's sources (ZEPHON_SOURCES, ZEPHON_UTIL_SOURCES) are listed.
if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang" OR NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "ZEPHON_FUZZ=ON needs clang (libFuzzer): configure with "
                      "-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++, or run fuzz/run.sh")
endif()

set(ZP_FUZZ_SAN -fsanitize=address,undefined -fno-sanitize-recover=undefined
                -fno-omit-frame-pointer -g)

# The library's sources compiled again, instrumented for coverage
# (fuzzer-no-link) and sanitizers, into a static library the targets link:
# the targets call internal functions (format loaders, record parser) that a
# shared libzephon does not export.
add_library(zephon_fuzz_lib STATIC EXCLUDE_FROM_ALL ${ZEPHON_SOURCES} ${ZEPHON_UTIL_SOURCES})
target_include_directories(zephon_fuzz_lib
  PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_compile_definitions(zephon_fuzz_lib PUBLIC _GNU_SOURCE)
target_compile_options(zephon_fuzz_lib PRIVATE -fsanitize=fuzzer-no-link ${ZP_FUZZ_SAN})
target_link_libraries(zephon_fuzz_lib
  PUBLIC OpenMP::OpenMP_C OpenMP::OpenMP_CXX Threads::Threads simdjson::simdjson
         PkgConfig::ZSTD PkgConfig::ISAL PkgConfig::JANSSON PkgConfig::XXHASH PkgConfig::CURL PkgConfig::EXPAT
         PkgConfig::PCRE2 PkgConfig::UTF8PROC PkgConfig::THRIFT PkgConfig::SNAPPY PkgConfig::ZLIB
         ${HDF5_C_LIBRARIES} z m)
target_include_directories(zephon_fuzz_lib SYSTEM PUBLIC ${ZP_HDF5_INCLUDE_DIRS})
foreach(f hdf5 megatron)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/src/formats/format_${f}.c)
    string(TOUPPER ${f} F)
    target_compile_definitions(zephon_fuzz_lib PRIVATE ZP_HAVE_FORMAT_${F}=1)
  endif()
endforeach()

set(ZP_FUZZ_TARGETS shard_jsonl shard_zst shard_gz shard_segments manifest index_cache tokenizer_roundtrip
                    tokenizer_files parquet)
set(ZP_FUZZ_EXTRA_shard_jsonl fuzz/fuzz_shard.c)
set(ZP_FUZZ_EXTRA_shard_zst fuzz/fuzz_shard.c)
set(ZP_FUZZ_EXTRA_shard_gz fuzz/fuzz_shard.c)
# the formats read on demand (reader.h), each with its own target
foreach(f hdf5 megatron)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_shard_${f}.c)
    list(APPEND ZP_FUZZ_TARGETS shard_${f})
    set(ZP_FUZZ_EXTRA_shard_${f} fuzz/fuzz_shard.c)
  endif()
endforeach()
add_custom_target(fuzz_all)
foreach(t ${ZP_FUZZ_TARGETS})
  add_executable(fuzz_${t} EXCLUDE_FROM_ALL fuzz/fuzz_${t}.c fuzz/fuzz_common.c ${ZP_FUZZ_EXTRA_${t}})
  target_compile_options(fuzz_${t} PRIVATE -fsanitize=fuzzer ${ZP_FUZZ_SAN} -Wall -Wextra)
  target_compile_definitions(fuzz_${t} PRIVATE ZP_FUZZ_FIXTURES="${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fixtures")
  target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer ${ZP_FUZZ_SAN})
  # C++ runtime for simdjson, linked by clang (a C program's link line)
  target_link_libraries(fuzz_${t} PRIVATE zephon_fuzz_lib stdc++)
  add_dependencies(fuzz_all fuzz_${t})
endforeach()
