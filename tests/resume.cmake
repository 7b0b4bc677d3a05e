# Checkpoint and exact resume of whole pipelines (zephon/state.h).
zp_add_test(test_resume SOURCES tests/test_resume.c tests/testutil.c TIMEOUT 600 LABELS engine)
# The coverage certificate's digests: the fold, the stream's digest against
# the plans, pipelines across resumes (exact and elastic), a dropped sample.
zp_add_test(test_coverage SOURCES tests/test_coverage.c tests/testutil.c TIMEOUT 300 LABELS engine)
