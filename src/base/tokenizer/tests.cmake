# src/base/tokenizer/tests.cmake - the tokenizer's tests (include()d after
# zp_add_test is defined). test_tokenizer also runs the `zephon tokenize`
# command (ZP_CLI).
zp_add_test(test_tokenizer SOURCES tests/test_tokenizer.c TIMEOUT 120 LABELS tokenizer)
