# The tokenizer as the rest of Zephon sees it (issue 21, integration): identity,
# EOT/BOS defaults and overrides, BOS/EOT around packed documents, states and
# pre-tokenized shards that record their tokenizer, int32 token storage, Megatron
# path prefixes (tests/test_tokenizers_integration.c), and the command line's
# names for them (tests/tokenize/test_tokenizer_names.sh).
zp_add_test(test_tokenizers_integration
  SOURCES tests/test_tokenizers_integration.c tests/testutil.c TIMEOUT 120 LABELS unit tokenizer)
