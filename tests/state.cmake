# Pipeline states (src/plan/state*.c): JSON render and parse, the settings check,
# merging rank states, the elastic re-split, describe, and the
# `zephon state` command (test_state runs it: it needs zephon_cli built).
zp_add_test(test_state SOURCES tests/test_state.c tests/testutil.c TIMEOUT 120 LABELS unit cli)
add_dependencies(test_state zephon_cli)
# Temporaries that saves killed while writing leave are removed by a later
# save (src/base/fsio.c), nothing else is.
add_test(NAME test_cli_state_sweep
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_state_sweep.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_cli_state_sweep PROPERTIES TIMEOUT 120 LABELS cli)
# Hand-edited states that contradict themselves are refused by --resume
# naming the field (zpi_state_check, src/plan/state_check.c).
add_test(NAME test_cli_state_edits
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_state_edits.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_cli_state_edits PROPERTIES TIMEOUT 120 LABELS cli)
