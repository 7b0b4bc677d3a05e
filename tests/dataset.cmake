# Dataset tests: record parser and shard formats, datasets and manifests,
# the shard cache, and the `zephon gen` / `zephon index` commands.
zp_add_test(test_format SOURCES tests/test_format.c tests/testutil.c TIMEOUT 60 LABELS unit)
zp_add_test(test_dataset SOURCES tests/test_dataset.c tests/testutil.c TIMEOUT 60 LABELS unit)
# Shards read by segments: reader per format, seek table, bounded cache.
zp_add_test(test_segments SOURCES tests/test_segments.c tests/testutil.c TIMEOUT 120 LABELS unit)
zp_add_test(test_shard_cache SOURCES tests/test_shard_cache.c tests/testutil.c TIMEOUT 60 LABELS unit engine)
zp_add_test(test_dataset_cli SOURCES tests/test_dataset_cli.c tests/testutil.c TIMEOUT 120 LABELS cli)
add_dependencies(test_dataset_cli zephon_cli)
