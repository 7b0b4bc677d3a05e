# tests/tokenize_cli.cmake - the `zephon tokenize` command
# (tests/tokenize/test_tokenize_cli.sh: output identical to the expected ids
# and to the previous implementation's, threads, zstd, errors).
find_program(ZP_ZSTD_PROGRAM zstd)
if(ZP_ZSTD_PROGRAM)
  add_test(NAME test_tokenize_cli
    COMMAND ${CMAKE_CURRENT_LIST_DIR}/tokenize/test_tokenize_cli.sh
            $<TARGET_FILE:zephon_cli> ${CMAKE_CURRENT_LIST_DIR}/data)
  set_tests_properties(test_tokenize_cli PROPERTIES TIMEOUT 300 LABELS "tokenizer;cli")
else()
  message(WARNING "zstd (the program) not found: test_tokenize_cli is not registered (tools/deps.sh installs it)")
endif()
