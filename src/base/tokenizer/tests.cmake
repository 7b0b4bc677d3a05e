# src/base/tokenizer/tests.cmake - the tokenizer's tests (include()d after
# zp_add_test is defined). test_tokenizer also runs the `zephon tokenize`
# command (ZP_CLI).
zp_add_test(test_tokenizer SOURCES tests/test_tokenizer.c TIMEOUT 120 LABELS tokenizer)

# tokenizer.json files against Hugging Face tokenizers (live reference from
# tools/tokref.sh): Llama 3, Qwen 3, Gemma 3, Llama 2, GPT-4o and variants,
# on the hostile corpus, cases of issue 21 item 2 and 5,000 random strings.
add_executable(tok_dump tests/tokenizer/tok_dump.c)
target_compile_options(tok_dump PRIVATE ${ZP_WARN})
target_link_libraries(tok_dump PRIVATE zephon)
add_test(NAME test_tokenizer_hf
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/tokenizer/test_hf_parity.sh $<TARGET_FILE:tok_dump>)
set_tests_properties(test_tokenizer_hf PROPERTIES TIMEOUT 900 LABELS "tokenizer;tokref")

# The tiktoken family and the pre-tokenizers against the live references
# (tools/tokref.sh: Python tiktoken and tokenizers): ids, pieces, round trips.
add_executable(tiktoken_check tests/tokenizer/tiktoken_check.c)
target_compile_options(tiktoken_check PRIVATE ${ZP_WARN})
target_compile_definitions(tiktoken_check PRIVATE _GNU_SOURCE)
target_include_directories(tiktoken_check PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_link_libraries(tiktoken_check PRIVATE zephon_static PkgConfig::ZSTD PkgConfig::XXHASH PkgConfig::JANSSON m)
add_test(NAME test_tiktoken_parity
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/tests/tokenizer/test_tiktoken_parity.sh $<TARGET_FILE:tiktoken_check>)
set_tests_properties(test_tiktoken_parity PROPERTIES TIMEOUT 900 LABELS "tokenizer;tokref")

# SentencePiece .model files (spm_model.c) against Python sentencepiece (live
# reference from tools/tokref.sh): BPE and Unigram models trained by the test
# with spm_train, on the hostile corpus, own cases and 5,000 random strings;
# WORD/CHAR models and broken files refused.
add_executable(spm_check tests/tokenizer/spm_check.c)
target_compile_options(spm_check PRIVATE ${ZP_WARN})
target_compile_definitions(spm_check PRIVATE _GNU_SOURCE)
target_include_directories(spm_check PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_link_libraries(spm_check PRIVATE zephon_static PkgConfig::ZSTD PkgConfig::XXHASH PkgConfig::JANSSON m)
add_test(NAME test_spm_parity
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tests/tokenizer/test_spm_parity.py
          $<TARGET_FILE:spm_check> ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(test_spm_parity PROPERTIES TIMEOUT 900 LABELS "tokenizer;tokref")
