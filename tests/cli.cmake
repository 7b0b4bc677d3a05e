# Command-line tests: `zephon run` digests, ids and error paths.
add_test(NAME test_cli_run
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli/test_run.sh $<TARGET_FILE:zephon_cli>)
set_tests_properties(test_cli_run PROPERTIES TIMEOUT 300 LABELS cli)
