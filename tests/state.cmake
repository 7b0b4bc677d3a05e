# Pipeline states (src/plan/state.c): JSON render and parse, the settings check,
# merging rank states, the elastic re-split, describe, and the
# `zephon state` command (test_state runs it: it needs zephon_cli built).
zp_add_test(test_state SOURCES tests/test_state.c tests/testutil.c TIMEOUT 120 LABELS unit cli)
add_dependencies(test_state zephon_cli)
