# Checkpoint and exact resume of whole pipelines (zephon/state.h).
zp_add_test(test_resume SOURCES tests/test_resume.c tests/testutil.c TIMEOUT 600 LABELS engine)
