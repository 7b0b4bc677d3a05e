# src/base/tokenizer/sources.cmake - the tokenizer's library sources.
# include()d from the top-level CMakeLists.txt before add_library(zephon).

list(APPEND ZEPHON_SOURCES
  src/base/tokenizer/tok_vocab.c
  src/base/tokenizer/tok_build.c
  src/base/tokenizer/tok_encode.c
  src/base/tokenizer/encoder.c
  src/base/tokenizer/tok_ident.c
  src/base/tokenizer/tok_gpt2_data.c
  src/base/tokenizer/pretok.c
  src/base/tokenizer/tok_tiktoken.c
  src/base/tokenizer/tok_tiktoken_data.c
  src/base/tokenizer/unicode_tables.c
  src/base/tokenizer/spm_model.c
  src/base/tokenizer/spm_proto.c
  src/base/tokenizer/spm_trie.c
  src/base/tokenizer/spm_norm.c
  src/base/tokenizer/spm_unigram.c
  src/base/tokenizer/spm_bpe.c
  src/base/tokenizer/hf_json.c
  src/base/tokenizer/hf_encode.c
)

# The GPT-2 vocabulary is embedded with the assembler's .incbin (see
# tok_gpt2_data.c): pass the file's absolute path, and rebuild the object
# when the file changes.
set(ZP_GPT2_VOCAB_BPE ${CMAKE_CURRENT_SOURCE_DIR}/data/gpt2/vocab.bpe)
set_source_files_properties(src/base/tokenizer/tok_gpt2_data.c PROPERTIES
  COMPILE_DEFINITIONS "ZP_GPT2_VOCAB_BPE=\"${ZP_GPT2_VOCAB_BPE}\""
  OBJECT_DEPENDS ${ZP_GPT2_VOCAB_BPE})
# The built-in tiktoken rank files, the same way (tok_tiktoken_data.c).
set(ZP_TIKTOKEN_DIR ${CMAKE_CURRENT_SOURCE_DIR}/data/tiktoken)
set_source_files_properties(src/base/tokenizer/tok_tiktoken_data.c PROPERTIES
  COMPILE_DEFINITIONS "ZP_TIKTOKEN_DIR=\"${ZP_TIKTOKEN_DIR}\""
  OBJECT_DEPENDS "${ZP_TIKTOKEN_DIR}/p50k_base.tiktoken;${ZP_TIKTOKEN_DIR}/cl100k_base.tiktoken;${ZP_TIKTOKEN_DIR}/o200k_base.tiktoken")

# Benchmark (not built by default): bench/tokenizer/run.sh builds it with
#   cmake --build BUILD_DIR --target bench_tokenizer
add_executable(bench_tokenizer EXCLUDE_FROM_ALL bench/tokenizer/bench_tokenizer.c)
target_compile_options(bench_tokenizer PRIVATE ${ZP_WARN})
target_compile_definitions(bench_tokenizer PRIVATE _GNU_SOURCE)
target_link_libraries(bench_tokenizer PRIVATE zephon PkgConfig::JANSSON Threads::Threads m)
