# Megatron indexed datasets (src/formats/format_megatron.c): the .bin/.idx reader
# for every token dtype, the writer, and bad .idx/.bin files (truncations,
# bit flips, counts that disagree). Run it under ASan too (docs/megatron.md).
zp_add_test(test_megatron SOURCES tests/test_megatron.c tests/testutil.c TIMEOUT 300 LABELS unit)
