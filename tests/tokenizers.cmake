# The tokenizer as the rest of Zephon sees it (issue 21, integration): identity,
# EOT/BOS defaults and overrides, BOS/EOT around packed documents, states and
# pre-tokenized shards that record their tokenizer, int32 token storage, Megatron
# path prefixes (tests/test_tokenizers_integration.c), and the command line's
# names for them (tests/tokenize/test_tokenizer_names.sh).
zp_add_test(test_tokenizers_integration
  SOURCES tests/test_tokenizers_integration.c tests/testutil.c TIMEOUT 120 LABELS unit tokenizer)

# The tokenizer benchmark in the suite (issue 21 item 4): bench/tokenizers/run.sh
# on 2 MB, one pass (figures on a loaded machine are not the docs' figures; the
# run fails when a tokenizer's token count differs from its reference's or a
# reference cannot be installed). Not under sanitizers (label nosan).
add_test(NAME bench_tokenizers
  COMMAND ${CMAKE_COMMAND} -E env MB=2 PASSES=1
          sh ${CMAKE_CURRENT_LIST_DIR}/../bench/tokenizers/run.sh ${CMAKE_BINARY_DIR})
set_tests_properties(bench_tokenizers PROPERTIES TIMEOUT 1800 RUN_SERIAL TRUE
  LABELS "tokref;bench;nosan")

# `zephon tokenize --tokenizer X docs.jsonl` prints the reference's ids for the
# tokenizer.json files of Llama 3, Qwen 3, Gemma 3, Llama 2, GPT-4o and for
# cl100k_base / o200k_base (tests/tokenizer/cli_parity.py, references from
# tools/tokref.sh; issue 21's "done when").
if(TARGET zephon_cli)
  add_test(NAME test_tokenize_cli_parity
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/tokenizer/test_cli_parity.sh $<TARGET_FILE:zephon_cli>)
  set_tests_properties(test_tokenize_cli_parity PROPERTIES TIMEOUT 600 LABELS "tokenizer;tokref")
endif()
